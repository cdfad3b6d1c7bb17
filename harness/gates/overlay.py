"""The skill-overlay gates (issue 17, seed 004): ``overlay_delta`` and ``overlay_quality``.

An overlay (:mod:`harness.overlay`) replaces chosen tensors of a backbone graph with a donor's, encoded as
the backbone encodes them and applied by ONNX Runtime at session creation. The gates judge one overlay of
one model's graph (parametrized model x dtype x overlay); they are run-level: a skill is qualified beside
its backbone, it never changes the backbone variant's qualification.

- ``overlay_delta``: the delta rule's figures (kept / dropped tensors, relative deltas, bytes saved) and
  storage: the overlay must keep at least one tensor (the builder refuses otherwise) and be smaller than
  the backbone graph (storage grows by the deltas only).
- ``overlay_quality``: held-out perplexity through the real runtime, backbone against overlaid (the same
  graph the lanes measure, the overlay applied by onnxruntime): on the general held-out text the overlay may
  raise perplexity by at most ``max_general_rise``; on the held-out *domain* text it must lower it by at
  least ``min_domain_gain`` (it does what it claims).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from .. import fmt
from ..fields import knob
from ..verdict import Measurement, Verdict
from .spec import Evidence, Figure, GateSpec, Policy
from .winrule import not_gated

if TYPE_CHECKING:
    from ..view import ReceiptView


@dataclass(frozen=True)
class DeltaPolicy(Policy):
    """``[policy.overlay_delta]``: ``min_delta`` (relative Frobenius change below which a tensor is dropped)."""

    min_delta: float = knob(1e-3, hi=1.0)


@dataclass(frozen=True)
class DeltaEvidence(Evidence):
    """The overlay builder's record."""

    delta: Mapping[str, Any]        # kept, dropped (tensor names), min, median, max (relative Frobenius deltas)
    overlay_bytes: int
    backbone_bytes: int
    bytes_saved: int


def decide_delta(evidence: DeltaEvidence, policy: DeltaPolicy) -> Verdict:
    d = evidence.delta
    reasons = []
    if not d["kept"]:
        reasons.append(f"the overlay keeps no tensor at min_delta {policy.min_delta:g}")
    if evidence.overlay_bytes >= evidence.backbone_bytes:
        reasons.append(f"the overlay ({evidence.overlay_bytes} bytes) is not smaller than the backbone graph "
                       f"({evidence.backbone_bytes} bytes)")
    figures = {"kept_tensors": Measurement(len(d["kept"]), "tensors"),
               "dropped_tensors": Measurement(len(d["dropped"]), "tensors"),
               "delta_min": Measurement(d["min"], "relative"), "delta_median": Measurement(d["median"], "relative"),
               "delta_max": Measurement(d["max"], "relative"),
               "overlay_bytes": Measurement(evidence.overlay_bytes, "bytes"),
               "backbone_bytes": Measurement(evidence.backbone_bytes, "bytes"),
               "bytes_saved": Measurement(evidence.bytes_saved, "bytes")}
    return Verdict.from_checks(reasons, figures)


@dataclass(frozen=True)
class QualityPolicy(Policy):
    """``[policy.overlay_quality]``: ``max_general_rise`` (fraction of general held-out perplexity the overlay
    may add), ``min_domain_gain`` (fraction of held-out domain perplexity it must remove), ``context`` and
    ``max_tokens`` of the scored windows."""

    max_general_rise: float = 0.05
    min_domain_gain: float = knob(0.02, hi=1.0)
    context: int = knob(128, lo=8)
    max_tokens: int = knob(2048, lo=16)


@dataclass(frozen=True)
class QualityEvidence(Evidence):
    """Per scored token of the general and the domain held-out text: ``{"nll_reference": [...], "nll_candidate":
    [...]}`` (reference = the backbone, candidate = the overlaid graph; harness.evidence.quantization)."""

    general: Mapping[str, Sequence[float]]
    domain: Mapping[str, Sequence[float]]


def perplexity(nll: Sequence[float]) -> float:
    return math.exp(math.fsum(nll) / len(nll))


def decide_quality(evidence: QualityEvidence, policy: QualityPolicy) -> Verdict:
    reasons, figures = [], {}
    for part in ("general", "domain"):
        e = getattr(evidence, part)
        if not e["nll_reference"] or len(e["nll_reference"]) != len(e["nll_candidate"]):
            reasons.append(f"{part}: no scored tokens (or unequal counts): the held-out text is too short")
            continue
        b, o = perplexity(e["nll_reference"]), perplexity(e["nll_candidate"])
        n = len(e["nll_reference"])
        figures[f"{part}_ppl_backbone"] = Measurement(b, "ppl", n)
        figures[f"{part}_ppl_overlaid"] = Measurement(o, "ppl", n)
        change = o / b - 1
        figures[f"{part}_ppl_change"] = Measurement(change, "fraction", n)
        if part == "general" and change > policy.max_general_rise:
            reasons.append(f"general held-out perplexity rose {change:+.2%} ({b:.3f} -> {o:.3f}), more than the "
                           f"allowed {policy.max_general_rise:.2%}")
        if part == "domain" and -change < policy.min_domain_gain:
            reasons.append(f"held-out domain perplexity changed {change:+.2%} ({b:.3f} -> {o:.3f}); the overlay must "
                           f"lower it by at least {policy.min_domain_gain:.2%}")
    return Verdict.from_checks(reasons, figures)


