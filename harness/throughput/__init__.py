"""Native throughput: the C++ probe, the Python onnxruntime lane and the ORT-GenAI and llama.cpp peers on
the shared workload (harness/workload.py); pure statistics and rules in ``stats`` and ``rule``."""
