"""The native throughput lane's pure statistics, rule and goal ratios, and the measuring loop on a fake lane."""

import math

import pytest
from hypothesis import given, settings, strategies as st

from harness import workload as workloads
from harness.errors import EvidenceError
from harness.fields import Where
from harness.lanes import Generation, measure
from harness.gates import lanes
from harness.gates.lanes import LanePolicy
from harness.throughput import rule, stats


def test_figures_exclude_the_first_token():
    f = stats.figures([100.0, 110.0, 120.0, 130.0], [1, 2, 3, 4], 4)
    assert f["prefill_ms"] == 100.0 and f["decode_tokens"] == 3 and f["total_ms"] == 130.0
    assert math.isclose(f["decode_s"], 0.03) and math.isclose(f["decode_tok_s"], 100.0)


@pytest.mark.parametrize("stamps,ids,expected", [
    ([5.0], [1], 1),                      # one token: no decode to time
    ([10.0, 9.0], [1, 2], 2),             # backwards
    ([10.0, 10.0], [1, 2], 2),            # no measurable decode time
    ([1.0, 2.0], [1, 2], 3),              # stopped early (EOS not ignored)
    ([1.0, 2.0, 3.0], [1, 2], 2),         # stamps and ids disagree
])
def test_figures_refuse_unusable_generations(stamps, ids, expected):
    with pytest.raises(EvidenceError):
        stats.figures(stamps, ids, expected)


def test_pooled_rate_is_tokens_over_seconds_not_mean_of_rates():
    reps = [{"decode_tokens": 10, "decode_s": 1.0, "decode_tok_s": 10.0, "prefill_ms": 5.0},
            {"decode_tokens": 10, "decode_s": 0.1, "decode_tok_s": 100.0, "prefill_ms": 7.0}]
    s = stats.summarize(reps)
    assert math.isclose(s["decode_tok_s"], 20 / 1.1)
    assert s["prefill_ms_median"] == 6.0 and s["repeats"] == 2 and s["decode_tokens"] == 20


def test_single_repeat_has_no_cv():
    s = stats.summarize([{"decode_tokens": 3, "decode_s": 0.1, "decode_tok_s": 30.0, "prefill_ms": 1.0}])
    assert s["decode_tok_s_cv"] is None


rates = st.lists(st.floats(min_value=1.0, max_value=1e4, allow_nan=False), min_size=1, max_size=10)


@given(tokens=st.lists(st.integers(1, 100), min_size=1, max_size=20),
       seconds=st.lists(st.floats(min_value=1e-3, max_value=10.0), min_size=20, max_size=20))
def test_pooled_rate_lies_between_the_slowest_and_fastest_repeat(tokens, seconds):
    seconds = seconds[:len(tokens)]
    per = [t / s for t, s in zip(tokens, seconds)]
    pooled = stats.pooled_rate(tokens, seconds)
    assert min(per) * (1 - 1e-9) <= pooled <= max(per) * (1 + 1e-9)


@given(values=rates, repeats=st.integers(1, 8), extra=st.integers(0, 8),
       cv_limit=st.floats(min_value=0.0, max_value=1.0))
def test_needs_more_is_bounded_and_respects_the_minimum(values, repeats, extra, cv_limit):
    max_repeats = repeats + extra
    more = stats.needs_more(values, repeats, max_repeats, cv_limit)
    if len(values) < repeats:
        assert more
    if len(values) >= max_repeats:
        assert not more


def test_needs_more_asks_for_repeats_while_noisy_and_stops_when_steady():
    assert stats.needs_more([100, 50, 100, 50, 100], 5, 15, 0.05)
    assert not stats.needs_more([100, 101, 99, 100, 100], 5, 15, 0.05)
    assert not stats.needs_more([100, 50] * 8, 5, 15, 0.05)  # bounded


@given(ids=st.lists(st.integers(0, 50), max_size=40))
def test_agreement_with_itself_is_identical(ids):
    a = stats.agreement(ids, ids)
    assert a["identical"] and a["first_divergence"] is None and a["equal"] == len(ids)


