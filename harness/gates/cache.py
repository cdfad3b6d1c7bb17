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

CHECKS = ("incremental_vs_full", "padded_vs_unpadded", "graph_vs_torch", "rounding_noise", "row_set_rounding")
GATED_CHECKS = ("incremental_vs_full", "padded_vs_unpadded")   # each needs at least one gated case
TWIN = "full-precision twin"   # the graph label of a twin's cases (harness.evidence.cache.gather)
# A graph that quantizes activations at run time and has no full-precision twin: a gated case may differ by this
# many times the rounding measured between two row sets of a full recompute. A heuristic: incremental decoding
# rounds every step and every cached key/value over other row sets (on the CI model's q8 made by quantize_dynamic,
# 1.9 times the row-set rounding; its past values halved, a cache bug, 7 to 24 times it; docs/gates/cache.md).
ROUNDING_ALLOWANCE = 3.0


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
    graph = f", on the {TWIN}" if case.get("graph") == TWIN else ""
    return f"{case['check']}[prompt {tokens}{row}{graph}]"


@dataclass(frozen=True)
class CacheEvidence(Evidence):
    """The comparisons :func:`harness.evidence.cache.gather` made, the dtype whose tolerance applies, and what
    run-time activation quantization the graph has (``harness.export.dequant_twin.Twin.record``: ``nodes`` by
    kind, ``twin``, ``why_no_twin``; None in evidence recorded before it was)."""

    cases: Sequence[Mapping[str, Any]]
    policy_dtype: str
    activation_quantization: Mapping[str, Any] | None = None


