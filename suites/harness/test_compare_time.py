"""compare's view of the tool's own time (harness.compare.timecost) and its time:N% threshold."""

import pytest

from harness.compare import timecost
from harness.compare.policy import Threshold, parse_threshold
from harness.errors import CampaignError
from harness.fields import Where


def rep(total, gates, cold=0, exclusive=None):
    return {"time": {"tests": 10, "test_seconds": total, "by_gate": [{"gate": g, "seconds": s} for g, s in gates.items()],
                     "builds": {"cold": cold, "cold_build_seconds": 5.0 * cold},
                     "phase": {"exclusive_seconds": exclusive}}}


def test_rows_compare_the_total_and_gates_from_a_minute_on():
    rows = timecost.time_rows(rep(100.0, {"cache": 70.0, "export": 2.0}), rep(150.0, {"cache": 140.0, "winrule": 90.0}))
    by = {r.gate: r for r in rows}
    assert rows[0].gate == timecost.TOTAL and by[timecost.TOTAL].change == pytest.approx(0.5)
    assert by["cache"].compared and by["cache"].change == pytest.approx(1.0)
    assert not by["export"].compared and by["export"].new_seconds is None          # one side only
    assert not by["winrule"].compared and by["winrule"].base_seconds is None
    assert timecost.cold_builds(rep(1.0, {}, cold=3)) == (3, 15.0)
    assert timecost.time_rows({}, {}) == []
    assert timecost.EXCLUSIVE not in by   # neither side recorded which tests held the machine exclusively


def test_the_exclusive_seconds_are_compared_after_the_total():
    """The timing tests' seconds (nothing ran beside them, so they count whole against the run's wall time) get their
    own row, compared like a gate's from a minute on; a side from before they were recorded shows none."""
    rows = timecost.time_rows(rep(600.0, {"cache": 70.0}, exclusive=200.0), rep(640.0, {"cache": 70.0}, exclusive=260.0))
    assert [r.gate for r in rows[:2]] == [timecost.TOTAL, timecost.EXCLUSIVE]
    assert rows[1].compared and rows[1].change == pytest.approx(0.3)
    older = {r.gate: r for r in timecost.time_rows(rep(600.0, {}), rep(640.0, {}, exclusive=30.0))}
    assert older[timecost.EXCLUSIVE].base_seconds is None and not older[timecost.EXCLUSIVE].compared


def test_the_time_threshold_parses_and_is_spelled_back():
    t = parse_threshold(Where("c.toml", "compare.fail_on[0]"), "time:25%")
    assert t == Threshold("time", 0.25) and str(t) == "time:25%" and "at least 60 s" in t.describe()
    with pytest.raises(CampaignError, match="time takes a percentage"):
        parse_threshold(Where("c.toml", "compare.fail_on[0]"), "time:25")