def test_agreement_names_the_first_divergence():
    a = stats.agreement([1, 2, 9, 4], [1, 2, 3, 4])
    assert not a["identical"] and a["first_divergence"] == 2 and a["equal"] == 3 and a["fraction"] == 0.75
    short = stats.agreement([1, 2], [1, 2, 3])
    assert not short["identical"] and short["first_divergence"] == 2


def test_ratio_unknown_when_a_side_is_missing():
    assert stats.ratio(None, 2.0) is None and stats.ratio(2.0, None) is None and stats.ratio(2.0, 0.0) is None
    assert stats.ratio(3.0, 2.0) == 1.5


# -- rule -------------------------------------------------------------------------------------
POLICY = LanePolicy(("fp32",))


def decide(e, policy=POLICY):
    return lanes.decide(lanes.LaneEvidence.pick(e), policy)


def _cell(rate=100.0, repeats=5):
    return {"repeats": repeats, "decode_tok_s": rate, "decode_tok_s_cv": 0.01, "decode_tok_s_iqr": 1.0,
            "prefill_ms_median": 10.0, "prefill_ms_iqr": 0.5}


def _evidence(**over):
    same = {"equal": 32, "of": 32, "fraction": 1.0, "first_divergence": None, "identical": True}
    e = {"lane": "native-probe", "dtype": "fp32", "error": None, "load": {"load_ms": 50.0, "threads": 2},
         "cells": {"short": _cell(), "long": _cell(80.0)}, "parity": {"short": same, "long": same},
         "parity_reference": "python",
         "workload": {"threads": 2, "repeats": 5, "cells": [{"name": "short"}, {"name": "long"}]}}
    e.update(over)
    return e


def test_rule_passes_and_records_the_report_figures():
    v = decide(_evidence())
    assert v.passed, v.render()
    for name in ("decode_tok_s_short", "decode_tok_s_long", "prefill_ms_short", "decode_tok_s_short_cv", "load_ms",
                 "threads_used", "greedy_agreement_long"):
        assert name in v.figures
    assert v.figures["decode_tok_s_long"].value == 80.0 and v.figures["decode_tok_s_long"].count == 5
    # only the real cells read as cells: a name with both decode_tok_s_<x> and prefill_ms_<x>
    cells = {k[len("decode_tok_s_"):] for k in v.figures if k.startswith("decode_tok_s_")
             and f"prefill_ms_{k[len('decode_tok_s_'):]}" in v.figures}
    assert cells == {"short", "long"}


def test_rule_fails_on_error_missing_cell_few_repeats_threads():
    assert "boom" in decide(_evidence(error="boom", cells={})).render()
    assert "no result for cell long" in decide(_evidence(cells={"short": _cell()})).render()
    assert "3 measured repeats" in decide(_evidence(cells={"short": _cell(repeats=3), "long": _cell()})).render()
    assert "1 threads" in decide(_evidence(load={"load_ms": 1.0, "threads": 1})).render()


def test_rule_fails_parity_only_where_required():
    bad = {"equal": 30, "of": 32, "fraction": 30 / 32, "first_divergence": 7, "identical": False}
    e = _evidence(parity={"short": bad, "long": bad})
    v = decide(e)
    assert not v.passed and "first divergence at token 7" in v.render()
    assert decide(e, LanePolicy(())).passed
    assert "not checked" in decide(_evidence(parity=None)).render()


def test_goal_ratios_and_targets():
    rates = {"q4": {"short": 150.0}, "fp32": {"short": 60.0}, "ort-genai": {"short": 145.0},
             "llama.cpp": {"short": 100.0}, "ort-genai-probe": {"short": 147.0}}
    g = rule.goal(rates, {"vs_ortgenai": 1.0, "vs_llamacpp": 1.3, "probe_vs_ortgenai_tolerance": 0.03})
    q4 = g["variants"]["q4"]["short"]
    assert math.isclose(q4["vs_ortgenai"], 150 / 145) and q4["meets_vs_ortgenai"]
    assert math.isclose(q4["vs_llamacpp"], 1.5) and q4["meets_vs_llamacpp"]
    assert not g["variants"]["fp32"]["short"]["meets_vs_ortgenai"]
    assert g["probe_on_ortgenai_graph"]["short"]["within_tolerance"]
    assert set(g["variants"]) == {"q4", "fp32"}
    missing = rule.goal({"q4": {"short": 1.0}}, {"vs_ortgenai": 1.0, "vs_llamacpp": 1.3, "probe_vs_ortgenai_tolerance": 0.03})
    assert missing["variants"]["q4"]["short"]["meets_vs_llamacpp"] is None


