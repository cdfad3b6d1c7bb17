# The toy gate's files are copied into a sandbox project by suites/harness/test_adding_a_gate.py and run there;
# this checkout's own run does not collect them (the gate is not registered here).
collect_ignore = ["test_toy_ratio.py", "toy_ratio.py"]
