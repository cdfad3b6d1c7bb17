"""ORT-GenAI's own generator loop on its int4 export of the same HF directory: a peer lane, never qualified."""

from dataclasses import dataclass

from .lanes import FIGURES, LaneEvidence, LanePolicy, decide, parity_dtypes
from .spec import GateSpec


@dataclass(frozen=True)
class PeerPolicy(LanePolicy):
    require_parity_dtypes: tuple[str, ...] = parity_dtypes(())   # another tool's export: agreement is informational


SPEC = GateSpec(
    name="peer_ortgenai", level="variant", applies_to=("ort-genai-int4", "ort-genai-kquant"), policy=PeerPolicy, evidence=LaneEvidence, decide=decide, figures=FIGURES,
    required=False,
    describe="ORT-GenAI's own loop on its int4 build: decode tokens/s, agreement with our fp32 graph (informational)")
