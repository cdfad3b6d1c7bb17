"""Gate 3, behavior parity: a candidate's scenario cases against its reference's.

The default rule is paired (:mod:`harness.behavior.paired`): each metric's lost and gained cases, a drop that
fails only when the paired test calls it real, Holm across the metrics, sampled failures confirmed on more seeds.
``rule = "margin"`` keeps seed 000's rule on rates, and a published reference is paired inference at zero margin
on the rates (both in :mod:`harness.behavior.rates`).  This module holds the gate's policy, its decision on the
recorded evidence and its report sections.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from .. import fields
from ..errors import EvidenceError
from ..fields import Where, knob
from ..verdict import Measurement, Verdict
from .. import fmt
from ..behavior import paired as paired_rule
from ..behavior.rates import MarginRule, combine, comparable, decide, published_inference, require_rate
# harness.behavior.evaluate.comparison imports with_agreement from here: its source bytes are in every behavior
# evaluation's cache key, so moving that import would re-run every cached evaluation (DEVELOPERS.md, "Cache keys").
from ..behavior.rates import with_agreement  # noqa: F401
from .spec import Evidence, Figure, GateSpec, Policy

if TYPE_CHECKING:
    from ..view import ReceiptView


_METRIC = re.compile(r"^(greedy|sampled)\.[a-z_]+$")
MODES = ("greedy", "sampled")   # harness.behavior.generate.MODES (kept import-free here)


def _metrics(where: Where, value: Any) -> tuple[str, ...]:
    names = fields.strings(where, value, nonempty=False)
    bad = [n for n in names if not _METRIC.match(n)]
    if bad:
        raise where.fail(f"expected metric names like 'greedy.format', got {bad[0]!r}")
    return names


@dataclass(frozen=True)
class Sampling:
    """The seeded sampler's settings; ``seed`` None means the campaign's seed."""

    seed: int | None = knob(None, lo=0)
    temperature: float = 0.7
    top_k: int = knob(40, lo=1)
    top_p: float = knob(0.9, hi=1.0)


@dataclass(frozen=True)
class Published:
    """A published reference: its behavior report (path, pinned SHA-256) and the graph it measured."""

    report: str
    sha256: str = knob(read=fields.sha256)
    graph_sha256: str = knob(read=fields.sha256)


RULES = ("paired", "margin")
# The default margin per rule: the paired rule fails a drop beyond 0 that the test calls real; the seed's margin
# rule compares two rates with 0.15 of slack and no error model.
DEFAULT_MARGIN = {"paired": 0.0, "margin": 0.15}
_METRIC_KEYS = dict(keys=lambda k: bool(_METRIC.match(k)), keys_doc="expected a metric name like 'greedy.format'")


@dataclass(frozen=True)
class BehaviorPolicy(Policy):
    """``[policy.behavior]``: the suite, the rule and its margins, the metrics that must not fall or rise, the
    sampler, the evaluation batch and per-model slices of the suite.

    ``rule = "paired"`` (the default) counts flips case by case and fails a metric only when its drop beyond its
    margin is real at ``confidence`` (Holm over the metrics judged; :mod:`harness.behavior.paired`); ``power``
    and ``detect`` say what the suite must be able to catch (the receipt records each metric's detectable drop).
    ``rule = "margin"`` is seed 000's rule: candidate rate >= reference rate - margin, no error model.
    ``confirm_seeds``: a sampled metric that fails the paired rule on the campaign's seed is re-judged on the flips
    pooled over that seed and this many more (both sides evaluated again, sampled mode only) and fails only when
    it fails on both; 0 judges the campaign's seed alone.
    """

    suite: str | None = None
    rule: str = knob("paired", choices=RULES)
    confidence: float = knob(0.95, lo=0.5, hi=0.9999)
    power: float = knob(0.9, lo=0.5, hi=0.9999)
    detect: float = knob(0.10, lo=0.001, hi=1.0)
    agreement_tokens: int = knob(8, lo=1)
    margin: float | None = knob(None, hi=1.0)            # None: DEFAULT_MARGIN of the rule
    margins: dict[str, float] = knob(default_factory=lambda: {"greedy.agreement": 0.5}, hi=1.0, **_METRIC_KEYS)
    minimum: tuple[str, ...] = knob(("greedy.format", "greedy.factual", "greedy.arithmetic", "greedy.stopping",
                                     "greedy.instruction", "greedy.extraction",
                                     "greedy.stopped", "greedy.agreement", "sampled.format", "sampled.factual",
                                     "sampled.arithmetic", "sampled.stopping", "sampled.instruction",
                                     "sampled.extraction", "sampled.stopped"), read=_metrics)
    maximum: tuple[str, ...] = knob(("greedy.repetition", "greedy.empty", "greedy.garbage", "greedy.budget_exhausted",
                                     "sampled.repetition", "sampled.empty", "sampled.garbage",
                                     "sampled.budget_exhausted"), read=_metrics)
    sampling: Sampling = Sampling()
    modes: tuple[str, ...] = knob(MODES, choices=MODES)
    published: dict[str, Published] = knob(default_factory=dict, refers="model")
    batch: int = knob(16, lo=1)
    slices: dict[str, int] = knob(default_factory=dict, lo=1, refers="model")   # model id -> the first N cases of each category
    confirm_seeds: int = knob(2, lo=0, hi=16)

    @property
    def effective_margin(self) -> float:
        return DEFAULT_MARGIN[self.rule] if self.margin is None else self.margin

    @classmethod
    def finish(cls, values: dict[str, Any], where: Where) -> dict[str, Any]:
        if not values.get("minimum", cls.minimum) and not values.get("maximum", cls.maximum):
            raise where.fail("names no metric in minimum or maximum")
        return values

    def margin_rule(self, published: bool = False) -> MarginRule:
        """Seed 000's margin rule at this policy's margins (zero margin against a published reference)."""
        return MarginRule(0.0 if published else self.effective_margin, {} if published else dict(self.margins),
                          self.minimum, self.maximum)

    @property
    def metrics(self) -> tuple[str, ...]:
        return (*self.minimum, *self.maximum)


def _judged(policy: BehaviorPolicy, found: Sequence[str]) -> list[str]:
    """The policy's metrics that the suite measures: a category the suite lacks (a slice or an older suite)
    is not judged, and the receipt lists it as such; a stopped/counter/agreement metric is always measured."""
    return [m for m in policy.metrics if m in found]


@dataclass(frozen=True)
class BehaviorEvidence(Evidence):
    """Both sides' behavior reports and what the paired rule counts from their transcripts."""

    reference: Mapping[str, Any]                 # the reference's behavior report (agreement rates added)
    candidate: Mapping[str, Any]                 # the candidate's
    flips: Sequence[Mapping[str, Any]] | None = None   # the paired rule's table (harness.behavior.paired.table)
    pooled_flips: Mapping[str, Any] | None = None      # the flips pooled over the confirmation seeds, when asked
    published: Mapping[str, Any] | None = None   # {reference, candidate, graph_sha256}: a pinned published report

    def with_(self, **changes: Any) -> "BehaviorEvidence":
        return dataclasses.replace(self, **changes)


def first_stage(evidence: BehaviorEvidence, policy: BehaviorPolicy) -> list[paired_rule.MetricDecision]:
    """Each judged metric's decision on the campaign's seed alone (``evidence.flips``)."""
    raw = evidence.flips
    if not isinstance(raw, (list, tuple)) or not raw:
        raise EvidenceError("the paired behavior rule needs the flip table (evidence 'flips'): count it with "
                            "harness.behavior.paired.table from both sides' transcripts")
    by_metric = {f.metric: f for f in (paired_rule.Flips.from_dict(d) for d in raw)}
    judged = _judged(policy, list(by_metric))
    return paired_rule.decide([by_metric[m] for m in judged], policy.margins, policy.effective_margin,
                              policy.confidence, policy.power)


def needs_confirmation(evidence: BehaviorEvidence, policy: BehaviorPolicy) -> bool:
    """Whether the test must evaluate the confirmation seeds (``pooled_flips``) before the gate can decide."""
    return policy.rule == "paired" and policy.confirm_seeds > 0 and \
        paired_rule.needs_confirmation(first_stage(evidence, policy))


def paired_decisions(evidence: BehaviorEvidence, policy: BehaviorPolicy) -> list[paired_rule.MetricDecision]:
    """Each judged metric's paired decision: the first stage, confirmed on the pooled seeds when it asks for it."""
    first = first_stage(evidence, policy)
    if not paired_rule.needs_confirmation(first) or policy.confirm_seeds == 0:
        return first
    pooled = evidence.pooled_flips
    if not isinstance(pooled, Mapping) or not isinstance(pooled.get("flips"), list):
        failing = [d.flips.metric for d in first if d.failed and paired_rule.sampled(d.flips.metric)]
        raise EvidenceError(f"{', '.join(failing)} failed on the campaign's seed and [policy.behavior] confirm_seeds "
                            f"= {policy.confirm_seeds} asks for a confirmation, but the evidence holds no pooled "
                            f"flips ('pooled_flips')")
    seeds = pooled.get("seeds")
    if seeds != policy.confirm_seeds + 1:
        raise EvidenceError(f"pooled_flips.seeds: expected {policy.confirm_seeds + 1} seeds (the campaign's and "
                            f"confirm_seeds = {policy.confirm_seeds}), got {seeds!r}")
    flips = [paired_rule.Flips.from_dict(d) for d in pooled["flips"]]
    return paired_rule.confirm(first, flips, seeds, policy.margins, policy.effective_margin, policy.confidence,
                               policy.power)


def paired_record(evidence: BehaviorEvidence, policy: BehaviorPolicy) -> dict[str, Any]:
    """The receipt's ``behavior.paired`` block: the rule's settings, each judged metric's flips, drop, interval,
    p-values and decision, and the policy's metrics the suite did not measure."""
    decisions = paired_decisions(evidence, policy)
    judged = {d.flips.metric for d in decisions}
    pooled = evidence.pooled_flips
    return {"rule": "paired", "confidence": policy.confidence, "power": policy.power, "detect": policy.detect,
            "margin": policy.effective_margin, "correction": "holm", "test": "exact McNemar at margin 0, "
            "Tango score otherwise; interval: Tango score, Bonferroni-simultaneous",
            "confirm_seeds": policy.confirm_seeds,
            "confirmed_on": pooled.get("seed_list") if isinstance(pooled, Mapping) else None,
            "metrics": [d.as_dict() for d in decisions],
            "not_measured": [m for m in policy.metrics if m not in judged]}


def decide_paired(evidence: BehaviorEvidence, policy: BehaviorPolicy) -> Verdict:
    """The paired rule's verdict: the comparability checks, then a failing metric per real drop beyond its margin."""
    reference, candidate = evidence.reference, evidence.candidate
    reasons = comparable(reference, candidate)
    figures: dict[str, Measurement] = {}
    try:
        decisions = paired_decisions(evidence, policy)
    except EvidenceError as exc:
        return Verdict.from_checks([*reasons, str(exc)], figures)
    for d in decisions:
        f, key = d.flips, d.flips.metric.replace(".", "_")
        figures[key + "_lost"] = Measurement(f.lost, "cases", f.n)
        figures[key + "_gained"] = Measurement(f.gained, "cases", f.n)
        figures[key + "_drop"] = Measurement(f.drop, "fraction", f.n)
        figures[key + "_p_adjusted"] = Measurement(d.p_adjusted, "p", f.n)
        for suffix, report in (("_rate", candidate), ("_reference_rate", reference)):
            try:   # the rates the report shows beside the flips (a counter's rate is the share with the event)
                value, n = require_rate(report, f.metric)
            except EvidenceError:
                continue
            figures[key + suffix] = Measurement(value, "fraction", n)
        if d.failed:
            reasons.append(d.reason(policy.confidence))
    figures["metrics_judged"] = Measurement(len(decisions), "metrics")
    return Verdict.from_checks(reasons, figures)


def judge(evidence: BehaviorEvidence, policy: BehaviorPolicy) -> Verdict:
    """Candidate against reference by the policy's rule (paired flips, or seed 000's margin on rates)."""
    if policy.rule == "margin":
        return decide(evidence.reference, evidence.candidate, policy.margin_rule())
    return decide_paired(evidence, policy)


def decide_gate(evidence: BehaviorEvidence, policy: BehaviorPolicy) -> Verdict:
    """Candidate against reference by the policy's rule; against a pinned published report as paired
    inference with no margin (:func:`published_inference`)."""
    verdict = judge(evidence, policy)
    pub = evidence.published
    if pub:
        verdict = combine(verdict, published_inference(pub["reference"], pub["candidate"], policy.margin_rule(True),
                                                       pub["graph_sha256"]))
    return verdict


def section(views: Sequence[ReceiptView]) -> list[fmt.Section]:
    """Behavior per category: every variant's (and peer's) greedy counts beside its quality index, its
    reference's, the evaluation time and the transcript review, so a reader sees which category moved."""
    blocks = {(v.model, v.dtype): v.behavior for v in views
              if v.behavior is not None and v.model is not None and v.dtype is not None}
    if not blocks:
        return []
    cats = sorted({c for b in blocks.values() for c in b["categories"]})
    rows = []
    for (model, dtype), b in sorted(blocks.items()):
        seconds = f"{fmt.num(b['evaluation_seconds'])}{' cached' if b.get('cached') else ''}"
        rows.append([model, dtype, fmt.num(b["quality_index"]), fmt.num(b["reference_quality_index"]),
                     *(fmt.counts(b["categories"].get(c)) for c in cats), seconds, b["review"]["why"],
                     f"`{str(b['report_sha256'])[:16]}…`"])
    return [fmt.Section("Behavior (greedy, counts per category)", (
        "The quality index is the equal-weight mean of the category rates, descriptive of this finite suite only.", "",
        fmt.table_of(["model", "dtype", "quality /100", "reference /100", *cats, "evaluation s", "review",
                      "behavior report"], "llrr" + "r" * len(cats) + "rll", rows)))]


def _flip(m: Mapping[str, Any]) -> str:
    """One metric's paired cell: ``greedy.stopping 8/0 of 200, drop +0.040 [+0.010, +0.090]`` (a confirmed sampled
    metric: ``... of 600 over 3 seeds ...``)."""
    seeds = m.get("seeds")
    pooled = f" over {seeds} seeds" if isinstance(seeds, int) and not isinstance(seeds, bool) and seeds > 1 else ""
    return (f"{m['metric']} {m['lost']}/{m['gained']} of {m['n']}{pooled}, drop {fmt.figure(m['drop'], sign=True)} "
            f"[{fmt.figure(m['low'], sign=True)}, {fmt.figure(m['high'], sign=True)}]")


def paired_section(views: Sequence[ReceiptView]) -> list[fmt.Section]:
    """The paired rule's table: per variant the metrics judged, each failing metric's lost/gained and interval,
    and the metric closest to failing (smallest Holm-adjusted p), so a reader sees how far each verdict is from
    the other one."""
    records = []
    for v in views:
        b = v.data.get("behavior") if v.gate == "behavior" else None
        rec = b.get("paired") if isinstance(b, Mapping) else None
        if isinstance(rec, Mapping) and isinstance(rec.get("metrics"), list) and rec["metrics"]:
            records.append((v.model or "?", v.dtype or "?", rec))
    if not records:
        return []
    conf = records[0][2].get("confidence")
    conf = f"{conf:.0%}" if isinstance(conf, float) else "the policy's"
    rows = []
    for model, dtype, rec in sorted(records, key=lambda r: (r[0], r[1])):
        metrics = rec["metrics"]
        failing = [m for m in metrics if m.get("decision") == "fail"]
        closest = min((m for m in metrics if m.get("decision") != "fail"), key=lambda m: m["p_adjusted"], default=None)
        detect = sorted(m["detectable_drop"] for m in metrics if isinstance(m.get("detectable_drop"), (int, float)))
        rows.append([model, dtype, len(metrics), "; ".join(_flip(m) for m in failing) or "none",
                     f"{_flip(closest)} (p {fmt.figure(closest['p_adjusted'])})" if closest else "",
                     fmt.figure(detect[len(detect) // 2]) if detect else "n/a"])
    return [fmt.Section("Behavior parity, paired", (
        f"Each metric counts the cases the candidate lost and gained against its reference (lost/gained of n); "
        f"it fails when the drop beyond its margin is real at {conf} confidence, Holm-adjusted over "
        f"the metrics judged. Intervals are simultaneous (Bonferroni) score intervals on the drop. "
        f"'Detectable' is the median drop the suite catches with the policy's power at the measured flip rate.", "",
        fmt.table_of(["model", "dtype", "judged", "failing metrics", "closest to failing (Holm p)",
                      "detectable drop (median)"], "llrlll", rows)))]


def sections(views: Sequence[ReceiptView]) -> list[fmt.Section]:
    """The behavior gate's report sections: the per-category counts, then the paired rule's table."""
    return [*section(views), *paired_section(views)]


SPEC = GateSpec(
    name="behavior", level="variant", applies_to=("fp32", "q8", "q4", "recipe", "ort-genai-int4", "ort-genai-kquant"), policy=BehaviorPolicy,
    evidence=BehaviorEvidence, decide=decide_gate, section=sections, figures=(
        Figure("quality_index", "points/100", "higher", table=True), Figure("parameters", "parameters", table=True),
        Figure("evaluation_seconds", "s", "lower"), Figure("metrics_judged", "metrics")),
    describe="scripted scenario cases (greedy and seeded-sampled) of a candidate against its reference, counted "
             "case by case (paired flips, Holm across metrics; or seed 000's margin rule)")
