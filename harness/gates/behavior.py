"""Gate 3, behavior parity: a candidate's scenario rates against a reference's, with a margin.

Rates are evidence only when valid: finite counts, 0 <= numerator <= denominator, denominator > 0,
value = numerator / denominator.  A missing or zero denominator is never a score.  The comparison
is refused (each reason listed) when the suite SHA-256, the sampling contract or a denominator
differ.  Metrics that must not fall pass when candidate >= reference - margin; metrics that must not
rise (invalid-output counters) pass when candidate <= reference + margin.  This is a conservative
finite-suite comparison, not a global quality guarantee.

A published reference (``[policy.behavior.published.<model>]``: the report pinned by SHA-256 and the
published graph's SHA-256) is paired inference (:func:`published_inference`): the report must be
complete ONNX evidence that measured the pinned graph; threads, the generation config (seed and seed
strategy, sampler, temperature, top-k, top-p, end-of-turn ids, modes, device, every case's
max_new_tokens) and the repetition penalty must equal the candidate's, each difference a named
reason; the rates are then compared with zero margin.  Its record (:func:`published_record`, kind
``published-paired-inference``) never claims that the published model was trained on the same corpus.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from .. import fields
from ..errors import EvidenceError
from ..fields import Where
from ..verdict import Measurement, Verdict
from .. import fmt
from ..behavior import paired as paired_rule
from .spec import GateSpec, Policy

if TYPE_CHECKING:
    from ..view import ReceiptView


def require_rate(report: dict[str, Any], name: str, label: str = "report") -> tuple[float, int]:
    counts = report.get("rate_counts", {}).get(name)
    value = report.get("rates", {}).get(name)
    if not isinstance(counts, dict):
        raise EvidenceError(f"{label}: {name}: missing numerator/denominator")
    num, den = counts.get("numerator"), counts.get("denominator")
    for what, v in (("numerator", num), ("denominator", den)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise EvidenceError(f"{label}: {name}: {what} {v!r} is not an integer count")
    if den <= 0:
        raise EvidenceError(f"{label}: {name}: denominator {den} is not positive; a zero denominator is not a score")
    if not 0 <= num <= den:
        raise EvidenceError(f"{label}: {name}: numerator {num} is outside 0..{den}")
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or not math.isclose(value, num / den, abs_tol=1e-9)):
        raise EvidenceError(f"{label}: {name}: rate {value!r} is not {num}/{den}")
    return float(value), den


def _complete_and_same_suite(reference: dict[str, Any], candidate: dict[str, Any]) -> list[str]:
    reasons = []
    for label, rep in (("reference", reference), ("candidate", candidate)):
        if rep.get("status") != "complete":
            reasons.append(f"{label} behavior report is not complete (status {rep.get('status')!r})")
    if not reference.get("suite_sha256") or reference.get("suite_sha256") != candidate.get("suite_sha256"):
        reasons.append(f"different or missing scenario suite SHA-256 (reference {str(reference.get('suite_sha256'))[:12]}, "
                       f"candidate {str(candidate.get('suite_sha256'))[:12]})")
    return reasons


def comparable(reference: dict[str, Any], candidate: dict[str, Any]) -> list[str]:
    """Reasons the two reports cannot be compared (empty when they can)."""
    reasons = _complete_and_same_suite(reference, candidate)
    rc, cc = reference.get("contract"), candidate.get("contract")
    if not rc or rc != cc:
        diff = sorted(k for k in set(rc or {}) | set(cc or {}) if (rc or {}).get(k) != (cc or {}).get(k))
        reasons.append(f"different or missing sampling contracts (fields differ: {', '.join(diff) or 'all'})")
    return reasons


def _check_margin(policy: dict[str, Any], published: bool) -> float:
    margin = policy.get("margin", 0)
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not math.isfinite(margin) or not 0 <= margin <= 1:
        raise EvidenceError(f"behavior margin must be a finite number in [0, 1], got {margin!r}")
    if published and margin != 0:
        raise EvidenceError("a published reference is compared with zero margin")
    return margin


def _rates(reference: dict[str, Any], candidate: dict[str, Any], policy: dict[str, Any], margin: float,
           per_metric: dict[str, float]) -> tuple[list[str], dict[str, Measurement]]:
    """The metric-by-metric comparison: reasons and figures."""
    reasons: list[str] = []
    figures: dict[str, Measurement] = {}
    for direction in ("minimum", "maximum"):
        for name in policy.get(direction, []):
            try:
                base, base_n = require_rate(reference, name, "reference")
                value, n = require_rate(candidate, name, "candidate")
            except EvidenceError as exc:
                reasons.append(str(exc))
                continue
            m = per_metric.get(name, margin)
            key = name.replace(".", "_")
            figures[key + "_rate"] = Measurement(value, "fraction", n)
            figures[key + "_reference_rate"] = Measurement(base, "fraction", base_n)
            if n != base_n:
                reasons.append(f"{name}: unequal denominators (candidate {n}, reference {base_n})")
            elif direction == "minimum" and value < base - m - 1e-12:
                reasons.append(f"{name}: {value:.4f} is below reference {base:.4f} - margin {m:g}")
            elif direction == "maximum" and value > base + m + 1e-12:
                reasons.append(f"{name}: {value:.4f} is above reference {base:.4f} + margin {m:g}")
    if not policy.get("minimum") and not policy.get("maximum"):
        reasons.append("the behavior policy names no metric to compare")
    return reasons, figures


def decide(reference: dict[str, Any], candidate: dict[str, Any], policy: dict[str, Any],
           published: bool = False) -> Verdict:
    """The parity verdict; ``policy`` has ``margin``, optional ``margins`` per metric, ``minimum`` and ``maximum``.

    ``published=True`` compares against a pinned published reference: the margin must be zero.
    """
    margin = _check_margin(policy, published)
    per_metric = {} if published else dict(policy.get("margins", {}))
    reasons, figures = _rates(reference, candidate, policy, margin, per_metric)
    return Verdict.from_checks([*comparable(reference, candidate), *reasons], figures)


PAIRED_KIND = "published-paired-inference"
# The contract fields that make up the generation config (threads and the repetition penalty are
# named on their own); a contract field outside all three is still compared, as "sampling contract".
GENERATION = ("seed", "seed_strategy", "sampler", "temperature", "top_k", "top_p", "eos_ids", "modes", "device")
_KINDS = {"onnx": "an ONNX graph", "torch": "a PyTorch model", "gguf": "a GGUF file"}


def _table(report: dict[str, Any], key: str) -> dict[str, Any]:
    value = report.get(key)
    return value if isinstance(value, dict) else {}


def _is_sha256(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def paired(reference: dict[str, Any], candidate: dict[str, Any], graph_sha256: str) -> list[str]:
    """Why ``reference`` is not paired inference of the published graph ``graph_sha256`` with ``candidate``
    (empty when it is): the reference measured that ONNX graph, both are ONNX evidence, and threads, the
    generation config and the repetition penalty are recorded and equal."""
    if not _is_sha256(graph_sha256):
        raise EvidenceError(f"the published graph SHA-256 must be pinned as 64 lower-case hex digits, "
                            f"got {graph_sha256!r}")
    reasons = []
    for label, rep in (("reference", reference), ("candidate", candidate)):
        kind = _table(rep, "subject").get("kind")
        if kind != "onnx":
            reasons.append(f"{label} is not ONNX evidence: it measured "
                           f"{_KINDS.get(kind, 'an unknown subject')} (subject kind {kind!r})")
    measured = _table(reference, "subject").get("graph_sha256")
    if measured is None:
        reasons.append(f"reference records no graph SHA-256, so it did not measure the pinned published graph "
                       f"{graph_sha256[:12]}")
    elif measured != graph_sha256:
        reasons.append(f"reference measured graph {str(measured)[:12]}, not the pinned published graph "
                       f"{graph_sha256[:12]}")
    rc, cc = _table(reference, "contract"), _table(candidate, "contract")

    def pair(name: str, what: str, r: Any, c: Any) -> None:
        """``r`` and ``c`` recorded (not None) and equal, or named reasons."""
        missing = [label for label, v in (("reference", r), ("candidate", c)) if v is None]
        reasons.extend(f"{label} records no {what}" for label in missing)
        if not missing and r != c:
            reasons.append(f"{name}: reference {r!r}, candidate {c!r}")

    pair("threads differ", "thread count", rc.get("threads"), cc.get("threads"))
    for key in GENERATION:
        pair(f"generation config {key} differs", f"generation setting {key}", rc.get(key), cc.get(key))
    rt, ct = reference.get("max_new_tokens"), candidate.get("max_new_tokens")
    if isinstance(rt, dict) and isinstance(ct, dict):
        cases = sorted(k for k in set(rt) | set(ct) if rt.get(k) != ct.get(k))
        if cases:
            reasons.append(f"generation config max_new_tokens differs in {len(cases)} case(s), first {cases[0]!r}: "
                           f"reference {rt.get(cases[0])!r}, candidate {ct.get(cases[0])!r}")
    else:
        pair("generation config max_new_tokens differs", "per-case max_new_tokens", rt, ct)
    pair("repetition penalty differs", "repetition penalty", rc.get("repetition_penalty"), cc.get("repetition_penalty"))
    named = {"threads", "repetition_penalty", *GENERATION}
    for key in sorted((set(rc) | set(cc)) - named):
        if rc.get(key) != cc.get(key):
            reasons.append(f"sampling contract {key} differs: reference {rc.get(key)!r}, candidate {cc.get(key)!r}")
    return reasons


def published_inference(reference: dict[str, Any], candidate: dict[str, Any], policy: dict[str, Any],
                        graph_sha256: str) -> Verdict:
    """The candidate against a published reference: :func:`paired`, the same complete suite, then every
    metric at zero margin (``policy`` as for :func:`decide`; a nonzero margin is refused)."""
    margin = _check_margin(policy, published=True)
    reasons, figures = _rates(reference, candidate, policy, margin, {})
    return Verdict.from_checks([*paired(reference, candidate, graph_sha256),
                                *_complete_and_same_suite(reference, candidate), *reasons], figures)


def published_record(verdict: Verdict, graph_sha256: str) -> dict[str, Any]:
    """The ``published-paired-inference`` record of a gate verdict: the published comparison's part of it
    (the reasons :func:`combine` prefixed), read from the one verdict rather than decided again.  Paired
    inference on the same suite says nothing about the training data: the record never claims the same
    training corpus."""
    reasons = [r[len(PUBLISHED):] for r in verdict.reasons if r.startswith(PUBLISHED)]
    return {"kind": PAIRED_KIND, "published_graph_sha256": graph_sha256, "same_training_corpus_claim": False,
            "passed": not reasons, "reasons": reasons}


def with_agreement(report: dict[str, Any], counts: dict[str, dict[str, int]]) -> dict[str, Any]:
    """A copy of ``report`` with agreement rates (computed against a reference's transcripts) added."""
    import copy

    out = copy.deepcopy(report)
    for name, c in counts.items():
        out.setdefault("rate_counts", {})[name] = dict(c)
        out.setdefault("rates", {})[name] = c["numerator"] / c["denominator"] if c["denominator"] else None
    return out


PUBLISHED = "published reference: "


def combine(main: Verdict, published: Verdict) -> Verdict:
    """Both comparisons must pass; the published one's reasons and figures are prefixed."""
    return Verdict.from_checks([*main.reasons, *(PUBLISHED + r for r in published.reasons)],
                               {**main.figures, **{f"published_{k}": v for k, v in published.figures.items()}})


_METRIC = re.compile(r"^(greedy|sampled)\.[a-z_]+$")
MODES = ("greedy", "sampled")   # harness.behavior.generate.MODES (kept import-free here)


@dataclass(frozen=True)
class Sampling:
    """The seeded sampler's settings; ``seed`` None means the campaign's seed."""

    seed: int | None = None
    temperature: float = 0.7
    top_k: int = 40
    top_p: float = 0.9


@dataclass(frozen=True)
class Published:
    """A published reference: its behavior report (path, pinned SHA-256) and the graph it measured."""

    report: str
    sha256: str
    graph_sha256: str


RULES = ("paired", "margin")
# The default margin per rule: the paired rule fails a drop beyond 0 that the test calls real; the seed's margin
# rule compares two rates with 0.15 of slack and no error model.
DEFAULT_MARGIN = {"paired": 0.0, "margin": 0.15}


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
    rule: str = "paired"
    confidence: float = 0.95
    power: float = 0.9
    detect: float = 0.10
    agreement_tokens: int = 8
    margin: float | None = None            # None: DEFAULT_MARGIN of the rule
    margins: dict[str, float] = field(default_factory=lambda: {"greedy.agreement": 0.5})
    minimum: tuple[str, ...] = ("greedy.format", "greedy.factual", "greedy.arithmetic", "greedy.stopping",
                                "greedy.instruction", "greedy.extraction",
                                "greedy.stopped", "greedy.agreement", "sampled.format", "sampled.factual",
                                "sampled.arithmetic", "sampled.stopping", "sampled.instruction",
                                "sampled.extraction", "sampled.stopped")
    maximum: tuple[str, ...] = ("greedy.repetition", "greedy.empty", "greedy.garbage", "greedy.budget_exhausted",
                                "sampled.repetition", "sampled.empty", "sampled.garbage", "sampled.budget_exhausted")
    sampling: Sampling = Sampling()
    modes: tuple[str, ...] = MODES
    published: dict[str, Published] = field(default_factory=dict)
    batch: int = 16
    slices: dict[str, int] = field(default_factory=dict)   # model id -> the first N cases of each category
    confirm_seeds: int = 2

    @property
    def effective_margin(self) -> float:
        return DEFAULT_MARGIN[self.rule] if self.margin is None else self.margin

    @classmethod
    def parse(cls, raw, where: Where) -> "BehaviorPolicy":
        if raw is None:
            return cls()
        fields.table(where, raw, {"suite", "rule", "confidence", "power", "detect", "agreement_tokens", "margin",
                                  "margins", "minimum", "maximum", "sampling", "modes", "published", "batch",
                                  "slices", "confirm_seeds"})
        d = cls()
        out: dict[str, Any] = {}
        if "suite" in raw:
            out["suite"] = fields.text(where.child("suite"), raw["suite"])
        if "rule" in raw:
            out["rule"] = fields.text(where.child("rule"), raw["rule"], RULES)
        for key, lo, hi in (("confidence", 0.5, 0.9999), ("power", 0.5, 0.9999), ("detect", 0.001, 1.0)):
            if key in raw:
                out[key] = fields.number(where.child(key), raw[key], lo, hi)
        if "batch" in raw:
            out["batch"] = fields.integer(where.child("batch"), raw["batch"], minimum=1)
        if "confirm_seeds" in raw:
            out["confirm_seeds"] = fields.integer(where.child("confirm_seeds"), raw["confirm_seeds"], minimum=0,
                                                  maximum=16)
        if "slices" in raw:
            sw = where.child("slices")
            out["slices"] = {k: fields.integer(sw.child(k), v, minimum=1)
                             for k, v in fields.table(sw, raw["slices"]).items()}
        if "agreement_tokens" in raw:
            out["agreement_tokens"] = fields.integer(where.child("agreement_tokens"), raw["agreement_tokens"], minimum=1)
        if "margin" in raw:
            out["margin"] = fields.number(where.child("margin"), raw["margin"], 0.0, 1.0)
        if "margins" in raw:
            mw = where.child("margins")
            out["margins"] = {k: fields.number(mw.child(k), v, 0.0, 1.0)
                              for k, v in fields.table(mw, raw["margins"]).items()}
            for k in out["margins"]:
                if not _METRIC.match(k):
                    raise mw.child(k).fail(f"expected a metric name like 'greedy.format', got {k!r}")
        for direction in ("minimum", "maximum"):
            if direction in raw:
                names = fields.strings(where.child(direction), raw[direction], nonempty=False)
                bad = [n for n in names if not _METRIC.match(n)]
                if bad:
                    raise where.child(direction).fail(f"expected metric names like 'greedy.format', got {bad[0]!r}")
                out[direction] = names
        if not out.get("minimum", d.minimum) and not out.get("maximum", d.maximum):
            raise where.fail("names no metric in minimum or maximum")
        if "sampling" in raw:
            sw = where.child("sampling")
            t = fields.table(sw, raw["sampling"], {"seed", "temperature", "top_k", "top_p"})
            out["sampling"] = Sampling(
                seed=fields.integer(sw.child("seed"), t["seed"], minimum=0) if "seed" in t else None,
                temperature=fields.number(sw.child("temperature"), t.get("temperature", d.sampling.temperature)),
                top_k=fields.integer(sw.child("top_k"), t.get("top_k", d.sampling.top_k), minimum=1),
                top_p=fields.number(sw.child("top_p"), t.get("top_p", d.sampling.top_p), 0.0, 1.0))
        if "modes" in raw:
            out["modes"] = fields.strings(where.child("modes"), raw["modes"], MODES)
        if "published" in raw:
            pw = where.child("published")
            out["published"] = {}
            for model, entry in fields.table(pw, raw["published"]).items():
                mw = pw.child(model)
                e = fields.table(mw, entry, {"report", "sha256", "graph_sha256"},
                                 required=("report", "sha256", "graph_sha256"))
                out["published"][model] = Published(fields.text(mw.child("report"), e["report"]),
                                                    fields.sha256(mw.child("sha256"), e["sha256"]),
                                                    fields.sha256(mw.child("graph_sha256"), e["graph_sha256"]))
        return cls(**out)

    def margin_rule(self, published: bool = False) -> dict[str, Any]:
        """The mapping :func:`decide` (seed 000's margin rule) reads (zero margin against a published reference)."""
        return {"margin": 0 if published else self.effective_margin,
                "margins": {} if published else dict(self.margins),
                "minimum": list(self.minimum), "maximum": list(self.maximum)}

    @property
    def metrics(self) -> tuple[str, ...]:
        return (*self.minimum, *self.maximum)


def _judged(policy: BehaviorPolicy, found: Sequence[str]) -> list[str]:
    """The policy's metrics that the suite measures: a category the suite lacks (a slice or an older suite)
    is not judged, and the receipt lists it as such; a stopped/counter/agreement metric is always measured."""
    return [m for m in policy.metrics if m in found]


def first_stage(evidence: Mapping[str, Any], policy: BehaviorPolicy) -> list[paired_rule.MetricDecision]:
    """Each judged metric's decision on the campaign's seed alone (``evidence["flips"]``)."""
    raw = evidence.get("flips")
    if not isinstance(raw, list) or not raw:
        raise EvidenceError("the paired behavior rule needs the flip table (evidence 'flips'): count it with "
                            "harness.behavior.paired.table from both sides' transcripts")
    by_metric = {f.metric: f for f in (paired_rule.Flips.from_dict(d) for d in raw)}
    judged = _judged(policy, list(by_metric))
    return paired_rule.decide([by_metric[m] for m in judged], policy.margins, policy.effective_margin,
                              policy.confidence, policy.power)


def needs_confirmation(evidence: Mapping[str, Any], policy: BehaviorPolicy) -> bool:
    """Whether the test must evaluate the confirmation seeds (``pooled_flips``) before the gate can decide."""
    return policy.rule == "paired" and policy.confirm_seeds > 0 and \
        paired_rule.needs_confirmation(first_stage(evidence, policy))


def paired_decisions(evidence: Mapping[str, Any], policy: BehaviorPolicy) -> list[paired_rule.MetricDecision]:
    """Each judged metric's paired decision: the first stage, confirmed on the pooled seeds when it asks for it."""
    first = first_stage(evidence, policy)
    if not paired_rule.needs_confirmation(first) or policy.confirm_seeds == 0:
        return first
    pooled = evidence.get("pooled_flips")
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


def paired_record(evidence: Mapping[str, Any], policy: BehaviorPolicy) -> dict[str, Any]:
    """The receipt's ``behavior.paired`` block: the rule's settings, each judged metric's flips, drop, interval,
    p-values and decision, and the policy's metrics the suite did not measure."""
    decisions = paired_decisions(evidence, policy)
    judged = {d.flips.metric for d in decisions}
    pooled = evidence.get("pooled_flips")
    return {"rule": "paired", "confidence": policy.confidence, "power": policy.power, "detect": policy.detect,
            "margin": policy.effective_margin, "correction": "holm", "test": "exact McNemar at margin 0, "
            "Tango score otherwise; interval: Tango score, Bonferroni-simultaneous",
            "confirm_seeds": policy.confirm_seeds,
            "confirmed_on": pooled.get("seed_list") if isinstance(pooled, Mapping) else None,
            "metrics": [d.as_dict() for d in decisions],
            "not_measured": [m for m in policy.metrics if m not in judged]}


def decide_paired(evidence: Mapping[str, Any], policy: BehaviorPolicy) -> Verdict:
    """The paired rule's verdict: the comparability checks, then a failing metric per real drop beyond its margin."""
    reference, candidate = evidence["reference"], evidence["candidate"]
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


def judge(evidence: Mapping[str, Any], policy: BehaviorPolicy) -> Verdict:
    """Candidate against reference by the policy's rule (paired flips, or seed 000's margin on rates)."""
    if policy.rule == "margin":
        return decide(evidence["reference"], evidence["candidate"], policy.margin_rule())
    return decide_paired(evidence, policy)


def decide_gate(evidence: Mapping[str, Any], policy: BehaviorPolicy) -> Verdict:
    """Candidate against reference by the policy's rule; against a pinned published report as paired
    inference with no margin.

    ``evidence``: ``reference`` and ``candidate`` reports (agreement rates added), ``flips`` (the paired rule's
    table, :func:`harness.behavior.paired.table`), and optionally ``published``: {``reference``, ``candidate``,
    ``graph_sha256``} (:func:`published_inference`).
    """
    verdict = judge(evidence, policy)
    pub = evidence.get("published")
    if pub:
        verdict = combine(verdict, published_inference(pub["reference"], pub["candidate"], policy.margin_rule(True),
                                                       pub["graph_sha256"]))
    return verdict


def section(views: Sequence[ReceiptView]) -> list[str]:
    """Behavior per category: every variant's (and peer's) greedy counts beside its quality index, its
    reference's, the evaluation time and the transcript review, so a reader sees which category moved."""
    blocks = {(v.model, v.dtype): v.behavior for v in views
              if v.behavior is not None and v.model is not None and v.dtype is not None}
    if not blocks:
        return []
    cats = sorted({c for b in blocks.values() for c in b["categories"]})
    lines = ["## Behavior (greedy, counts per category)", "",
             "The quality index is the equal-weight mean of the category rates, descriptive of this finite suite only.",
             "", *fmt.table(["model", "dtype", "quality /100", "reference /100", *cats, "evaluation s (greedy)", "review",
                             "behavior report"], "llrr" + "r" * len(cats) + "rll")]
    for (model, dtype), b in sorted(blocks.items()):
        seconds = (f"{fmt.num(b['evaluation_seconds'])} ({fmt.num(b.get('greedy_seconds'))})"
                   f"{' cached' if b.get('cached') else ''}")
        lines.append(fmt.row([model, dtype, fmt.num(b["quality_index"]), fmt.num(b["reference_quality_index"]),
                              *(fmt.counts(b["categories"].get(c)) for c in cats), seconds, b["review"]["why"],
                              f"`{str(b['report_sha256'])[:16]}…`"]))
    return lines


def _flip(m: Mapping[str, Any]) -> str:
    """One metric's paired cell: ``greedy.stopping 8/0 of 200, drop +0.040 [+0.010, +0.090]`` (a confirmed sampled
    metric: ``... of 600 over 3 seeds ...``)."""
    seeds = m.get("seeds")
    pooled = f" over {seeds} seeds" if isinstance(seeds, int) and not isinstance(seeds, bool) and seeds > 1 else ""
    return (f"{m['metric']} {m['lost']}/{m['gained']} of {m['n']}{pooled}, drop {fmt.figure(m['drop'], sign=True)} "
            f"[{fmt.figure(m['low'], sign=True)}, {fmt.figure(m['high'], sign=True)}]")


def paired_section(views: Sequence[ReceiptView]) -> list[str]:
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
    lines = ["## Behavior parity, paired", "",
             f"Each metric counts the cases the candidate lost and gained against its reference (lost/gained of n); "
             f"it fails when the drop beyond its margin is real at {conf} confidence, Holm-adjusted over "
             f"the metrics judged. Intervals are simultaneous (Bonferroni) score intervals on the drop. "
             f"'Detectable' is the median drop the suite catches with the policy's power at the measured flip rate.",
             "", *fmt.table(["model", "dtype", "judged", "failing metrics", "closest to failing (Holm p)",
                             "detectable drop (median)"], "llrlll")]
    for model, dtype, rec in sorted(records, key=lambda r: (r[0], r[1])):
        metrics = rec["metrics"]
        failing = [m for m in metrics if m.get("decision") == "fail"]
        closest = min((m for m in metrics if m.get("decision") != "fail"), key=lambda m: m["p_adjusted"], default=None)
        detect = sorted(m["detectable_drop"] for m in metrics if isinstance(m.get("detectable_drop"), (int, float)))
        lines.append(fmt.row([model, dtype, len(metrics), "; ".join(_flip(m) for m in failing) or "none",
                              f"{_flip(closest)} (p {fmt.figure(closest['p_adjusted'])})" if closest else "",
                              fmt.figure(detect[len(detect) // 2]) if detect else "n/a"]))
    return lines


def sections(views: Sequence[ReceiptView]) -> list[str]:
    """The behavior gate's report sections: the per-category counts, then the paired rule's table."""
    first, second = section(views), paired_section(views)
    return [*first, *([""] if first and second else []), *second]


SPEC = GateSpec(
    name="behavior", level="variant", applies_to=("fp32", "q8", "q4", "recipe", "ort-genai-int4", "ort-genai-kquant"), policy=BehaviorPolicy,
    decide=decide_gate, section=sections,
    describe="scripted scenario cases (greedy and seeded-sampled) of a candidate against its reference, counted "
             "case by case (paired flips, Holm across metrics; or seed 000's margin rule)")
