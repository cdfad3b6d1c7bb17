"""The behavior rule's own error rates, measured like the win rule's: null conditions must pass, damaged must fail.

A *condition* is a pair of real evaluations of one model on the same rendered suite whose truth is known by
construction: a **null** condition changes nothing a user would call quality (the same fp32 graph under another
intra-op thread count or another ONNX Runtime graph optimization level; the sampled mode under another seed),
so the paired rule must pass it; a **damaged** condition degrades the model on purpose (noise added to every
linear weight at a measured held-out loss increase; the last decoder layer removed), so the rule must fail it.

A condition is judged by the gate's own two-stage rule: a sampled metric failing on the first pair is confirmed
on the flips pooled over the confirmation seeds (:func:`harness.behavior.paired.confirm`).  The sampled-seed null
gives the candidate seeds disjoint from the reference's (its first seed is the reference's seed + k x (1 +
confirm seeds)), so it measures a candidate whose sampling shares nothing with the reference's draws.

One pair of evaluations is one verdict, which says little about a rate.  Each condition's rate is estimated
by resampling its *cases* with replacement (a case keeps its greedy and sampled rows and every metric, so the
correlation between metrics stays as measured) and applying the rule to each resample: for a damaged condition
that is its power; for a null one each resample also exchanges the two sides of each case at random (the
sides are exchangeable by construction), which makes the rate the rule's false-fail at the measured flip rates
(:func:`resampled_fail_rate`).  Everything here is pure: rows in, figures out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import EvidenceError
from ..verdict import Measurement, Verdict
from . import paired

KINDS = ("null", "damaged")


@dataclass(frozen=True)
class CaseMatrix:
    """Per metric and case, counts over the paired comparisons the matrix holds (one per seed): how many count
    toward the metric, how many the candidate lost and gained, and how many each side got right.  Matrices of the
    same metrics and cases add (:meth:`plus`), which is how the confirmation seeds pool."""

    metrics: tuple[str, ...]
    cases: tuple[str, ...]
    n: np.ndarray              # int (metrics, cases)
    lost: np.ndarray
    gained: np.ndarray
    reference_ok: np.ndarray
    candidate_ok: np.ndarray

    def flips(self, weights: np.ndarray | None = None) -> list[paired.Flips]:
        """Each metric's flips with case ``weights`` (a bootstrap's multiplicities; None: every case once)."""
        w = np.ones(len(self.cases), np.int64) if weights is None else np.asarray(weights, np.int64)
        n, lost, gained = self.n @ w, self.lost @ w, self.gained @ w
        ref, cand = self.reference_ok @ w, self.candidate_ok @ w
        return [paired.Flips(m, int(n[i]), int(lost[i]), int(gained[i]), int(ref[i]), int(cand[i]))
                for i, m in enumerate(self.metrics) if n[i] > 0]

    def only(self, metrics: Sequence[str]) -> "CaseMatrix":
        idx = [self.metrics.index(m) for m in metrics]
        return CaseMatrix(tuple(metrics), self.cases, *(getattr(self, a)[idx] for a in _COUNTS))

    def swapped(self, mask: np.ndarray) -> "CaseMatrix":
        """The matrix with the two sides exchanged on the cases ``mask`` selects (lost and gained, and each side's
        rights, trade places); an agreement metric, symmetric in its two sides, is left as it is."""
        swap = np.asarray(mask, bool)[None, :] & np.array([not m.endswith(".agreement") for m in self.metrics])[:, None]
        pick = lambda a, b: np.where(swap, b, a)   # noqa: E731
        return CaseMatrix(self.metrics, self.cases, self.n, pick(self.lost, self.gained), pick(self.gained, self.lost),
                          pick(self.reference_ok, self.candidate_ok), pick(self.candidate_ok, self.reference_ok))

    def plus(self, other: "CaseMatrix") -> "CaseMatrix":
        if other.metrics != self.metrics or other.cases != self.cases:
            raise EvidenceError("pooled comparisons must count the same metrics over the same cases")
        return CaseMatrix(self.metrics, self.cases, *(getattr(self, a) + getattr(other, a) for a in _COUNTS))


_COUNTS = ("n", "lost", "gained", "reference_ok", "candidate_ok")


def case_matrix(reference_rows: Sequence[Mapping[str, Any]], candidate_rows: Sequence[Mapping[str, Any]],
                metrics: Sequence[str], agreement_tokens: int) -> CaseMatrix:
    """The matrix of ``metrics`` over the cases both transcripts hold (rows paired by mode and case)."""
    ref = {(r["mode"], r["case"]): r for r in reference_rows}
    cand = {(r["mode"], r["case"]): r for r in candidate_rows}
    if set(ref) != set(cand):
        raise EvidenceError(f"the two evaluations hold different cases ({len(set(ref) ^ set(cand))} unpaired)")
    cases = tuple(sorted({k[1] for k in ref}))
    index = {c: i for i, c in enumerate(cases)}
    shape = (len(metrics), len(cases))
    valid, r_ok, c_ok = np.zeros(shape, bool), np.zeros(shape, bool), np.zeros(shape, bool)
    for i, metric in enumerate(metrics):
        mode, name = metric.split(".", 1)
        for (m, case), c in cand.items():
            if m != mode:
                continue
            r = ref[(m, case)]
            j = index[case]
            if name == "agreement":
                valid[i, j], r_ok[i, j] = True, True
                c_ok[i, j] = c["output_ids"][:agreement_tokens] == r["output_ids"][:agreement_tokens]
                continue
            a, b = paired._ok(metric, r), paired._ok(metric, c)
            if a is not None:
                valid[i, j], r_ok[i, j], c_ok[i, j] = True, a, b
    r, c = r_ok & valid, c_ok & valid
    return CaseMatrix(tuple(metrics), cases, *(x.astype(np.int64) for x in (valid, r & ~c, c & ~r, r, c)))


def judge(flips: Sequence[paired.Flips], margins: Mapping[str, float], margin: float, confidence: float,
          pooled: Sequence[paired.Flips] | None = None, seeds: int = 1, kind: str = "null") -> bool:
    """Whether the paired rule fails a variant with these flips (any metric failing), confirming a sampled
    failure on ``pooled`` (``seeds`` seeds) as the gate does.  Without pooled flips a sampled failure stands for a
    null condition (an upper bound on its false-fail rate) and does not count for a damaged one (a lower bound on
    its power)."""
    decisions = paired.decide(flips, margins, margin, confidence)
    if paired.needs_confirmation(decisions):
        if pooled is not None:
            decisions = paired.confirm(decisions, pooled, seeds, margins, margin, confidence)
        elif kind == "damaged":
            return any(d.failed and not paired.sampled(d.flips.metric) for d in decisions)
    return any(d.failed for d in decisions)


def resampled_fail_rate(matrix: CaseMatrix, margins: Mapping[str, float], margin: float, confidence: float,
                        resamples: int, seed: int, pooled: CaseMatrix | None = None, seeds: int = 1,
                        kind: str = "null") -> float:
    """The share of resamples (seeded) on which the paired rule fails the candidate.

    Each resample draws the cases with replacement (a case with all its metrics and seeds, so the confirmation
    pools the same cases).  For a damaged condition that is its power at the measured damage.  For a null
    condition the resample also exchanges the two sides of each case with probability 1/2: its sides are
    exchangeable by construction (two thread counts, two optimization levels, two independent seeds), so the
    exchanged data are as likely as the measured ones, and the rate is the rule's false-fail at the condition's
    measured flip rates; without the exchange a bootstrap around a null pair whose drop happened to sit one
    standard error high would report the rule's power at that drop instead."""
    if kind not in KINDS:
        raise EvidenceError(f"kind {kind!r} is not one of {KINDS}")
    rng = np.random.Generator(np.random.PCG64(seed))
    n = len(matrix.cases)
    fails = 0
    for _ in range(resamples):
        weights = np.bincount(rng.integers(0, n, n), minlength=n)
        m, pm = matrix, pooled
        if kind == "null":
            swap = rng.random(n) < 0.5
            m, pm = m.swapped(swap), (pm.swapped(swap) if pm is not None else None)
        fails += judge(m.flips(weights), margins, margin, confidence,
                       pm.flips(weights) if pm is not None else None, seeds, kind)
    return fails / resamples


