"""llama.cpp on the original GGUF a model was converted from: a peer lane, never qualified."""

from .peer_ortgenai import PeerPolicy
from .lanes import decide
from .spec import GateSpec

SPEC = GateSpec(
    name="peer_llamacpp", level="variant", applies_to=("gguf",), policy=PeerPolicy, decide=decide, required=False,
    describe="llama.cpp (llama-cpp-python) on the original GGUF: decode tokens/s, agreement with our fp32 graph")
