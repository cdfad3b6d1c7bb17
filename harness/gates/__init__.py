"""Each gate's rule: a pure function from recorded evidence and a policy to a Verdict.

``APPLICABLE`` says which dtypes each gate applies to; the report uses it to tell
a variant that passed everything from one that was never measured on a gate.
"""

from ..campaign import PEER_GENAI

APPLICABLE: dict[str, tuple[str, ...]] = {
    "cache": ("fp32", "q8", "q4"),
    "quantization": ("q8", "q4"),
    "behavior": ("fp32", "q8", "q4"),
    "throughput_native": ("fp32", "q8", "q4", PEER_GENAI),
    "throughput_browser": ("fp32", "q8", "q4"),
}
# A peer graph (another tool's export) is measured beside the variants, never qualified; ORT-GenAI's
# int4 build runs on ONNX Runtime, so it goes through the cache, quantization and behavior gates too.
for _gate in ("cache", "quantization", "behavior"):
    APPLICABLE[_gate] += (PEER_GENAI,)