# -- the measuring loop ----------------------------------------------------------------------------
class _Lane:
    """A lane over a plain ``fn(prompt, n) -> {"ids", "token_ms"}`` (no CPU clock)."""

    def __init__(self, fn, name="fake"):
        self.fn, self.name = fn, name

    def generate(self, prompt, n):
        g = self.fn(list(prompt), n)
        return Generation(tuple(g["ids"]), tuple(g["token_ms"]))


def _work(**policy):
    raw = {"prompt_tokens": {"short": 4, "long": 40}, "new_tokens": 4, **policy}
    return workloads.build(list(range(100)), workloads.ThroughputPolicy.parse(raw, Where("test.toml", "policy.throughput")))


def test_measure_takes_warmup_repeats_and_extra_repeats_while_noisy():
    calls = []
    pattern = iter([1.0, 2.0] * 50)

    def fake(prompt, n):
        calls.append(len(prompt))
        step = next(pattern)
        return {"ids": [7] * n, "token_ms": [1.0 + i * step for i in range(n)]}

    out = measure(_Lane(fake), _work(warmup=1, repeats=5, max_repeats=9, cv_limit=0.05))
    assert out["error"] is None
    assert out["cells"]["short"]["repeats"] == 9 and out["cells"]["long"]["repeats"] == 9  # noisy: up to the bound
    assert calls.count(4) == 10 and calls.count(40) == 10                                   # + 1 warm-up each
    steady = measure(_Lane(lambda p, n: {"ids": [1] * n, "token_ms": [1.0 + i for i in range(n)]}),
                     _work(repeats=5, max_repeats=9))
    assert steady["cells"]["short"]["repeats"] == 5 and steady["ids_stable"]["short"]


def test_measure_records_a_failing_lane_instead_of_raising():
    out = measure(_Lane(lambda p, n: {"ids": [1], "token_ms": [1.0]}), _work())
    assert out["error"] and "asks for 4" in out["error"] and out["cells"] == {}


def test_paired_ratio_matches_rounds_and_cancels_common_drift():
    a = [{"round": i, "decode_tok_s": 100.0 * f} for i, f in enumerate([1.0, 0.5, 1.0, 0.7])]
    b = [{"round": i, "decode_tok_s": 50.0 * f} for i, f in enumerate([1.0, 0.5, 1.0, 0.7])]
    p = stats.paired_ratio(a, b)
    assert p["rounds"] == 4 and math.isclose(p["median"], 2.0) and math.isclose(p["iqr"], 0.0, abs_tol=1e-12)
    assert stats.paired_ratio(a, [{"round": 9, "decode_tok_s": 1.0}])["median"] is None


@given(st.lists(st.floats(min_value=1.0, max_value=1e3), min_size=1, max_size=12))
def test_paired_ratio_of_a_lane_with_itself_is_one(values):
    reps = [{"round": i, "decode_tok_s": v} for i, v in enumerate(values)]
    assert math.isclose(stats.paired_ratio(reps, reps)["median"], 1.0)


def test_summary_keeps_each_repeat_in_order():
    reps = [{"decode_tokens": 10, "decode_s": 1.0, "decode_tok_s": 10.0, "prefill_ms": 5.0},
            {"decode_tokens": 10, "decode_s": 0.1, "decode_tok_s": 100.0, "prefill_ms": 7.0},
            {"decode_tokens": 10, "decode_s": 0.5, "decode_tok_s": 20.0, "prefill_ms": 6.0}]
    s = stats.summarize(reps)
    assert s["decode_tok_s_samples"] == [10.0, 100.0, 20.0] and s["prefill_ms_samples"] == [5.0, 7.0, 6.0]
    assert s["decode_tok_s_median"] == 20.0
