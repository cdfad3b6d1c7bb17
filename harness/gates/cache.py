"""The cache-allclose rule: incremental decoding, padding and the fp32 graph against their references."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .. import fields
from ..domain import DTYPES, PEERS
from ..errors import EvidenceError
from ..fields import Where, knob
from ..verdict import Measurement, Verdict
from .spec import Evidence, Figure, GateSpec, Policy

CHECKS = ("incremental_vs_full", "padded_vs_unpadded", "graph_vs_torch", "rounding_noise")
GATED_CHECKS = ("incremental_vs_full", "padded_vs_unpadded")   # each needs at least one gated case


def bound(case: Mapping[str, Any], tolerance: "Tolerance") -> float:
    """The allowed max absolute error: atol + rtol * max |reference| (a norm-wise allclose).

    The graph-vs-PyTorch check uses ``reference_atol``/``reference_rtol`` where the
    policy gives them: two runtimes differ by more than one graph against itself.
    """
    atol, rtol = tolerance.atol, tolerance.rtol
    if case["check"] == "graph_vs_torch":
        atol = atol if tolerance.reference_atol is None else tolerance.reference_atol
        rtol = rtol if tolerance.reference_rtol is None else tolerance.reference_rtol
    return atol + rtol * case["reference_max_abs"]


def _label(case: Mapping[str, Any]) -> str:
    tokens = case["prompt_tokens"]
    tokens = "+".join(map(str, tokens)) if isinstance(tokens, list) else str(tokens)
    row = f", row {case['row']}" if case.get("row") is not None else ""
    return f"{case['check']}[prompt {tokens}{row}]"


@dataclass(frozen=True)
class CacheEvidence(Evidence):
    """The comparisons :func:`harness.evidence.cache.gather` made, and the dtype whose tolerance applies."""

    cases: Sequence[Mapping[str, Any]]
    policy_dtype: str


def decide(evidence: CacheEvidence, policy: "CachePolicy") -> Verdict:
    """Pass when every gated case is within its bound (the tolerance of ``evidence.policy_dtype``) and its greedy
    tokens agree often enough.

    A graph computing with int8 activations (MatMulNBits accuracy level 4) rounds a one-token step
    and a full call differently, by up to several logits on SmolLM2, so its cache logic is gated on
    its fp32-compute twin (the same nodes, cache and weights, accuracy level 0): the evidence's
    gated cases come from the twin, and the int8 graph's own comparisons and its rounding against
    the twin (``rounding_noise``) are reported, never decisive.

    ``evidence.cases`` holds one record per comparison: ``check`` (one of
    :data:`CHECKS`), ``gated``, ``max_abs_error``, ``reference_max_abs``,
    ``elements``, ``greedy_agree`` and ``greedy_total``.  Cases with ``gated``
    false (a quantized graph against PyTorch) are reported, never decisive.
    A check family with no gated case at all is itself a failure: a gate that
    measured nothing cannot pass.
    """
    cases = evidence.cases
    if not isinstance(cases, (list, tuple)) or not cases:
        raise EvidenceError("cache evidence has no cases")
    tolerance = policy.tolerance_for(evidence.policy_dtype)
    min_agree = tolerance.min_greedy_agreement
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


def _pads(where: Where, value: Any) -> tuple[int, int]:
    if not isinstance(value, list) or len(value) != 2:
        raise where.fail(f"expected two prompt lengths [short, long], got {value!r}")
    return tuple(fields.integer(where.child(i), n, minimum=1) for i, n in enumerate(value))  # type: ignore[return-value]


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    reference_atol: float | None = None
    reference_rtol: float | None = None
    min_greedy_agreement: float = knob(1.0, hi=1.0)


@dataclass(frozen=True)
class CachePolicy(Policy):
    """``[policy.cache]``: decode steps, prompt and padding lengths, and a tolerance per dtype."""

    REQUIRED = True
    steps: int = knob(8, lo=1, required=True)
    prompt_lengths: tuple[int, ...] = knob((1,), lo=1, required=True)   # must include 1 (checked in finish)
    pad_lengths: tuple[int, int] = knob((5, 40), read=_pads)
    tolerance: dict[str, Tolerance] = knob(None, required=True, keys=lambda k: k in DTYPES,
                                           keys_doc=f"unknown dtype (known: {', '.join(DTYPES)})")

    @classmethod
    def finish(cls, values: dict[str, Any], where: Where) -> dict[str, Any]:
        if 1 not in values["prompt_lengths"]:
            raise where.child("prompt_lengths").fail(
                f"expected a list of integers that includes 1, got {list(values['prompt_lengths'])!r}")
        return values

    def tolerance_for(self, dtype: str) -> Tolerance:
        """The tolerance of a variant's dtype, or of the dtype a peer graph is held to."""
        key = PEERS[dtype].policy_dtype if dtype in PEERS else dtype
        if key not in self.tolerance:
            raise EvidenceError(f"policy.cache.tolerance has no entry for {key!r}")
        return self.tolerance[key]


SPEC = GateSpec(
    name="cache", level="variant", applies_to=("fp32", "q8", "q4", "recipe", "ort-genai-int4", "ort-genai-kquant"), policy=CachePolicy,
    evidence=CacheEvidence, decide=decide, figures=(
        Figure("incremental_vs_full_max_abs_error", "logit", "lower", table=True),
        Figure("padded_vs_unpadded_max_abs_error", "logit", "lower", table=True),
        Figure("graph_vs_torch_max_abs_error", "logit", "lower", table=True),
        Figure("greedy_ties_within_bound", "count"), Figure("cases", "count")),
    describe="incremental decoding with past key/values, a left-padded batch and the fp32 graph against "
             "full recompute and PyTorch, within atol + rtol * max|ref|, greedy agreement")