@dataclass(frozen=True)
class Condition:
    """One measured condition: its name and kind, the metrics it is judged on, the rule's verdict on the real
    pair of evaluations, the resampled fail rate, what was measured about the damage (loss increase), and, when
    the real pair's sampled metrics needed it, the flips pooled over the confirmation seeds."""

    name: str
    kind: str
    describe: str
    metrics: tuple[str, ...]
    failed: bool
    fail_rate: float
    resamples: int
    flips: tuple[paired.Flips, ...]
    failing: tuple[str, ...] = ()
    measured: Mapping[str, float] | None = None
    pooled: tuple[paired.Flips, ...] = ()
    seeds: int = 1

    def __post_init__(self):
        if self.kind not in KINDS:
            raise EvidenceError(f"condition {self.name}: kind {self.kind!r} is not one of {KINDS}")

    @property
    def figure(self) -> str:
        """The receipt's figure name of the condition's rate (``seed_1_false_fail``, ``noise_0_3_power``)."""
        key = "".join(ch if ch.isalnum() else "_" for ch in self.name.lower()).strip("_")
        return f"{key}_{'false_fail' if self.kind == 'null' else 'power'}"

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "describe": self.describe, "metrics": list(self.metrics),
                "failed": self.failed, "fail_rate": self.fail_rate, "resamples": self.resamples,
                "failing": list(self.failing), "measured": dict(self.measured or {}),
                "flips": [f.as_dict() for f in self.flips], "seeds": self.seeds,
                "pooled_flips": [f.as_dict() for f in self.pooled]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Condition":
        return cls(d["name"], d["kind"], d.get("describe", ""), tuple(d["metrics"]), bool(d["failed"]),
                   float(d["fail_rate"]), int(d["resamples"]), tuple(paired.Flips.from_dict(f) for f in d["flips"]),
                   tuple(d.get("failing", ())), d.get("measured"),
                   tuple(paired.Flips.from_dict(f) for f in d.get("pooled_flips", ())), int(d.get("seeds", 1)))


