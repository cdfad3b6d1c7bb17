"""The browser lane's pure statistics and rule: pooled decode rate, repeats, agreement, isolation and threads."""

import json
import math

import pytest

from harness.gates import throughput_browser as gate
from harness.gates.throughput_browser import BrowserPolicy
from harness.throughput import stats
from harness.errors import EvidenceError


def test_repeat_excludes_first_token():
    f = stats.stamp_figures([100.0, 110.0, 120.0, 130.0])
    assert f["prefill_ms"] == 100.0 and f["decode_tokens"] == 3
    assert math.isclose(f["decode_s"], 0.03) and math.isclose(f["decode_tok_s"], 100.0)


@pytest.mark.parametrize("stamps", [[5.0], [10.0, 9.0], [10.0, 10.0]])
def test_repeat_refuses_unusable_stamps(stamps):
    with pytest.raises(EvidenceError):
        stats.stamp_figures(stamps)


def test_pooled_rate_is_tokens_over_seconds_not_mean_of_rates():
    reps = [{"decode_tokens": 10, "decode_s": 1.0, "decode_tok_s": 10.0, "prefill_ms": 5.0},
            {"decode_tokens": 10, "decode_s": 0.1, "decode_tok_s": 100.0, "prefill_ms": 7.0}]
    s = stats.summarize(reps)
    assert math.isclose(s["decode_tok_s"], 20 / 1.1)
    assert s["prefill_ms_median"] == 6.0 and s["repeats"] == 2


def test_needs_more_follows_repeats_cv_and_bound():
    assert stats.needs_more([10.0] * 4, 5, 15, 0.05)
    assert not stats.needs_more([10.0] * 5, 5, 15, 0.05)
    noisy = [10.0, 20.0, 10.0, 20.0, 10.0]
    assert stats.needs_more(noisy, 5, 15, 0.05)
    assert not stats.needs_more(noisy * 3, 5, 15, 0.05)


def test_agreement():
    a = stats.agreement([1, 2, 3, 4], [1, 2, 9, 4])
    assert a == {"equal": 3, "of": 4, "fraction": 0.75, "first_divergence": 2, "identical": False}
    assert stats.agreement([1, 2], [1, 2])["identical"]
    assert stats.agreement([1], [1, 2])["first_divergence"] == 1


def _evidence(isolated=True, effective=2, workers=1, dtype="fp32", parity=True, repeats=5):
    cell = {"repeats": repeats, "decode_tok_s": 30.0, "decode_tok_s_cv": 0.02, "prefill_ms_median": 100.0,
            "prefill_ms_iqr": 3.0}
    agree = stats.agreement([1, 2, 3], [1, 2, 3] if parity else [1, 5, 3])
    return {"lane": "ort-web", "dtype": dtype,
            "load": {"load_ms": 800.0, "num_threads_effective": effective, "workers_started": workers,
                     "env": {"crossOriginIsolated": isolated}},
            "cells": {"short": cell}, "parity": {"short": agree},
            "workload": {"threads": 2, "repeats": 5, "cells": [{"name": "short"}]}}


POLICY = BrowserPolicy(require_parity_dtypes=("fp32",))


def decide(e, policy=POLICY):
    return gate.decide(gate.BrowserEvidence.pick(e), policy)


def test_rule_passes_and_carries_the_receipt_figures():
    v = decide(_evidence())
    assert v.passed, v.render()
    for name in ("decode_tok_s_short", "decode_tok_s_short_cv", "prefill_ms_short", "load_ms", "threads_used"):
        assert name in v.figures
    assert v.figures["threads_used"].value == 2


def test_rule_fails_without_isolation_and_on_a_silent_single_thread():
    v = decide(_evidence(isolated=False, effective=1, workers=0))
    assert not v.passed
    assert any("not cross-origin isolated" in r for r in v.reasons)
    assert any("asked for 2 wasm threads, the runtime runs 1" in r for r in v.reasons)


def test_threads_reported_but_never_started_count_as_one():
    v = decide(_evidence(effective=2, workers=0))
    assert any("fell back silently" in r for r in v.reasons)


def test_parity_judged_on_fp32_only():
    assert not decide(_evidence(parity=False)).passed
    v = decide(_evidence(parity=False, dtype="q4"))
    assert v.passed and math.isclose(v.figures["greedy_agreement_short"].value, 2 / 3)


def test_too_few_repeats_fail():
    v = decide(_evidence(repeats=3))
    assert any("3 measured repeats" in r for r in v.reasons)


def _profiled_generation(t0: float, runs: int, kernels: dict[str, float]) -> list[str]:
    """Chrome-trace lines of one profiled generation: ``runs`` model runs 100 us apart from ``t0``, each holding one
    kernel event per op of ``kernels`` (op -> us)."""
    lines = []
    for r in range(runs):
        ts = t0 + 100.0 * r
        lines.append(json.dumps({"cat": "Session", "name": "model_run", "ts": ts, "dur": 90.0}))
        for k, (op, dur) in enumerate(kernels.items()):
            lines.append(json.dumps({"cat": "Node", "name": f"n{k}_kernel_time", "ts": ts + 1 + k, "dur": dur,
                                     "args": {"op_name": op}}) + ",")
    return lines


def test_generations_profiled_in_one_session_are_told_apart_by_their_runs():
    """One page profiles a warm-up and then each cell in turn; the runtime prints every event at the end.  Each
    generation's summary counts its own runs and the kernels inside them, none of the others'."""
    from harness.browser import profile

    lines = (_profiled_generation(0.0, 8, {"MatMul": 50.0}) + _profiled_generation(10_000.0, 8, {"MatMul": 30.0})
             + _profiled_generation(20_000.0, 8, {"MatMul": 20.0, "GroupQueryAttention": 40.0}))
    evts = profile.events(["[", *lines, "]"])
    assert len(profile.model_runs(evts)) == 24
    short = profile.summarize(evts, first=8, count=8)
    long = profile.summarize(evts, first=16, count=8)
    assert short["runs"] == long["runs"] == 8 and short["decode_runs"] == long["decode_runs"] == 7
    assert short["kernel_ms_by_op"] == {"MatMul": 0.03} and math.isclose(short["kernel_ms"], 0.03)
    assert long["kernel_ms_by_op"] == {"GroupQueryAttention": 0.04, "MatMul": 0.02}
    assert math.isclose(long["non_kernel_ms"], 0.09 - 0.06)
