"""wllama (llama.cpp compiled to WebAssembly, npm @wllama/wllama) on the original GGUF in the same Chromium as the
onnxruntime-web lanes: the browser peer, never qualified."""

from .lanes import FIGURES, LaneEvidence, decide
from .peer_ortgenai import PeerPolicy
from .spec import GateSpec

SPEC = GateSpec(
    name="peer_wllama", level="variant", applies_to=("gguf",), policy=PeerPolicy, evidence=LaneEvidence, decide=decide, figures=FIGURES, required=False,
    describe="wllama (llama.cpp in WebAssembly) on the original GGUF in Chromium: decode tokens/s, agreement with "
             "our fp32 graph on the re-tokenized text (informational)")