def sampled_metrics(metrics: Sequence[str]) -> list[str]:
    return [m for m in metrics if paired.sampled(m)]


def measure(name: str, kind: str, describe: str, reference_rows, candidate_rows, metrics: Sequence[str],
            margins: Mapping[str, float], margin: float, confidence: float, agreement_tokens: int, resamples: int,
            seed: int, measured: Mapping[str, float] | None = None,
            confirm: Sequence[tuple[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]]] | None = None
            ) -> Condition:
    """A condition from its two evaluations' transcripts: the rule on the real pair and on ``resamples`` resamples.
    ``confirm``: (reference rows, candidate rows) of each confirmation seed (sampled mode), pooled with the real
    pair's sampled metrics when a sampled metric fails on it."""
    matrix = case_matrix(reference_rows, candidate_rows, metrics, agreement_tokens)
    flips = matrix.flips()
    judged = tuple(f.metric for f in flips)
    pooled_matrix, seeds = None, 1
    if confirm:
        sampled = sampled_metrics(judged)
        pooled_matrix = matrix.only(sampled)
        for ref_rows, cand_rows in confirm:
            pooled_matrix = pooled_matrix.plus(case_matrix(ref_rows, cand_rows, sampled, agreement_tokens))
        seeds = 1 + len(confirm)
    decisions = paired.decide(flips, margins, margin, confidence)
    pooled_flips: tuple[paired.Flips, ...] = ()
    if paired.needs_confirmation(decisions) and pooled_matrix is not None:
        pooled_flips = tuple(pooled_matrix.flips())
        decisions = paired.confirm(decisions, pooled_flips, seeds, margins, margin, confidence)
    failing = tuple(d.flips.metric for d in decisions if d.failed)
    rate = resampled_fail_rate(matrix, margins, margin, confidence, resamples, seed, pooled_matrix, seeds, kind)
    return Condition(name, kind, describe, judged, bool(failing), rate, resamples, tuple(flips), failing, measured,
                     pooled_flips, seeds)


def decide(conditions: Sequence[Condition], max_false_fail: float, min_power: float) -> Verdict:
    """The calibration verdict: every null condition passes on its real pair with a resampled false-fail rate at
    most ``max_false_fail``; every damaged condition fails on its real pair with resampled power at least
    ``min_power``.  Figures: each condition's rate, and the worst of each kind."""
    if not any(c.kind == "null" for c in conditions) or not any(c.kind == "damaged" for c in conditions):
        return Verdict.from_checks(["calibration needs at least one null and one damaged condition"])
    reasons: list[str] = []
    figures: dict[str, Measurement] = {}
    for c in conditions:
        figures[c.figure] = Measurement(c.fail_rate, "fraction", c.resamples)
        if c.kind == "null":
            if c.failed:
                reasons.append(f"null condition {c.name} ({c.describe}) failed the paired rule on "
                               f"{', '.join(c.failing)}")
            if c.fail_rate > max_false_fail:
                reasons.append(f"null condition {c.name}: resampled false-fail {c.fail_rate:.3f} > {max_false_fail}")
        else:
            if not c.failed:
                reasons.append(f"damaged condition {c.name} ({c.describe}) passed the paired rule")
            if c.fail_rate < min_power:
                reasons.append(f"damaged condition {c.name}: resampled power {c.fail_rate:.3f} < {min_power}")
    nulls = [c.fail_rate for c in conditions if c.kind == "null"]
    damaged = [c.fail_rate for c in conditions if c.kind == "damaged"]
    figures["worst_false_fail"] = Measurement(max(nulls), "fraction", len(nulls))
    figures["worst_power"] = Measurement(min(damaged), "fraction", len(damaged))
    return Verdict.from_checks(reasons, figures)
