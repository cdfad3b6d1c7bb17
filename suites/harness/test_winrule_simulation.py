"""Measured error rates of the win rule on simulated windows, through the stopping rule (adaptive repeats).

The conditions are :func:`harness.winrule.simulate.null_conditions` (A/A: noise CV 0.5-2 %, linear drift 0-3 %
per start, an untrended random walk of SD 1 % per start) and :func:`power_conditions` (a true +5 % with CV
0.5-1 % and the same linear drifts), for two registrations: 3 repeats with adaptive repeats up to 6, and the
default campaign's 5 repeats up to 10.  The figures are the ones documented in :mod:`harness.winrule.rule`;
these are measurements of the rule (deterministic for the seed), not timings.
"""

from __future__ import annotations

import pytest

from harness.winrule import LOSS, WIN, Metric, Registration
from harness.winrule.simulate import MEASURED, Scenario, error_rates, grid

# pure computation (no artifact): under xdist these start beside the other worker's first cold build
pytestmark = pytest.mark.standalone

SEED = 20261204
WINDOWS = 1000
FALSE_WIN_BOUND = 0.05   # the bound, in every null condition
POWER_FLOOR = 0.90       # at a true +5 %, CV <= 1 %, linear drift up to 3 % per start


def registration(repeats: int, cap: int) -> Registration:
    return Registration(
        "simulated-abab", 1, ("short", "long"), repeats=repeats, waves_per_repeat=2, max_repeats=cap,
        primary=Metric("decode_tok_s", "tokens/s", True), guards=(Metric("prefill_ms", "ms", False, 0.05),),
        reported=(Metric("cpu_per_wall", "cpu s/s", False),), required_effect=0.02, alpha=0.05)


# (repeats, cap) -> the documented worst figures of this run (rule docstring, and the report through
# harness.winrule.simulate.MEASURED): false WIN, power.
DOCUMENTED = {(3, 6): MEASURED["3 repeats, adaptive to 6"], (5, 10): MEASURED["5 repeats, adaptive to 10"]}


@pytest.mark.slow   # 30-40 s each: 18 conditions x 1,000 windows through the rule
@pytest.mark.parametrize("repeats, cap", sorted(DOCUMENTED))
def test_error_rates_hold_in_every_condition(repeats, cap, record_property):
    g = grid(registration(repeats, cap), windows=WINDOWS, seed=SEED)
    record_property("winrule_grid", g.as_dict())
    for name, rates in {**g.null, **g.power}.items():
        print(f"{repeats}->{cap} {name}: {rates.counts} mean repeats {rates.mean_repeats:.2f}")
    for name, rates in g.null.items():
        assert rates.rate(WIN) <= FALSE_WIN_BOUND, name
        assert rates.upper_bound(WIN) <= FALSE_WIN_BOUND, name   # its exact 95 % bound too, not just the estimate
    for name, rates in g.power.items():
        assert rates.rate(WIN) >= POWER_FLOOR, name
        assert rates.counts[LOSS] == 0, name
    false_win, power = DOCUMENTED[(repeats, cap)]
    assert g.worst_false_win[1] == pytest.approx(false_win, abs=0.0015)
    assert g.worst_power[1] == pytest.approx(power, abs=0.0015)


def test_adaptive_repeats_add_power_without_adding_false_wins():
    fixed, adaptive = registration(3, 3), registration(3, 6)
    hard = Scenario(effect=0.05, noise_cv=0.01, trend_per_start=0.03, walk_sd=0.003, trend_per_repeat=0.001)
    before = error_rates(fixed, hard, windows=WINDOWS, seed=SEED)
    after = error_rates(adaptive, hard, windows=WINDOWS, seed=SEED)
    print(f"+5 %, CV 1 %, 3 %/start: fixed 3 {before.as_dict()}; adaptive 3->6 {after.as_dict()}")
    assert after.rate(WIN) > before.rate(WIN)
    walk = Scenario(effect=0.0, noise_cv=0.02, trend_per_start=0.0, walk_sd=0.01, trend_per_repeat=0.0)
    assert error_rates(adaptive, walk, windows=WINDOWS, seed=SEED).rate(WIN) <= FALSE_WIN_BOUND


def test_a_five_percent_regression_is_found_as_a_loss():
    loss = error_rates(registration(5, 10), Scenario(effect=1 / 1.05 - 1, noise_cv=0.01, trend_per_start=0.03),
                       windows=WINDOWS, seed=SEED)
    print(f"-5 % true effect: {loss.as_dict()}")
    assert loss.rate(LOSS) >= POWER_FLOOR and loss.counts[WIN] == 0
