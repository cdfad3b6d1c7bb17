"""The cache-allclose rule: incremental decoding, padding and the fp32 graph against their references."""

from __future__ import annotations

import math
from typing import Any, Mapping

from dataclasses import dataclass

from .. import fields
from ..domain import DTYPES, PEERS
from ..errors import EvidenceError
from ..fields import Where
from ..verdict import Measurement, Verdict
from .spec import GateSpec, Policy

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


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    reference_atol: float | None = None
    reference_rtol: float | None = None
    min_greedy_agreement: float = 1.0

    def as_mapping(self) -> dict[str, float]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass(frozen=True)
class CachePolicy(Policy):
    """``[policy.cache]``: decode steps, prompt and padding lengths, and a tolerance per dtype."""

    REQUIRED = True
    steps: int = 8
    prompt_lengths: tuple[int, ...] = (1,)
    pad_lengths: tuple[int, int] = (5, 40)
    tolerance: dict[str, Tolerance] = None  # type: ignore[assignment]

    @classmethod
    def parse(cls, raw, where: Where) -> "CachePolicy":
        if raw is None:
            raise where.fail("missing table")
        fields.table(where, raw, {"steps", "prompt_lengths", "pad_lengths", "tolerance"}, required=("steps", "tolerance"))
        steps = fields.integer(where.child("steps"), raw["steps"], minimum=1)
        lengths = raw.get("prompt_lengths")
        if not isinstance(lengths, list) or 1 not in lengths:
            raise where.child("prompt_lengths").fail(f"expected a list of integers that includes 1, got {lengths!r}")
        lengths = tuple(fields.integer(where.child("prompt_lengths").child(i), n, minimum=1) for i, n in enumerate(lengths))
        pads = raw.get("pad_lengths", [5, 40])
        if not isinstance(pads, list) or len(pads) != 2:
            raise where.child("pad_lengths").fail(f"expected two prompt lengths [short, long], got {pads!r}")
        pads = tuple(fields.integer(where.child("pad_lengths").child(i), n, minimum=1) for i, n in enumerate(pads))
        tol_where = where.child("tolerance")
        tol = {}
        for dtype, entry in fields.table(tol_where, raw["tolerance"]).items():
            w = tol_where.child(dtype)
            if dtype not in DTYPES:
                raise w.fail(f"unknown dtype {dtype!r} (known: {', '.join(DTYPES)})")
            fields.table(w, entry, {"atol", "rtol", "reference_atol", "reference_rtol", "min_greedy_agreement"},
                         required=("atol", "rtol"))
            values = {k: fields.number(w.child(k), v) for k, v in entry.items()}
            if "min_greedy_agreement" in values:
                fields.number(w.child("min_greedy_agreement"), values["min_greedy_agreement"], 0.0, 1.0)
            tol[dtype] = Tolerance(**values)
        return cls(steps=steps, prompt_lengths=lengths, pad_lengths=pads, tolerance=tol)

    def tolerance_for(self, dtype: str) -> Tolerance:
        """The tolerance of a variant's dtype, or of the dtype a peer graph is held to."""
        key = PEERS[dtype].policy_dtype if dtype in PEERS else dtype
        if key not in self.tolerance:
            raise EvidenceError(f"policy.cache.tolerance has no entry for {key!r}")
        return self.tolerance[key]


def decide_gate(evidence: Mapping[str, Any], policy: CachePolicy) -> Verdict:
    """The gate's decision: :func:`decide` at the tolerance of ``evidence["policy_dtype"]``."""
    return decide(evidence, policy.tolerance_for(evidence["policy_dtype"]).as_mapping())


SPEC = GateSpec(
    name="cache", level="variant", applies_to=("fp32", "q8", "q4", "recipe", "ort-genai-int4", "ort-genai-kquant"), policy=CachePolicy,
    decide=decide_gate,
    describe="incremental decoding with past key/values, a left-padded batch and the fp32 graph against "
             "full recompute and PyTorch, within atol + rtol * max|ref|, greedy agreement")
