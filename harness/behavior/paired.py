"""Paired behavior comparison: case-by-case flips, a score interval on the paired drop, Holm across metrics.

Both sides of a behavior comparison ran the same rendered cases, so each case is a pair: for a
metric that must not fall (a category's pass rate, ``stopped``) the candidate *lost* a case the
reference passed, or *gained* one the reference failed; for a counter that must not rise
(``repetition``, ``empty``, ...) it lost a case when the event appeared only on the candidate's side.
The drop is ``d = (lost - gained) / n``; cases both sides got right (or wrong) carry no information
about it, which is why paired counting sees through the near-ties that two rates of 20 cases hide.

The decision per metric is a one-sided test of ``H0: d <= margin`` with Tango's score statistic for
paired proportions (Tango 1998, the restricted-MLE score test for a difference of two correlated
proportions; its inverted interval is the one reported).  A metric fails when the candidate is worse
than the reference by more than ``margin`` *with the policy's confidence*: its Holm-adjusted p-value
over every metric the variant is judged on is at most ``1 - confidence``.  So a variant never fails on
a difference the paired test calls noise, and the family-wise false-fail rate on a candidate equal to
its reference is at most ``1 - confidence`` whatever the number of metrics.

**Sampled metrics are confirmed on more seeds.**  A sampled metric compares one draw per case on each side;
the candidate's draw shares the reference's uniforms (the same seed), so a candidate that stays close keeps
the reference's luck, but one that drifts away is compared with a single, possibly lucky, reference draw that
every candidate shares (measured on SmolLM2: sampled stopping 161 of 200 on the campaign's seed, 135..153 on
the next six).  So a sampled metric that fails on the campaign's seed is re-judged on the flips pooled over
that seed and ``confirm_seeds`` more (:func:`pooled`, each further seed a paired comparison of its own, both
sides on the same seed), and it fails only when it fails on both (:func:`confirm`).  A variant that already
fails a greedy metric is not confirmed (its verdict is decided; the sampled failures are reported as first-stage
findings), so the extra evaluations are paid only where they can change a verdict.  Every failure of the
two-stage rule is a failure of the first stage's Holm procedure, so its family-wise false-fail rate stays at
most ``1 - confidence``; the price is a little power, the first stage's power times the pooled one's.

Power is the other error: :func:`sample_size` is the paired (McNemar/Connor) calculation of the cases
a metric needs to catch a true drop of ``detect`` with probability ``power`` at the Bonferroni level
(Holm's worst case), given the discordance ``psi`` (the share of cases that flip either way);
:func:`simulate` measures both error rates over the multinomial flip model, and
:func:`detectable_drop` says what the suite at hand can see.  All functions are pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..errors import EvidenceError

_N = NormalDist()
COUNTERS = ("repetition", "empty", "garbage", "budget_exhausted")   # harness.behavior.evaluate.COUNTERS


@dataclass(frozen=True)
class Flips:
    """One metric counted case by case: ``n`` paired cases, ``lost`` and ``gained`` by the candidate, and
    how many the reference and the candidate got right (for a counter: free of the event)."""

    metric: str
    n: int
    lost: int
    gained: int
    reference_ok: int
    candidate_ok: int

    def __post_init__(self):
        for name in ("n", "lost", "gained", "reference_ok", "candidate_ok"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise EvidenceError(f"{self.metric}: {name} {v!r} is not a non-negative integer count")
        if self.n == 0:
            raise EvidenceError(f"{self.metric}: no paired cases; a zero denominator is not a score")
        if self.lost + self.gained > self.n or self.reference_ok > self.n or self.candidate_ok > self.n:
            raise EvidenceError(f"{self.metric}: lost {self.lost} + gained {self.gained} or the rights "
                                f"({self.reference_ok}, {self.candidate_ok}) exceed the {self.n} paired cases")
        if self.candidate_ok - self.reference_ok != self.gained - self.lost:
            raise EvidenceError(f"{self.metric}: candidate right {self.candidate_ok} - reference right "
                                f"{self.reference_ok} is not gained {self.gained} - lost {self.lost}")

    @property
    def drop(self) -> float:
        return (self.lost - self.gained) / self.n

    @property
    def discordance(self) -> float:
        return (self.lost + self.gained) / self.n

    def as_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "n": self.n, "lost": self.lost, "gained": self.gained,
                "reference_ok": self.reference_ok, "candidate_ok": self.candidate_ok}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Flips":
        try:
            return cls(str(d["metric"]), d["n"], d["lost"], d["gained"], d["reference_ok"], d["candidate_ok"])
        except KeyError as exc:
            raise EvidenceError(f"flip counts of {d.get('metric', '?')!r} lack {exc.args[0]!r}") from None


def count(metric: str, pairs: Iterable[tuple[bool, bool]]) -> Flips:
    """Flips of one metric from (reference ok, candidate ok) pairs."""
    n = lost = gained = ref = cand = 0
    for r, c in pairs:
        n += 1
        ref += bool(r)
        cand += bool(c)
        lost += bool(r) and not c
        gained += bool(c) and not r
    return Flips(metric, n, lost, gained, ref, cand)


def _ok(metric: str, row: Mapping[str, Any]) -> bool | None:
    """Whether ``row`` (a transcript row) is right on ``metric`` (``mode.name``), None when it does not count."""
    mode, name = metric.split(".", 1)
    if row["mode"] != mode:
        return None
    if name == "stopped":
        return bool(row["stopped"])
    if name in COUNTERS:
        return not row["flags"][name]
    if row["category"] == name:
        return bool(row["passed"])
    return None


def flips(reference_rows: Sequence[Mapping[str, Any]], candidate_rows: Sequence[Mapping[str, Any]],
          metrics: Sequence[str], agreement_tokens: int) -> list[Flips]:
    """Every metric's flips, pairing rows by (mode, case).  ``<mode>.agreement`` counts a case lost when the
    candidate's first ``agreement_tokens`` ids differ from the reference's (the reference agrees with itself)."""
    ref = {(r["mode"], r["case"]): r for r in reference_rows}
    cand = {(r["mode"], r["case"]): r for r in candidate_rows}
    if set(ref) != set(cand):
        only = sorted(set(ref) ^ set(cand))
        raise EvidenceError(f"reference and candidate transcripts hold different cases ({len(only)} unpaired, "
                            f"first {only[0]!r})")
    out = []
    for metric in metrics:
        mode, name = metric.split(".", 1)
        if name == "agreement":
            pairs = [(True, c["output_ids"][:agreement_tokens] == ref[k]["output_ids"][:agreement_tokens])
                     for k, c in cand.items() if k[0] == mode]
        else:
            pairs = []
            for k, c in cand.items():
                r_ok, c_ok = _ok(metric, ref[k]), _ok(metric, c)
                if r_ok is not None:
                    pairs.append((r_ok, c_ok))
        if not pairs:
            raise EvidenceError(f"{metric}: no transcript row counts toward it (mode {mode!r}, name {name!r})")
        out.append(count(metric, pairs))
    return out


def all_metrics(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every metric the transcripts can be judged on: per mode, each category, ``stopped``, the counters and
    ``agreement``."""
    modes = sorted({r["mode"] for r in rows})
    cats = sorted({r["category"] for r in rows})
    return [f"{m}.{n}" for m in modes for n in (*cats, "stopped", *COUNTERS, "agreement")]


