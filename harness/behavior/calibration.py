"""The behavior rule's own error rates, measured like the win rule's: null conditions must pass, damaged must fail.

A *condition* is a pair of real evaluations of one model on the same rendered suite whose truth is known by
construction: a **null** condition changes nothing a user would call quality (the same fp32 graph under another
intra-op thread count or another ONNX Runtime graph optimization level; the sampled mode under another seed),
so the paired rule must pass it; a **damaged** condition degrades the model on purpose (noise added to every
linear weight at a measured held-out loss increase; the last decoder layer removed), so the rule must fail it.

One pair of evaluations is one verdict, which says little about a rate.  Each condition's rate is estimated
by resampling its *cases* with replacement (a case keeps its greedy and sampled rows and every metric, so the
correlation between metrics stays as measured) and applying the rule to each resample: for a null condition
that is its false-fail rate, for a damaged one its power.  Everything here is pure: rows in, figures out.
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
    """Per metric and case: whether the case counts toward the metric, and whether each side got it right."""

    metrics: tuple[str, ...]
    cases: tuple[str, ...]
    valid: np.ndarray          # bool (metrics, cases)
    reference_ok: np.ndarray   # bool (metrics, cases)
    candidate_ok: np.ndarray   # bool (metrics, cases)

    def flips(self, weights: np.ndarray | None = None) -> list[paired.Flips]:
        """Each metric's flips with case ``weights`` (a bootstrap's multiplicities; None: every case once)."""
        w = np.ones(len(self.cases), np.int64) if weights is None else np.asarray(weights, np.int64)
        v, r, c = self.valid, self.reference_ok & self.valid, self.candidate_ok & self.valid
        n = (v * w).sum(axis=1)
        lost = ((r & ~c) * w).sum(axis=1)
        gained = ((c & ~r) * w).sum(axis=1)
        ref = (r * w).sum(axis=1)
        cand = (c * w).sum(axis=1)
        return [paired.Flips(m, int(n[i]), int(lost[i]), int(gained[i]), int(ref[i]), int(cand[i]))
                for i, m in enumerate(self.metrics) if n[i] > 0]


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
    return CaseMatrix(tuple(metrics), cases, valid, r_ok, c_ok)


def judge(flips: Sequence[paired.Flips], margins: Mapping[str, float], margin: float, confidence: float) -> bool:
    """Whether the paired rule fails a variant with these flips (any metric failing)."""
    return any(d.failed for d in paired.decide(flips, margins, margin, confidence))


def resampled_fail_rate(matrix: CaseMatrix, margins: Mapping[str, float], margin: float, confidence: float,
                        resamples: int, seed: int) -> float:
    """The share of case resamples (with replacement, seeded) on which the paired rule fails the candidate."""
    rng = np.random.Generator(np.random.PCG64(seed))
    n = len(matrix.cases)
    fails = 0
    for _ in range(resamples):
        weights = np.bincount(rng.integers(0, n, n), minlength=n)
        fails += judge(matrix.flips(weights), margins, margin, confidence)
    return fails / resamples


@dataclass(frozen=True)
class Condition:
    """One measured condition: its name and kind, the metrics it is judged on, the rule's verdict on the real
    pair of evaluations, the resampled fail rate, and what was measured about the damage (loss increase)."""

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
                "flips": [f.as_dict() for f in self.flips]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Condition":
        return cls(d["name"], d["kind"], d.get("describe", ""), tuple(d["metrics"]), bool(d["failed"]),
                   float(d["fail_rate"]), int(d["resamples"]), tuple(paired.Flips.from_dict(f) for f in d["flips"]),
                   tuple(d.get("failing", ())), d.get("measured"))


def measure(name: str, kind: str, describe: str, reference_rows, candidate_rows, metrics: Sequence[str],
            margins: Mapping[str, float], margin: float, confidence: float, agreement_tokens: int, resamples: int,
            seed: int, measured: Mapping[str, float] | None = None) -> Condition:
    """A condition from its two evaluations' transcripts: the rule on the real pair and on ``resamples`` resamples."""
    matrix = case_matrix(reference_rows, candidate_rows, metrics, agreement_tokens)
    flips = matrix.flips()
    decisions = paired.decide(flips, margins, margin, confidence)
    return Condition(name, kind, describe, tuple(f.metric for f in flips), any(d.failed for d in decisions),
                     resampled_fail_rate(matrix, margins, margin, confidence, resamples, seed), resamples,
                     tuple(flips), tuple(d.flips.metric for d in decisions if d.failed), measured)


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