def decide(evidence: CacheEvidence, policy: "CachePolicy") -> Verdict:
    """Pass when every gated case is within its bound (the tolerance of ``evidence.policy_dtype``) and its greedy
    tokens agree often enough.

    A graph that quantizes activations at run time (MatMulNBits at accuracy level 4, or ONNX Runtime's dynamic
    quantization: DynamicQuantizeLinear before integer matmuls) rounds a one-token step and a full call
    differently, by up to several logits on SmolLM2, so its cache logic is gated on its full-precision twin
    (the same nodes, cache and weights, activation quantization removed): the evidence's gated cases come from
    the twin, and the graph's own comparisons and its rounding against the twin (``rounding_noise``) are
    reported, never decisive. Without a twin (a pattern the rewrite does not know) the graph's own cases are
    gated, each allowed :data:`ROUNDING_ALLOWANCE` times the rounding measured between two row sets of a full
    recompute (``row_set_rounding``). Either way the verdict says what was found (figure
    ``activation_quantization``, or a reason when it fails).

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
    for case in cases:
        if case.get("check") not in CHECKS:
            raise EvidenceError(f"cache evidence: unknown check {case.get('check')!r}")
    tolerance = policy.tolerance_for(evidence.policy_dtype)
    found = evidence.activation_quantization
    found = found if isinstance(found, Mapping) and found.get("nodes") else None
    rounding = max((c["max_abs_error"] for c in cases if c["check"] == "row_set_rounding" and _finite(c)),
                   default=0.0)
    allowance = ROUNDING_ALLOWANCE * rounding if found is not None and not found.get("twin") else 0.0
    reasons: list[str] = []
    figures: dict[str, Measurement] = {}
    worst: dict[str, float] = {}
    tied, failed = 0, False   # failed: a gated case failed (what the finding's words speak of)
    for case in cases:
        if not _finite(case):
            reasons.append(f"{_label(case)}: non-finite error or reference "
                           f"({case.get('max_abs_error')!r}, {case.get('reference_max_abs')!r})")
            continue
        err, ref = case["max_abs_error"], case["reference_max_abs"]
        rel = err / ref if ref > 0 else (0.0 if err == 0 else math.inf)
        key = case["check"] + ("" if case.get("gated", True) else "_ungated")
        worst[key + "_abs"] = max(worst.get(key + "_abs", 0.0), err)
        worst[key + "_rel"] = max(worst.get(key + "_rel", 0.0), rel)
        if case.get("gated", True):
            before = len(reasons)
            tied += _judge(case, tolerance, allowance if case["check"] in GATED_CHECKS else 0.0, reasons)
            failed = failed or len(reasons) > before
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
    if found is not None:
        figures["activation_quantization_nodes"] = Measurement(sum(found["nodes"].values()), "count", None)
        if allowance:
            figures["rounding_allowance"] = Measurement(allowance, "logit", None)
        words = _finding(found, worst, rounding, failed)
        if failed:
            reasons.append(words)
        elif not reasons:
            figures["activation_quantization"] = Measurement(words, "finding", None)
    return Verdict.from_checks(reasons, figures)


def _finite(case: Mapping[str, Any]) -> bool:
    return all(isinstance(case.get(k), (int, float)) and math.isfinite(case[k])
               for k in ("max_abs_error", "reference_max_abs"))


def _judge(case: Mapping[str, Any], tolerance: "Tolerance", allowance: float, reasons: list[str]) -> int:
    """One gated case against its bound (plus ``allowance``, the rounding a graph without a twin is allowed) and
    the required greedy agreement; appends what fails to ``reasons``, returns the greedy flips that were ties."""
    err, ref = case["max_abs_error"], case["reference_max_abs"]
    rel = err / ref if ref > 0 else (0.0 if err == 0 else math.inf)
    limit = bound(case, tolerance) + allowance
    if err > limit:
        how = (f"atol + rtol * max|ref| + {ROUNDING_ALLOWANCE:g} x the measured rounding {allowance / ROUNDING_ALLOWANCE:.3g}"
               if allowance else "atol + rtol * max|ref|")
        reasons.append(f"{_label(case)}: max abs error {err:.3g} exceeds {limit:.3g} "
                       f"({how} = {limit:.3g}; max rel error {rel:.3g})")
    agree, total = case.get("greedy_agree"), case.get("greedy_total")
    if not isinstance(total, int) or total <= 0 or not isinstance(agree, int) or not 0 <= agree <= total:
        reasons.append(f"{_label(case)}: invalid greedy agreement counts {agree!r}/{total!r}")
        return 0
    # a greedy flip between two logits closer than the bound is a tie, not a disagreement
    if case["check"] == "incremental_vs_full":
        ties = sum(1 for m in case.get("flip_margins") or [] if 0 <= m <= limit)
        agree = min(total, agree + ties)
    elif case.get("first_flip_margin") is not None and 0 <= case["first_flip_margin"] <= limit:
        ties, agree = total - agree, total
    else:
        ties = 0
    min_agree = tolerance.min_greedy_agreement
    if agree / total < min_agree:
        reasons.append(f"{_label(case)}: greedy tokens agree on {agree}/{total} steps, "
                       f"below the required {min_agree:.0%}")
    return ties


def _finding(found: Mapping[str, Any], worst: Mapping[str, float], rounding: float, failed: bool) -> str:
    """The verdict's words for a graph that quantizes activations at run time: what was found, what the graph's
    own incremental and full logits differ by, and what the twin (or the rounding allowance) says of the cache."""
    counts = []
    for kind, n in found["nodes"].items():
        op, _, rest = str(kind).partition(" at ")
        counts.append(f"{n} {op} node{'' if n == 1 else 's'}" + (f" at {rest}" if rest else ""))
    what = f"this graph quantizes activations at run time ({', '.join(counts)})"
    if found.get("twin"):
        own = worst.get("incremental_vs_full_ungated_abs", math.nan)
        if failed:
            return (f"{what}, but the failures above are on its {TWIN} (activation quantization removed), which "
                    f"does not round activations: that rounding does not explain them (on the graph itself "
                    f"incremental and full logits differ by up to {own:.3g}, a left-padded row and the row alone by "
                    f"up to {worst.get('padded_vs_unpadded_ungated_abs', math.nan):.3g})")
        return (f"{what}: incremental and full logits differ by up to {own:.3g} from that rounding; on its {TWIN} "
                f"(activation quantization removed) they agree to {worst.get('incremental_vs_full_abs', math.nan):.3g}"
                f": the cache is right")
    why = found.get("why_no_twin") or "no pattern to rewrite"
    measured = (f"full recomputes of the same positions over two row sets differ by up to {rounding:.3g} from that "
                f"rounding, and each case is allowed {ROUNDING_ALLOWANCE:g} times that")
    if failed:
        return f"{what} and no {TWIN} was derived ({why}): {measured}, and the differences above exceed even that"
    return (f"{what} and no {TWIN} was derived ({why}): {measured}; incremental and full logits differ by up to "
            f"{worst.get('incremental_vs_full_abs', math.nan):.3g}: within it, the cache is right")


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