OVERLAY_GATES = ("overlay_delta", "overlay_quality", "overlay_behavior", "overlay_routing", "overlay_cost")


def _mb(n: Any) -> str:
    return fmt.figure(n, "B")


def section(views: Sequence["ReceiptView"]) -> list[fmt.Section]:
    """One row per overlay (model, dtype, donor): the delta rule, perplexity backbone -> overlaid (general and
    domain), behavior, routing and cost outcomes, and storage |backbone| + |overlay|."""
    rows = [v for v in views if v.gate in OVERLAY_GATES]
    if not rows:
        return []
    by: dict[tuple, dict[str, Any]] = {}
    for v in rows:
        key = (v.model, v.dtype, v.parameters.get("donor"))
        by.setdefault(key, {})[v.gate] = v
    cells = []
    for (model, dtype, donor), g in sorted(by.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        d, q = g.get("overlay_delta"), g.get("overlay_quality")
        delta = "—"
        if d is not None and d.value("kept_tensors") is not None:
            delta = (f"{d.value('kept_tensors')} / {d.value('dropped_tensors')} ({fmt.num(d.value('delta_min'))}, "
                     f"{fmt.num(d.value('delta_median'))}, {fmt.num(d.value('delta_max'))}) {d.outcome}")

        def ppl(part):
            if q is None or q.value(f"{part}_ppl_backbone") is None:
                return "—"
            return (f"{fmt.num(q.value(f'{part}_ppl_backbone'))} → {fmt.num(q.value(f'{part}_ppl_overlaid'))} "
                    f"({fmt.pct(q.value(f'{part}_ppl_change'), sign=True)})")

        def outcome(name):
            v = g.get(name)
            if v is None:
                return "—"
            w = v.winrule
            if w:
                return f"{v.outcome} ({w['verdict']}{not_gated(v)})"
            if name == "overlay_routing" and v.value("accuracy") is not None:
                return (f"{v.outcome} (accuracy {fmt.pct(v.value('accuracy'))}, false routes "
                        f"{fmt.pct(v.value('false_route_rate'))})")
            return v.outcome

        storage = "—"
        if d is not None and d.value("backbone_bytes") is not None:
            storage = f"{_mb(d.value('backbone_bytes'))} + {_mb(d.value('overlay_bytes'))}"
        cells.append([model, dtype, donor or "—", delta, ppl("general") + (f" {q.outcome}" if q else ""),
                      ppl("domain"), outcome("overlay_behavior"), outcome("overlay_routing"), outcome("overlay_cost"),
                      storage])
    failing = [v for v in rows if v.outcome not in ("pass",)]
    return [fmt.Section("Skill overlays", (
        "Each overlay's tensors replace the backbone graph's initializers at session creation (onnxruntime); the "
        "backbone graph is unchanged (its SHA-256 is pinned in every receipt).", "",
        fmt.table_of(["model", "dtype", "overlay", "delta: kept / dropped (min, median, max)", "general ppl",
                      "domain ppl", "behavior", "routing", "cost", "storage (backbone + overlay)"], "llllllllll", cells),
        *(["", *fmt.receipt_lines(failing)] if failing else [])))]


DELTA = GateSpec(name="overlay_delta", level="run", applies_to=("fp32", "q8", "q4"), policy=DeltaPolicy,
                 evidence=DeltaEvidence, decide=decide_delta, section=section,
                 figures=(Figure("kept_tensors", "tensors"), Figure("dropped_tensors", "tensors"),
                          Figure("delta_min", "relative"), Figure("delta_median", "relative"),
                          Figure("delta_max", "relative"), Figure("overlay_bytes", "bytes", "lower"),
                          Figure("backbone_bytes", "bytes"), Figure("bytes_saved", "bytes", "higher")),
                 describe="a skill overlay's delta rule (kept/dropped tensors, relative deltas) and its storage")
QUALITY = GateSpec(name="overlay_quality", level="run", applies_to=("fp32", "q8", "q4"), policy=QualityPolicy,
                   evidence=QualityEvidence, decide=decide_quality,
                   figures=tuple(Figure(f"{part}_{name}", unit, better) for part in ("general", "domain")
                                 for name, unit, better in (("ppl_backbone", "ppl", "neither"),
                                                            ("ppl_overlaid", "ppl", "lower"),
                                                            ("ppl_change", "fraction", "lower"))),
                   describe="held-out perplexity through onnxruntime, backbone vs overlaid: general within policy, "
                            "domain lower by the policy's margin")
SPECS = (DELTA, QUALITY)
