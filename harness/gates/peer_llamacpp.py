"""llama.cpp on the original GGUF a model was converted from: a peer lane, never qualified."""

from .lanes import FIGURES, LaneEvidence, decide
from .peer_ortgenai import PeerPolicy
from .spec import GateSpec

SPEC = GateSpec(
    name="peer_llamacpp", level="variant", applies_to=("gguf",), policy=PeerPolicy, evidence=LaneEvidence, decide=decide, figures=FIGURES, required=False,
    describe="llama.cpp (llama-cpp-python) on the original GGUF: decode tokens/s, agreement with our fp32 graph")
