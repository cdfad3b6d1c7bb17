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
from functools import lru_cache
from typing import Any

from .decision import INCONCLUSIVE, INVALID
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
    per start, cell, metric and repeat.  The machine-wide ``level`` at the
    t-th start run (the three starts, then for adaptive repeats the three
    starts again, so t = 3 * block + s) and repeat r within that run is
    ``trend_per_start * t + walk_t + trend_per_repeat * r``, with ``walk``
    a random walk (``walk_0 = 0``, steps of SD ``walk_sd``).  ``effect`` is
    the true relative improvement of the candidate's primary metric (0 for
    A/A); guards and reported metrics have no true effect.
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


def _blocks(registration: Registration) -> list[tuple[int, int]]:
    """``(first repeat, end repeat)`` of each run of the three starts: the first look, then each step."""
    looks = registration.looks
    return [(0 if i == 0 else looks[i - 1], n) for i, n in enumerate(looks)]


def synthetic_values(registration: Registration, scenario: Scenario, rng: random.Random
                     ) -> list[dict[str, dict[str, list[float]]]]:
    """Per start, per cell and metric, values for every registered repeat (the last look's count)."""
    blocks = _blocks(registration)
    walk = [0.0]
    for _ in range(3 * len(blocks) - 1):
        walk.append(walk[-1] + rng.gauss(0.0, scenario.walk_sd))
    trend_per_start, trend_per_repeat, noise_cv = scenario.trend_per_start, scenario.trend_per_repeat, scenario.noise_cv
    effect = math.log1p(scenario.effect)
    gauss = rng.gauss
    out: list[dict[str, dict[str, list[float]]]] = [{}, {}, {}]
    for s, role in enumerate((CONTROL, CANDIDATE, CONTROL)):
        for c, cell in enumerate(registration.cells):
            out[s][cell] = {}
            for m, metric in enumerate(registration.metrics):
                base = 10.0 * (c + 1) + 3.0 * m
                improved = role == CANDIDATE and metric is registration.primary
                higher = metric.higher_is_better
                series = []
                for b, (lo, hi) in enumerate(blocks):
                    t = 3 * b + s
                    for r in range(hi - lo):
                        log = trend_per_start * t + walk[t] + trend_per_repeat * r
                        log += gauss(0.0, noise_cv)
                        if improved:
                            log += effect
                        series.append(base * math.exp(log if higher else -log))
                out[s][cell][metric.name] = series
    return out


@lru_cache(maxsize=1024)
def _wave_input(window: int, start: int, cell: str, wave: int) -> WaveInput:
    """What wave ``wave`` of ``cell`` was fed in start ``start``: the matched prompt, family and seed, and a salt
    fresh to the window, start, cell and wave.  Cached, as each look of a window re-reads the earlier looks' waves."""
    return WaveInput(f"{cell}-prompt-{wave}", f"family-{wave % 2}", 42 + wave, f"salt-{window}-{start}-{cell}-{wave}")


def window_at(registration: Registration, values: list[dict[str, dict[str, list[float]]]], repeats: int,
              window: int = 0) -> list[Start]:
    """The three start records holding the first ``repeats`` repeats of ``values``: matched prompts, fresh
    salts, identical greedy ids (the simulated candidate computes the same thing)."""
    starts = []
    waves = repeats * registration.waves_per_repeat
    outputs = {cell: [(1, 2, 3, w) for w in range(waves)] for cell in registration.cells}
    for s, role in enumerate((CONTROL, CANDIDATE, CONTROL)):
        inputs = {cell: [_wave_input(window, s, cell, w) for w in range(waves)] for cell in registration.cells}
        vals = {cell: {m: v[:repeats] for m, v in ms.items()} for cell, ms in values[s].items()}
        starts.append(Start(label=f"s{s + 1}", role=role, registration=registration.key,
                            config="candidate" if role == CANDIDATE else "control", values=vals, inputs=inputs,
                            fingerprint=dict(FINGERPRINT), commit="simulated", outputs=outputs))
    return starts


def run_window(registration: Registration, scenario: Scenario, rng: random.Random, window: int = 0,
               policy: DriftPolicy | None = None):
    """One window through the stopping rule, as a lane runs it: decide at the first look, and while the
    decision wants more, add ``step`` repeats to the same three starts and decide again."""
    values = synthetic_values(registration, scenario, rng)
    for n in registration.looks:
        decision = decide(window_at(registration, values, n, window), registration, policy)
        if not decision.wants_more:
            return decision
    return decision


