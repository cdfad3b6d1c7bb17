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


def summarize(repeats: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Pooled decode tok/s, its CV over repeats, median prefill and IQR, from :func:`repeat_figures` dicts."""
    if not repeats:
        raise EvidenceError("no measured repeats")
    tokens = sum(r["decode_tokens"] for r in repeats)
    seconds = sum(r["decode_s"] for r in repeats)
    rates = [r["decode_tok_s"] for r in repeats]
    prefill = [r["prefill_ms"] for r in repeats]
    return {
        "repeats": len(repeats),
        "decode_tokens": tokens,
        "decode_s": seconds,
        "decode_tok_s": tokens / seconds,
        "decode_tok_s_cv": _stats.coefficient_of_variation(rates) if len(rates) > 1 else None,
        "prefill_ms_median": float(statistics.median(prefill)),
        "prefill_ms_iqr": float(_stats.iqr(prefill)),
    }


def needs_more(rates: Sequence[float], repeats: int, max_repeats: int, cv_limit: float) -> bool:
    """Another repeat is due below ``repeats``, or while the CV exceeds ``cv_limit`` below ``max_repeats``."""
    n = len(rates)
    if n < repeats:
        return True
    if n >= max_repeats:
        return False
    cv = _stats.coefficient_of_variation(rates)
    return cv != cv or cv > cv_limit  # NaN (a zero mean) counts as unstable


def agreement(candidate: Sequence[int], reference: Sequence[int]) -> dict[str, Any]:
    """Greedy-id agreement: equal positions over the reference length, and the first divergence."""
    n = len(reference)
    same = sum(1 for a, b in zip(candidate, reference) if a == b)
    first = next((i for i, (a, b) in enumerate(zip(candidate, reference)) if a != b), None)
    if first is None and len(candidate) != n:
        first = min(len(candidate), n)
    return {"equal": same, "of": n, "fraction": same / n if n else None, "first_divergence": first,
            "identical": list(candidate) == list(reference)}