def table(reference_rows: Sequence[Mapping[str, Any]], candidate_rows: Sequence[Mapping[str, Any]],
          agreement_tokens: int) -> list[dict[str, Any]]:
    """The flip counts of every metric (:func:`all_metrics`), as plain records for the gate's evidence."""
    return [f.as_dict() for f in flips(reference_rows, candidate_rows, all_metrics(candidate_rows),
                                       agreement_tokens)]


def _restricted_p21(n: int, b: int, c: int, delta: float) -> float:
    """Tango's restricted MLE of the 'gained' cell probability under H0: p_lost - p_gained = delta."""
    a = 2.0 * n
    bb = -b - c + (2.0 * n - b + c) * delta
    cc = -c * delta * (1.0 - delta)
    disc = max(bb * bb - 4.0 * a * cc, 0.0)
    return max((math.sqrt(disc) - bb) / (2.0 * a), 0.0)


def score(f: Flips, delta: float) -> float:
    """Tango's score statistic for H0: drop = ``delta``; large when the drop is larger than ``delta``."""
    b, c, n = f.lost, f.gained, f.n
    p21 = _restricted_p21(n, b, c, delta)
    var = n * (2.0 * p21 + delta * (1.0 - delta))
    num = b - c - n * delta
    if var <= 0.0:
        return 0.0 if num == 0 else math.copysign(math.inf, num)
    return num / math.sqrt(var)


