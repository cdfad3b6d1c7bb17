"""Pure statistics of one throughput lane: what a generation measured, pooled over repeats.

Decode excludes the first generated token (it belongs to prefill): a generation of ``n`` tokens
stamped at ``t_1 .. t_n`` ms (from the start of the request) decodes ``n - 1`` tokens in
``t_n - t_1`` ms. The pooled rate is total decode tokens over total decode seconds, not a mean of
per-repeat rates (which overweights fast repeats). Variation is the coefficient of variation of
the per-repeat rates (sample standard deviation over the mean). The per-repeat rates themselves are kept
(``decode_tok_s_samples``, in repeat order): a comparison of two runs (``harness.compare``) ranks them.
"""

from __future__ import annotations

import statistics
from typing import Any, Sequence

from .. import stats as _stats
from ..errors import EvidenceError


def figures(token_ms: Sequence[float], ids: Sequence[int], expected_tokens: int) -> dict[str, Any]:
    """Prefill ms, decode tokens and seconds of one generation from its per-token stamps.

    Refuses a generation that produced a different number of tokens than asked (the workload
    ignores EOS), stamps that go backwards, or a decode that took no measurable time."""
    if len(ids) != expected_tokens:
        raise EvidenceError(f"generated {len(ids)} tokens, the workload asks for {expected_tokens}")
    if len(token_ms) != len(ids):
        raise EvidenceError(f"{len(token_ms)} token stamps for {len(ids)} generated tokens")
    return stamp_figures(token_ms)


def stamp_figures(token_ms: Sequence[float]) -> dict[str, Any]:
    """Prefill ms, decode tokens and seconds from per-token stamps alone (every lane's common core)."""
    if len(token_ms) < 2:
        raise EvidenceError(f"a generation needs at least 2 tokens to time decoding, got {len(token_ms)}")
    if token_ms[0] < 0 or any(b < a for a, b in zip(token_ms, token_ms[1:])):
        raise EvidenceError("token stamps go backwards")
    decode_s = (token_ms[-1] - token_ms[0]) / 1000.0
    if decode_s <= 0:
        raise EvidenceError("decode took no measurable time")
    tokens = len(token_ms) - 1
    return {"prefill_ms": float(token_ms[0]), "decode_tokens": tokens, "decode_s": decode_s,
            "decode_tok_s": tokens / decode_s, "total_ms": float(token_ms[-1])}


def pooled_rate(tokens: Sequence[int], seconds: Sequence[float]) -> float:
    """Total tokens over total seconds."""
    total_s = float(sum(seconds))
    if total_s <= 0:
        raise EvidenceError("no decode time to pool")
    return float(sum(tokens)) / total_s


def summarize(repeats: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Pooled decode tok/s with its CV over repeats, median prefill with its IQR, from :func:`figures`;
    and the per-repeat decode tok/s and prefill ms in repeat order (``decode_tok_s_samples``,
    ``prefill_ms_samples``), which a rank test between two runs needs and a summary cannot give back."""
    if not repeats:
        raise EvidenceError("no measured repeats")
    rates = [r["decode_tok_s"] for r in repeats]
    prefill = [r["prefill_ms"] for r in repeats]
    cv = _stats.coefficient_of_variation(rates) if len(rates) > 1 else None
    return {
        "repeats": len(repeats),
        "decode_tokens": int(sum(r["decode_tokens"] for r in repeats)),
        "decode_s": float(sum(r["decode_s"] for r in repeats)),
        "decode_tok_s": pooled_rate([r["decode_tokens"] for r in repeats], [r["decode_s"] for r in repeats]),
        "decode_tok_s_median": float(statistics.median(rates)),
        "decode_tok_s_iqr": float(_stats.iqr(rates)),
        "decode_tok_s_cv": None if cv is None or cv != cv else cv,
        "prefill_ms_median": float(statistics.median(prefill)),
        "prefill_ms_iqr": float(_stats.iqr(prefill)),
        "decode_tok_s_samples": [float(r) for r in rates],
        "prefill_ms_samples": [float(p) for p in prefill],
    }


def needs_more(rates: Sequence[float], repeats: int, max_repeats: int, cv_limit: float) -> bool:
    """Another repeat is due below ``repeats``, or while the CV of the rates exceeds ``cv_limit``
    and fewer than ``max_repeats`` were taken (the bound on extra repeats)."""
    n = len(rates)
    if n < repeats:
        return True
    if n >= max_repeats:
        return False
    cv = _stats.coefficient_of_variation(rates)
    return cv != cv or cv > cv_limit  # NaN (fewer than two rates, or a zero mean) counts as unstable


def agreement(candidate: Sequence[int], reference: Sequence[int]) -> dict[str, Any]:
    """Greedy-id agreement: equal positions over the reference length, and the first divergence."""
    n = len(reference)
    same = sum(1 for a, b in zip(candidate, reference) if a == b)
    first = next((i for i, (a, b) in enumerate(zip(candidate, reference)) if a != b), None)
    if first is None and len(candidate) != n:
        first = min(len(candidate), n)
    return {"equal": same, "of": n, "fraction": same / n if n else None, "first_divergence": first,
            "identical": list(candidate) == list(reference)}


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either is unknown or the denominator is not positive."""
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return float(numerator) / float(denominator)


def paired_ratio(a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Median over interleaved rounds of (a's decode tok/s / b's) in the same round, with its IQR.

    Both lanes ran back to back in each round, so drift in the machine's load largely cancels in
    each round's ratio; the median resists the rounds where another process took a core. Warm-up records
    (``warmup`` true: no round, no figures) are skipped."""
    rb = {r["round"]: r["decode_tok_s"] for r in b if not r.get("warmup")}
    ratios = [r["decode_tok_s"] / rb[r["round"]] for r in a
              if not r.get("warmup") and r["round"] in rb and rb[r["round"]] > 0]
    if not ratios:
        return {"median": None, "iqr": None, "rounds": 0}
    return {"median": float(statistics.median(ratios)), "iqr": float(_stats.iqr(ratios)), "rounds": len(ratios)}
