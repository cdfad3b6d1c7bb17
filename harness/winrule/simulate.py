"""Synthetic A/B/A windows with a known effect, noise and drift, to measure the win rule's error rates.

A registration's false-WIN rate and power depend on its repeats, required
effect and alpha, and on the machine's noise and drift; this module measures
them by running :func:`harness.winrule.rule.decide` end to end on simulated
windows, so that a campaign can size a registration before spending machine
time.  Only the standard library's seeded ``random.Random`` is used: the
figures are reproducible from the seed alone.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from .decision import INCONCLUSIVE
from .drift import DriftPolicy
from .evidence import CANDIDATE, CONTROL, Start, WaveInput
from .registration import Registration
from .rule import decide
from .statistics import LOSS, TIE, WIN


@dataclass(frozen=True)
class Scenario:
    """The truth behind a simulated window.

    Every value is ``base * exp(level + noise)`` (divided instead of
    multiplied for a lower-is-better metric, so a slower machine is slower
    in every metric).  ``noise_cv`` is the SD of the log noise, independent
    per start, cell, metric and repeat.  The machine-wide ``level`` of start s
    and repeat r is ``trend_per_start * s + walk_s + trend_per_repeat * r``,
    with ``walk`` a random walk (``walk_0 = 0``, steps of SD ``walk_sd``).
    ``effect`` is the true relative improvement of the candidate's primary
    metric (0 for A/A); guards and reported metrics have no true effect.
    """

    effect: float = 0.0
    noise_cv: float = 0.01
    trend_per_start: float = 0.005
    walk_sd: float = 0.003
    trend_per_repeat: float = 0.001

    def as_dict(self) -> dict[str, Any]:
        return {"effect_fraction": self.effect, "noise_cv_fraction": self.noise_cv,
                "trend_per_start_fraction": self.trend_per_start, "walk_sd_fraction": self.walk_sd,
                "trend_per_repeat_fraction": self.trend_per_repeat}


FINGERPRINT = {"cpu_model": "simulated", "logical_cpus": 2, "cpu_governor": "performance", "threads": 2}


def synthetic_window(registration: Registration, scenario: Scenario, rng: random.Random,
                     window: int = 0) -> list[Start]:
    """Three start records (control, candidate, control) drawn from ``scenario``, with matched, fresh inputs."""
    starts = []
    walk = 0.0
    for s, role in enumerate((CONTROL, CANDIDATE, CONTROL)):
        if s:
            walk += rng.gauss(0.0, scenario.walk_sd)
        values: dict[str, dict[str, list[float]]] = {}
        inputs: dict[str, list[WaveInput]] = {}
        for c, cell in enumerate(registration.cells):
            values[cell] = {}
            for m, metric in enumerate(registration.metrics):
                base = 10.0 * (c + 1) + 3.0 * m
                series = []
                for r in range(registration.repeats):
                    log = scenario.trend_per_start * s + walk + scenario.trend_per_repeat * r
                    log += rng.gauss(0.0, scenario.noise_cv)
                    if role == CANDIDATE and metric is registration.primary:
                        log += math.log1p(scenario.effect)
                    series.append(base * math.exp(log if metric.higher_is_better else -log))
                values[cell][metric.name] = series
            inputs[cell] = [WaveInput(f"{cell}-prompt-{w}", f"family-{w % 2}", 42 + w, f"salt-{window}-{s}-{cell}-{w}")
                            for w in range(registration.waves)]
        starts.append(Start(label=f"s{s + 1}", role=role, registration=registration.key,
                            config="candidate" if role == CANDIDATE else "control", values=values, inputs=inputs,
                            fingerprint=dict(FINGERPRINT), commit="simulated"))
    return starts


@dataclass(frozen=True)
class Rates:
    """How often each verdict came out of ``windows`` simulated windows."""

    windows: int
    counts: dict[str, int]

    def rate(self, verdict: str) -> float:
        return self.counts.get(verdict, 0) / self.windows

    def upper_bound(self, verdict: str, confidence: float = 0.95) -> float:
        """Exact one-sided Clopper-Pearson upper bound of the verdict's rate."""
        k, n = self.counts.get(verdict, 0), self.windows
        if k == n:
            return 1.0
        lo, hi = k / n, 1.0
        for _ in range(60):  # bisection on P(X <= k | p) = 1 - confidence
            mid = (lo + hi) / 2
            if _binom_cdf(k, n, mid) > 1 - confidence:
                lo = mid
            else:
                hi = mid
        return hi

    def as_dict(self) -> dict[str, Any]:
        return {"windows": self.windows, "counts": dict(sorted(self.counts.items())),
                "rates_fraction": {v: self.rate(v) for v in (WIN, LOSS, TIE, INCONCLUSIVE)}}


def _binom_cdf(k: int, n: int, p: float) -> float:
    total, log_p, log_q = 0.0, math.log(p), math.log1p(-p)
    for i in range(k + 1):
        total += math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p
                          + (n - i) * log_q)
    return total


def error_rates(registration: Registration, scenario: Scenario, *, windows: int, seed: int,
                policy: DriftPolicy | None = None) -> Rates:
    """Decide ``windows`` simulated windows and count the verdicts (deterministic for a given seed)."""
    rng = random.Random(seed)
    counts = {WIN: 0, LOSS: 0, TIE: 0, INCONCLUSIVE: 0}
    for w in range(windows):
        counts[decide(synthetic_window(registration, scenario, rng, w), registration, policy).verdict] += 1
    return Rates(windows, counts)