def exact_p(f: Flips) -> float:
    """Exact conditional (McNemar) one-sided p of H0: drop <= 0: P(X >= lost) for X ~ Binomial(lost + gained, 1/2)."""
    k = f.lost + f.gained
    if k == 0:
        return 1.0
    return sum(math.comb(k, i) for i in range(f.lost, k + 1)) / 2 ** k


def p_value(f: Flips, margin: float) -> float:
    """One-sided p-value of H0: drop <= ``margin`` against H1: drop > ``margin``: exact (conditional on the
    discordant cases) at margin 0, where the score test is too liberal for a handful of flips; Tango's score
    test otherwise."""
    if margin == 0.0:
        return exact_p(f)
    return 1.0 - _N.cdf(score(f, margin))


def bound(f: Flips, level: float, upper: bool) -> float:
    """The one-sided score confidence bound on the drop at ``level`` (lower when ``upper`` is False), in [-1, 1]:
    the set of ``delta`` that the one-sided test at 1 - level does not reject."""
    z = _N.inv_cdf(level)
    lo, hi = (f.drop, 1.0) if upper else (-1.0, f.drop)
    # score() falls as delta rises; the bound is where it crosses -z (upper) or +z (lower)
    target = -z if upper else z
    for _ in range(80):
        mid = (lo + hi) / 2.0
        if score(f, mid) > target:    # mid is still below the bound
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def holm(p: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (same order as ``p``)."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted


@dataclass(frozen=True)
class MetricDecision:
    """One metric's paired decision: flips, the drop, its simultaneous interval, the adjusted p-value."""

    flips: Flips
    margin: float
    low: float                 # the drop's lower bound at the Bonferroni level (simultaneous over the metrics)
    high: float                # its upper bound at that level
    p: float                   # one-sided p of H0: drop <= margin
    p_adjusted: float          # Holm over the metrics judged
    failed: bool
    detectable: float | None   # the drop this metric's n catches with the policy's power at its discordance
    first: "MetricDecision | None" = None   # a confirmed sampled metric: its decision on the campaign's seed alone
    seeds: int = 1             # how many seeds the flips pool (1: the campaign's seed alone)

    def as_dict(self) -> dict[str, Any]:
        out = {**self.flips.as_dict(), "drop": self.flips.drop, "margin": self.margin, "low": self.low,
               "high": self.high, "p": self.p, "p_adjusted": self.p_adjusted,
               "decision": "fail" if self.failed else "pass", "detectable_drop": self.detectable, "seeds": self.seeds}
        if self.first is not None:
            out["first_stage"] = {k: v for k, v in self.first.as_dict().items() if k not in ("metric", "seeds")}
        return out

    def reason(self, confidence: float) -> str:
        f = self.flips
        pooled = f" pooled over {self.seeds} seeds" if self.seeds > 1 else ""
        if sampled(f.metric) and self.first is None:
            pooled = " on the campaign's seed alone (not confirmed: a greedy metric decides the verdict)"
        first = ""
        if self.first is not None:
            g = self.first.flips
            first = (f" (on the campaign's seed alone: lost {g.lost}, gained {g.gained} of {g.n}, Holm p "
                     f"{self.first.p_adjusted:.3g})")
        return (f"{f.metric}: lost {f.lost}, gained {f.gained} of {f.n} paired cases{pooled}; drop {f.drop:+.3f} "
                f"(simultaneous {confidence:.0%} interval {self.low:+.3f}..{self.high:+.3f}) exceeds margin "
                f"{self.margin:g} with Holm-adjusted p {self.p_adjusted:.3g} <= {1 - confidence:.3g}{first}")


def decide(all_flips: Sequence[Flips], margins: Mapping[str, float], default_margin: float, confidence: float,
           power: float = 0.9) -> list[MetricDecision]:
    """Each metric's decision: fail when its Holm-adjusted p of H0 (drop <= margin) is at most 1 - confidence."""
    if not 0.5 < confidence < 1.0:
        raise EvidenceError(f"confidence must be in (0.5, 1), got {confidence!r}")
    if not all_flips:
        raise EvidenceError("the paired rule judges no metric")
    alpha = 1.0 - confidence
    m = len(all_flips)
    ps = [p_value(f, margins.get(f.metric, default_margin)) for f in all_flips]
    adj = holm(ps)
    level = 1.0 - alpha / m
    out = []
    for f, p, pa in zip(all_flips, ps, adj):
        margin = margins.get(f.metric, default_margin)
        out.append(MetricDecision(f, margin, bound(f, level, upper=False), bound(f, level, upper=True), p, pa,
                                  pa <= alpha, detectable_drop(f.n, max(f.discordance, 1.0 / f.n), alpha / m, power,
                                                               margin)))
    return out


def sampled(metric: str) -> bool:
    return metric.startswith("sampled.")


def needs_confirmation(decisions: Sequence[MetricDecision]) -> bool:
    """Whether more seeds must confirm the first stage: a sampled metric failed on the campaign's seed and no
    greedy metric failed (greedy decoding repeats itself, so a greedy failure decides the verdict and the sampled
    failures stay first-stage findings, said so in their reasons)."""
    if any(d.failed and not sampled(d.flips.metric) for d in decisions):
        return False
    return any(d.failed and sampled(d.flips.metric) and d.first is None for d in decisions)


def pooled(tables: Sequence[Sequence[Flips]]) -> list[Flips]:
    """Each metric's flips summed over several paired comparisons (one per seed, both sides on that seed): the
    pairs of different seeds are independent given the cases, so a drop of zero still makes lost and gained
    equally likely and the exact test holds on the sums.  Every table must count the same metrics."""
    if not tables:
        raise EvidenceError("pooling needs at least one flip table")
    by_table = [{f.metric: f for f in table} for table in tables]
    names = [f.metric for f in tables[0]]
    for t, by in enumerate(by_table):
        if set(by) != set(names):
            odd = sorted(set(by) ^ set(names))
            raise EvidenceError(f"flip table {t} counts different metrics than the first ({odd[0]!r}; {len(by)} "
                                f"against {len(names)} metrics)")
    out = []
    for name in names:
        parts = [by[name] for by in by_table]
        out.append(Flips(name, sum(f.n for f in parts), sum(f.lost for f in parts), sum(f.gained for f in parts),
                         sum(f.reference_ok for f in parts), sum(f.candidate_ok for f in parts)))
    return out


def confirm(first: Sequence[MetricDecision], pooled_flips: Sequence[Flips], seeds: int,
            margins: Mapping[str, float], default_margin: float, confidence: float,
            power: float = 0.9) -> list[MetricDecision]:
    """The second stage: Holm again over the same metrics, the sampled ones on ``pooled_flips`` (``seeds`` seeds,
    the campaign's included), the greedy ones as they were (greedy decoding repeats itself); a sampled metric
    fails only when it failed in ``first`` and fails pooled.  A sampled metric carries its first decision."""
    if seeds < 2:
        raise EvidenceError(f"confirmation pools at least 2 seeds, got {seeds}")
    by = {f.metric: f for f in pooled_flips}
    missing = [d.flips.metric for d in first if sampled(d.flips.metric) and d.flips.metric not in by]
    if missing:
        raise EvidenceError(f"the pooled flips lack {missing[0]!r}, which the first stage judged")
    second = decide([by[d.flips.metric] if sampled(d.flips.metric) else d.flips for d in first], margins,
                    default_margin, confidence, power)
    out = []
    for d1, d2 in zip(first, second):
        if sampled(d1.flips.metric):
            out.append(MetricDecision(d2.flips, d2.margin, d2.low, d2.high, d2.p, d2.p_adjusted,
                                      d1.failed and d2.failed, d2.detectable, d1, seeds))
        else:
            out.append(d1)
    return out


# -- power --------------------------------------------------------------------------------------------------


def sample_size(psi: float, detect: float, alpha: float, power: float, margin: float = 0.0) -> int:
    """Paired cases one metric needs (Connor 1987, one-sided at ``alpha``): a true drop of ``detect`` beyond
    ``margin`` is caught with probability ``power`` when a share ``psi`` of cases flips either way."""
    effect = detect - margin
    if not (0 < psi <= 1 and 0 < effect <= psi and 0 < alpha < 0.5 and 0.5 < power < 1):
        raise ValueError(f"need 0 < detect - margin <= psi <= 1, alpha in (0, 0.5), power in (0.5, 1); got psi "
                         f"{psi}, detect {detect}, margin {margin}, alpha {alpha}, power {power}")
    za, zb = _N.inv_cdf(1 - alpha), _N.inv_cdf(power)
    return math.ceil((za * math.sqrt(psi) + zb * math.sqrt(psi - effect * effect)) ** 2 / effect ** 2)


def detectable_drop(n: int, psi: float, alpha: float, power: float, margin: float = 0.0) -> float | None:
    """The smallest true drop beyond ``margin`` that ``n`` paired cases catch with ``power`` at the discordance
    ``psi`` (None: none up to psi).  Connor's formula holds the discordance fixed, which fits a drop from a
    reference both sides can miss; a metric with a margin (greedy agreement, whose every flip is a loss) is
    given None rather than a figure the formula does not support."""
    if margin > 0:
        return None
    lo, hi = 1e-6, psi
    if sample_size(psi, margin + hi, alpha, power, margin) > n:
        return None
    for _ in range(60):
        mid = (lo + hi) / 2
        if sample_size(psi, margin + mid, alpha, power, margin) <= n:
            hi = mid
        else:
            lo = mid
    return margin + hi


def simulate(n: int, p_lost: float, p_gained: float, metrics: int, margin: float, confidence: float,
             trials: int, seed: int) -> float:
    """The share of ``trials`` in which the paired rule fails a variant judged on ``metrics`` independent
    metrics of ``n`` cases each, every metric drawn from the flip model (P(lost), P(gained))."""
    rng = np.random.Generator(np.random.PCG64(seed))
    p_same = 1.0 - p_lost - p_gained
    draws = rng.multinomial(n, [p_lost, p_gained, p_same], size=(trials, metrics))
    failed = 0
    for t in range(trials):
        fl = [Flips(f"sim.m{i}", n, int(b), int(c), int(b) + int(s), int(c) + int(s))
              for i, (b, c, s) in enumerate(draws[t])]
        ps = [p_value(f, margin) for f in fl]
        failed += min(holm(ps)) <= 1.0 - confidence
    return failed / trials
