"""The Python onnxruntime lane: the same graphs and workload through onnxruntime's Python API (numpy feeds)."""

from .lanes import FIGURES, LaneEvidence, LanePolicy, decide
from .spec import GateSpec

SPEC = GateSpec(
    name="throughput_python", level="variant", applies_to=("fp32", "q8", "q4"), policy=LanePolicy, evidence=LaneEvidence, decide=decide, figures=FIGURES,
    required=False,
    describe="decode tokens/s of Python onnxruntime on the shared workload (the probe's baseline)")