@dataclass(frozen=True)
class Rates:
    """How often each verdict came out of ``windows`` simulated windows."""

    windows: int
    counts: dict[str, int]
    mean_repeats: float = 0.0

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
                "rates_fraction": {v: self.rate(v) for v in (WIN, LOSS, TIE, INCONCLUSIVE, INVALID)},
                "mean_repeats": self.mean_repeats}


def _binom_cdf(k: int, n: int, p: float) -> float:
    total, log_p, log_q = 0.0, math.log(p), math.log1p(-p)
    for i in range(k + 1):
        total += math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p
                          + (n - i) * log_q)
    return total


def error_rates(registration: Registration, scenario: Scenario, *, windows: int, seed: int,
                policy: DriftPolicy | None = None) -> Rates:
    """Run ``windows`` simulated windows through the stopping rule and count the final verdicts
    (deterministic for a given seed)."""
    rng = random.Random(seed)
    counts = {WIN: 0, LOSS: 0, TIE: 0, INCONCLUSIVE: 0, INVALID: 0}
    repeats = 0
    for w in range(windows):
        decision = run_window(registration, scenario, rng, w, policy)
        counts[decision.verdict] += 1
        repeats += decision.looks[-1].repeats if decision.looks else registration.repeats
    return Rates(windows, counts, repeats / windows)


def null_conditions() -> dict[str, Scenario]:
    """The A/A conditions the rule is held to: noise CV 0.5-2 %, linear drift 0-3 % per start (with a
    random walk of SD 0.3 % and 0.1 % per repeat), and an untrended random walk of SD 1 % per start."""
    out = {}
    for sd in (0.005, 0.01, 0.02):
        for trend in (0.0, 0.01, 0.03):
            out[f"aa cv {sd:.1%} trend {trend:.0%}/start"] = Scenario(0.0, sd, trend, 0.003, 0.001)
        out[f"aa cv {sd:.1%} random walk 1%/start"] = Scenario(0.0, sd, 0.0, 0.01, 0.0)
    return out


def power_conditions(effect: float = 0.05) -> dict[str, Scenario]:
    """A true ``effect`` with noise CV 0.5-1 % and linear drift 0-3 % per start."""
    return {f"{effect:+.0%} cv {sd:.1%} trend {trend:.0%}/start": Scenario(effect, sd, trend, 0.003, 0.001)
            for sd in (0.005, 0.01) for trend in (0.0, 0.01, 0.03)}


@dataclass(frozen=True)
class Grid:
    """Error rates of one registration over the null and power conditions."""

    registration: Registration
    null: dict[str, Rates]
    power: dict[str, Rates]

    @property
    def worst_false_win(self) -> tuple[str, float]:
        name = max(self.null, key=lambda k: (self.null[k].rate(WIN), k))
        return name, self.null[name].rate(WIN)

    @property
    def worst_power(self) -> tuple[str, float]:
        name = min(self.power, key=lambda k: (self.power[k].rate(WIN), k))
        return name, self.power[name].rate(WIN)

    def as_dict(self) -> dict[str, Any]:
        (fw_name, fw), (pw_name, pw) = self.worst_false_win, self.worst_power
        return {"repeats": self.registration.repeats, "looks": list(self.registration.looks),
                "required_effect_fraction": self.registration.required_effect, "alpha": self.registration.alpha,
                "worst_false_win": {"condition": fw_name, "rate_fraction": fw},
                "worst_power": {"condition": pw_name, "rate_fraction": pw},
                "null": {k: v.as_dict() for k, v in self.null.items()},
                "power": {k: v.as_dict() for k, v in self.power.items()}}


def grid(registration: Registration, *, windows: int, seed: int, effect: float = 0.05) -> Grid:
    """Every null and power condition, ``windows`` windows each, through the stopping rule."""
    null = {k: error_rates(registration, s, windows=windows, seed=seed) for k, s in null_conditions().items()}
    power = {k: error_rates(registration, s, windows=windows, seed=seed + 1)
             for k, s in power_conditions(effect).items()}
    return Grid(registration, null, power)


# The measured worst figures of :func:`grid` (1000 windows per condition, seed 20261204), per registration
# shape: (worst false WIN over the null conditions, worst power at a true +5 %).  The report quotes them;
# suites/harness/test_winrule_simulation.py re-measures them and fails when they drift from these.
MEASURED = {"3 repeats, adaptive to 6": (0.003, 0.974), "5 repeats, adaptive to 10": (0.004, 0.986)}
