"""The native throughput gate: the C++ probe on the ONNX Runtime C API, per variant and on ORT-GenAI's graph."""

from dataclasses import dataclass

from .lanes import LanePolicy, decide
from .spec import GateSpec


@dataclass(frozen=True)
class NativePolicy(LanePolicy):
    # our fp32 graph against Python onnxruntime, and the probe on ORT-GenAI's graph against ORT-GenAI's own loop
    require_parity_dtypes: tuple[str, ...] = ("fp32", "ort-genai-int4")


SPEC = GateSpec(
    name="throughput_native", level="variant", applies_to=("fp32", "q8", "q4", "ort-genai-int4"), policy=NativePolicy,
    decide=decide,
    describe="decode tokens/s and prefill ms of the native probe on the shared workload, greedy-id parity on fp32")
