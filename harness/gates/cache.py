"""The cache-allclose rule: incremental decoding, padding and the fp32 graph against their references."""

from __future__ import annotations

import math
from typing import Any, Mapping

from ..errors import EvidenceError
from ..verdict import Measurement, Verdict

CHECKS = ("incremental_vs_full", "padded_vs_unpadded", "graph_vs_torch", "rounding_noise")
GATED_CHECKS = ("incremental_vs_full", "padded_vs_unpadded")   # each needs at least one gated case


def bound(case: Mapping[str, Any], tolerance: Mapping[str, float]) -> float:
    """The allowed max absolute error: atol + rtol * max |reference| (a norm-wise allclose).

    The graph-vs-PyTorch check uses ``reference_atol``/``reference_rtol`` where the
    policy gives them: two runtimes differ by more than one graph against itself.
    """
    if case["check"] == "graph_vs_torch":
        atol = tolerance.get("reference_atol", tolerance["atol"])
        rtol = tolerance.get("reference_rtol", tolerance["rtol"])
    else:
        atol, rtol = tolerance["atol"], tolerance["rtol"]
    return atol + rtol * case["reference_max_abs"]


def _label(case: Mapping[str, Any]) -> str:
    tokens = case["prompt_tokens"]
    tokens = "+".join(map(str, tokens)) if isinstance(tokens, list) else str(tokens)
    row = f", row {case['row']}" if case.get("row") is not None else ""
    return f"{case['check']}[prompt {tokens}{row}]"


def decide(evidence: Mapping[str, Any], tolerance: Mapping[str, float]) -> Verdict:
    """Pass when every gated case is within its bound and its greedy tokens agree often enough.

    A graph computing with int8 activations (MatMulNBits accuracy level 4) rounds a one-token step
    and a full call differently, by up to several logits on SmolLM2, so its cache logic is gated on
    its fp32-compute twin (the same nodes, cache and weights, accuracy level 0): the evidence's
    gated cases come from the twin, and the int8 graph's own comparisons and its rounding against
    the twin (``rounding_noise``) are reported, never decisive.

    ``evidence["cases"]`` holds one record per comparison: ``check`` (one of
    :data:`CHECKS`), ``gated``, ``max_abs_error``, ``reference_max_abs``,
    ``elements``, ``greedy_agree`` and ``greedy_total``.  Cases with ``gated``
    false (a quantized graph against PyTorch) are reported, never decisive.
    A check family with no gated case at all is itself a failure: a gate that
    measured nothing cannot pass.
    """
    cases = evidence.get("cases")
    if not isinstance(cases, list) or not cases:
        raise EvidenceError("cache evidence has no cases")
    min_agree = tolerance.get("min_greedy_agreement", 1.0)
    reasons: list[str] = []
    figures: dict[str, Measurement] = {}
    worst: dict[str, float] = {}
    for case in cases:
        if case.get("check") not in CHECKS:
            raise EvidenceError(f"cache evidence: unknown check {case.get('check')!r}")
    tied = 0
    for case in cases:
        err, ref = case.get("max_abs_error"), case.get("reference_max_abs")
        if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in (err, ref)):
            reasons.append(f"{_label(case)}: non-finite error or reference ({err!r}, {ref!r})")
            continue
        rel = err / ref if ref > 0 else (0.0 if err == 0 else math.inf)
        key = case["check"] + ("" if case.get("gated", True) else "_ungated")
        worst[key + "_abs"] = max(worst.get(key + "_abs", 0.0), err)
        worst[key + "_rel"] = max(worst.get(key + "_rel", 0.0), rel)
        agree, total = case.get("greedy_agree"), case.get("greedy_total")
        if not case.get("gated", True):
            continue
        limit = bound(case, tolerance)
        if err > limit:
            reasons.append(f"{_label(case)}: max abs error {err:.3g} exceeds {limit:.3g} "
                           f"(atol + rtol * max|ref| = {limit:.3g}; max rel error {rel:.3g})")
        if not isinstance(total, int) or total <= 0 or not isinstance(agree, int) or not 0 <= agree <= total:
            reasons.append(f"{_label(case)}: invalid greedy agreement counts {agree!r}/{total!r}")
            continue
        # a greedy flip between two logits closer than the bound is a tie, not a disagreement
        if case["check"] == "incremental_vs_full":
            ties = sum(1 for m in case.get("flip_margins") or [] if 0 <= m <= limit)
            agree = min(total, agree + ties)
        elif case.get("first_flip_margin") is not None and 0 <= case["first_flip_margin"] <= limit:
            ties, agree = total - agree, total
        else:
            ties = 0
        tied += ties
        if agree / total < min_agree:
            reasons.append(f"{_label(case)}: greedy tokens agree on {agree}/{total} steps, "
                           f"below the required {min_agree:.0%}")
    figures["greedy_ties_within_bound"] = Measurement(tied, "count", None)
    for check in CHECKS:
        gated = [c for c in cases if c.get("check") == check and c.get("gated", True)]
        if check in GATED_CHECKS and not gated:
            reasons.append(f"{check}: no gated case was measured")
        agree = sum(c.get("greedy_agree", 0) for c in gated)
        total = sum(c.get("greedy_total", 0) for c in gated)
        if total:
            figures[f"{check}_greedy_agreement"] = Measurement(agree / total, "fraction", total)
    for key, value in worst.items():
        figures[f"{key.removesuffix('_abs').removesuffix('_rel')}_max_{'abs' if key.endswith('_abs') else 'rel'}_error"] = \
            Measurement(value, "logit" if key.endswith("_abs") else "ratio", None)
    figures["cases"] = Measurement(len(cases), "count", None)
    return Verdict.from_checks(reasons, figures)
