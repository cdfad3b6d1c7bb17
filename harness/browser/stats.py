"""Pure statistics of the browser lane: what one generation measured, pooled over repeats.

Decode rate excludes the first generated token (it belongs to prefill): a repeat of ``n`` tokens
stamped at ``t_1 .. t_n`` ms decodes ``n - 1`` tokens in ``t_n - t_1`` ms.  The pooled rate is total
decode tokens over total decode seconds (not a mean of rates, which overweights fast repeats).
"""

from __future__ import annotations

import statistics
from typing import Any, Sequence

from .. import stats as _stats
from ..errors import EvidenceError


def repeat_figures(token_ms: Sequence[float]) -> dict[str, float | int]:
    """Prefill ms (start to the first token) and decode tokens / seconds of one generation."""
    if len(token_ms) < 2:
        raise EvidenceError(f"a generation needs at least 2 token stamps to time decoding, got {len(token_ms)}")
    if any(b < a for a, b in zip(token_ms, token_ms[1:])):
        raise EvidenceError("token stamps go backwards")
    decode_s = (token_ms[-1] - token_ms[0]) / 1000.0
    if decode_s <= 0:
        raise EvidenceError("decode took no measurable time")
    tokens = len(token_ms) - 1
    return {"prefill_ms": float(token_ms[0]), "decode_tokens": tokens, "decode_s": decode_s,
            "decode_tok_s": tokens / decode_s}


# Pooling, the bounded "more repeats" rule and greedy agreement are the native lane's, shared so that
# both lanes summarize a workload the same way.
from ..throughput.stats import agreement, needs_more, summarize  # noqa: E402,F401
