"""The lane protocol and the one measuring loop on fake lanes: warm-up, repeats, extra repeats while noisy,
sequential, interleaved and by-repeat order, the failed-lane record, and the browser page's Python side."""

import math

import pytest

from harness import workload as workloads
from harness.browser import lane as browser_lane
from harness.errors import EvidenceError
from harness.fields import Where
from harness.lanes import BaseLane, Generation, Lane, LaneRun, failed, measure, measure_runs, run_lane
from harness.throughput import lanes as native, stats

SUMMARY_KEYS = {"repeats", "decode_tokens", "decode_s", "decode_tok_s", "decode_tok_s_median", "decode_tok_s_iqr",
                "decode_tok_s_samples", "prefill_ms_samples",
                "decode_tok_s_cv", "prefill_ms_median", "prefill_ms_iqr", "cpu_per_wall"}


def _work(**policy):
    raw = {"prompt_tokens": {"short": 4, "long": 40}, "new_tokens": 4, **policy}
    return workloads.build(list(range(100)), workloads.ThroughputPolicy.parse(raw, Where("t.toml", "policy.throughput")))


class Fake(BaseLane):
    """Deterministic stamps: ``step(call, prompt)`` ms per token after a prefill of len(prompt) / 10 ms; ``fail_at``
    raises on that call (0-based, warm-ups count); every call is logged as (name, prompt length)."""

    def __init__(self, name, log, step=lambda call, prompt: 1.0, fail_at=None, cpu=None, end=None):
        super().__init__(name)
        self.log, self.step, self.fail_at, self.cpu, self.end = log, step, fail_at, cpu, end
        self.calls, self.loaded, self.closed = 0, False, 0

    def load(self):
        self.loaded = True
        return {"load_ms": 1.0, "threads": 2}

    def cpu_s(self):
        return None if self.cpu is None else self.cpu * self.calls

    def _generate(self, prompt, n):
        call = self.calls
        self.calls += 1
        self.log.append((self.name, len(prompt)))
        if call == self.fail_at:
            raise EvidenceError(f"{self.name} died on call {call}")
        step = self.step(call, prompt)
        return [len(prompt) % 7] * n, [len(prompt) / 10 + step * i for i in range(n)], {"call": call}

    def close(self):
        self.closed += 1
        return self.end


def test_adapters_speak_the_protocol():
    for lane in (Fake("f", []), native.ProbeLane("bin", "g.onnx", 2), native.PythonOrtLane("g.onnx", 2),
                 native.OrtGenAILane("dir", 2), native.LlamaCppLane("m.gguf", 2, 64),
                 browser_lane.PageLane(None, None, "ort-web", None, 2)):
        assert isinstance(lane, Lane), lane
        assert lane.close() is None  # closing a lane that never loaded is harmless


def test_generation_derives_prefill_rate_and_cpu():
    g = Generation((1, 2, 3, 4), (100.0, 110.0, 120.0, 130.0), wall_s=0.2, cpu_s=0.3)
    assert g.prefill_ms == 100.0 and math.isclose(g.decode_tok_s, 100.0) and math.isclose(g.cpu_per_wall, 1.5)
    assert Generation((1,), (1.0,)).cpu_per_wall is None
    with pytest.raises(EvidenceError, match="asks for 5"):
        g.figures(5)
    with pytest.raises(Exception):
        g.ids = ()  # frozen


def test_base_lane_times_the_call_with_its_clock():
    lane = Fake("f", [], cpu=0.5)
    g = lane.generate([1, 2, 3], 4)
    assert g.ids == (3, 3, 3, 3) and g.token_ms == (0.3, 1.3, 2.3, 3.3) and g.wall_s > 0
    assert g.cpu_s == 0.5 and g.detail == {"call": 0}


def test_sequential_takes_warmup_repeats_and_records_the_evidence_shape():
    log = []
    out = measure(Fake("a", log), _work(warmup=2, repeats=5, max_repeats=9))
    assert set(out) == {"cells", "ids", "raw", "error", "ids_stable"} and out["error"] is None
    assert log == [("a", 4)] * 7 + [("a", 40)] * 7                       # warm-ups then repeats, cell by cell
    for cell in ("short", "long"):
        s = out["cells"][cell]
        assert set(s) == SUMMARY_KEYS and s["repeats"] == 5 and math.isclose(s["decode_tok_s"], 1000.0)
        assert s["cpu_per_wall"] is None and out["ids_stable"][cell]
        raw = out["raw"][cell]
        assert [r["warmup"] for r in raw] == [True] * 2 + [False] * 5
        assert [r["round"] for r in raw] == [None, None, 1, 2, 3, 4, 5]
        assert [r["call"] for r in raw] == list(range(7) if cell == "short" else range(7, 14))  # the lane's detail
    assert out["ids"] == {"short": [4] * 4, "long": [5] * 4}


def test_extra_repeats_while_noisy_up_to_the_bound():
    noisy = Fake("noisy", [], step=lambda call, prompt: 1.0 + call % 2)
    out = measure(noisy, _work(warmup=1, repeats=5, max_repeats=9, cv_limit=0.05))
    assert out["cells"]["short"]["repeats"] == 9 and out["cells"]["long"]["repeats"] == 9
    assert out["cells"]["short"]["decode_tok_s_cv"] > 0.05
    settles = Fake("settles", [], step=lambda call, prompt: 1.2 if call == 1 else 1.0)  # one slow repeat
    out = measure(settles, _work(warmup=1, repeats=3, max_repeats=15, cv_limit=0.05), order="sequential")
    # 3 repeats (one slow) are noisy; more repeats of the steady rate bring the CV under the limit
    assert 3 < out["cells"]["short"]["repeats"] < 15


def test_sequential_and_interleaved_give_identical_summaries_for_deterministic_lanes():
    work = _work(warmup=1, repeats=5, max_repeats=9)

    def lanes():
        return {n: Fake(n, [], step=lambda call, prompt, k=k: k * (1 + len(prompt) / 100)) for k, n in
                enumerate(("a", "b", "c"), 1)}
    seq, inter = measure(lanes(), work, "sequential"), measure(lanes(), work, "interleaved")
    assert list(seq) == list(inter) == ["a", "b", "c"]
    for n in seq:
        assert seq[n]["cells"] == inter[n]["cells"] and seq[n]["ids"] == inter[n]["ids"]
        assert seq[n]["error"] is inter[n]["error"] is None
        assert math.isclose(seq[n]["cells"]["short"]["decode_tok_s"], 1000 / (("abc".index(n) + 1) * 1.04))


def test_interleaved_rotates_the_order_each_round_after_all_warmups():
    log = []
    lanes = {n: Fake(n, log) for n in ("a", "b", "c")}
    measure(lanes, _work(warmup=1, repeats=4, max_repeats=4, prompt_tokens={"short": 4}), "interleaved")
    names = [n for n, _ in log]
    assert names[:3] == ["a", "b", "c"]                                 # warm-ups
    assert names[3:] == list("abc" "bca" "cab" "abc")                   # round k starts with lane k mod 3


def test_interleaved_rounds_continue_while_any_lane_is_noisy_and_pair_by_round():
    steady = Fake("steady", [])
    noisy = Fake("noisy", [], step=lambda call, prompt: 1.0 + call % 2)
    out = measure({"steady": steady, "noisy": noisy}, _work(repeats=5, max_repeats=8), "interleaved")
    assert out["steady"]["cells"]["short"]["repeats"] == out["noisy"]["cells"]["short"]["repeats"] == 8
    p = stats.paired_ratio(out["steady"]["raw"]["short"], out["steady"]["raw"]["short"])
    assert p["rounds"] == 8 and p["median"] == 1.0                      # warm-up records are not rounds


def test_a_lane_that_raises_mid_run_fails_alone():
    for order in ("sequential", "interleaved"):
        log = []
        lanes = {"a": Fake("a", log), "dies": Fake("dies", log, fail_at=8), "c": Fake("c", log)}
        out = measure(lanes, _work(warmup=1, repeats=5, max_repeats=5), order)
        assert out["dies"]["error"] == "dies died on call 8", order
        assert set(out["dies"]["cells"]) == {"short"} and "long" not in out["dies"]["ids"]  # call 8: long's 2nd
        assert lanes["dies"].calls == 9                                                     # dropped after it
        for n in ("a", "c"):
            assert out[n]["error"] is None and out[n]["cells"]["long"]["repeats"] == 5, order


def test_a_lane_that_fails_its_warmup_is_dropped_before_the_rounds():
    lanes = {"a": Fake("a", []), "b": Fake("b", [], fail_at=0)}
    out = measure(lanes, _work(), "interleaved")
    assert out["b"]["error"] and out["b"]["cells"] == {} and lanes["b"].calls == 1
    assert out["a"]["cells"]["short"]["repeats"] == 5


def test_by_repeat_runs_repeats_outermost_and_pools_waves():
    log = []
    lane = Fake("w", log, step=lambda call, prompt: 2.0 if call % 2 else 1.0)
    run = measure_runs({"w": lane}, _work(warmup=1, repeats=2, max_repeats=2), "by-repeat", waves=2)["w"]
    assert [p for _, p in log] == [4, 40] + [4, 4, 40, 40] * 2        # warm-ups, then per repeat: each cell's waves
    reps = run.series["short"].repeats
    assert len(reps) == 2 and reps[0]["decode_tokens"] == 6
    assert math.isclose(reps[0]["decode_tok_s"], 6 / (0.003 + 0.006))  # pooled tokens over seconds, not mean rates
    assert [r["wave"] for r in run.series["short"].raw if not r["warmup"]] == [0, 1, 0, 1]


def test_failed_is_the_evidence_of_a_lane_that_measured_nothing():
    assert failed("boom") == {**LaneRun("x", error="boom").evidence()}
    with pytest.raises(ValueError, match="order"):
        measure(Fake("a", []), _work(), "shuffled")


def test_run_lane_loads_measures_and_closes():
    lane = Fake("a", [], cpu=0.001)
    load, found = run_lane(lane, _work())
    assert load == {"load_ms": 1.0, "threads": 2} and lane.closed == 1 and found["error"] is None
    assert found["cells"]["short"]["cpu_per_wall"] is not None
    unclean = Fake("b", [], end="the probe exited with status 3")
    assert run_lane(unclean, _work())[1]["error"] == "the probe exited with status 3"

    class NoLoad(Fake):
        def load(self):
            raise EvidenceError("cannot open the graph")
    broken = NoLoad("c", [])
    assert run_lane(broken, _work()) == (None, failed("cannot open the graph")) and broken.closed == 1


# -- the browser page's Python side ----------------------------------------------------------------
class FakePage:
    def __init__(self, log, fail_on=None):
        self.log, self.fail_on, self.closed = log, fail_on, False

    def call(self, name, arg=None, timeout_s=0):
        self.log.append(name)
        if name == "load":
            return {"load_ms": 5.0, "num_threads_effective": 2, "env": {}}, {"cpu_s": 1.0, "wall_s": 0.5}
        if name == "generate":
            if self.log.count("generate") == self.fail_on:
                raise EvidenceError("the page threw")
            n = arg["newTokens"]
            return ({"ids": [3] * n, "token_ms": [10.0 + 2 * i for i in range(n)], "run_ms": [1.5] * n,
                     "feed_ms": [0.1] * n, "total_ms": 99.0}, {"cpu_s": 0.3, "wall_s": 0.2})
        return None, {"cpu_s": 0.0, "wall_s": 0.0}

    def close(self):
        self.closed = True


class FakeBrowser:
    def __init__(self, fail_on=None):
        self.log, self.pages, self.fail_on = [], [], fail_on

    def open(self, url, timeout_s=0):
        self.pages.append(FakePage(self.log, self.fail_on))
        return self.pages[-1]


class FakeServer:
    def url(self, path):
        return f"http://x/{path}"


def test_browser_run_goes_through_the_loop_and_keeps_its_evidence_shape():
    target = browser_lane.Target("artifacts/export-x", "onnx/model.onnx", "fp32")
    b = FakeBrowser()
    ev = browser_lane.run(b, FakeServer(), "ort-web", target, _work(warmup=1, repeats=5, max_repeats=9))
    assert list(ev) == ["lane", "dtype", "threads_requested", "load", "cells", "teacher_forced_top1", "raw", "ids",
                        "breakdown"]
    assert b.log == ["load"] + ["generate"] * 12 + ["release"] and b.pages[0].closed
    assert ev["load"]["load_cpu_per_wall"] == 2.0 and ev["cells"]["short"]["repeats"] == 5
    assert math.isclose(ev["cells"]["short"]["decode_tok_s"], 500.0)
    assert math.isclose(ev["cells"]["long"]["cpu_per_wall"], 1.5)
    r = ev["raw"]["short"][-1]
    assert r["total_ms"] == 99.0 and math.isclose(r["cpu_per_wall"], 1.5) and r["run_ms"] == [1.5] * 4  # the page's detail kept
    assert ev["breakdown"]["short"]["step_ms"] == 2.0 and ev["breakdown"]["short"]["session_run_ms"] == 1.5
    probe = browser_lane.run(FakeBrowser(), FakeServer(), "transformers.js", target, _work(), threads=1,
                             cells=("short",), repeats=3, max_repeats=3)
    assert list(probe["cells"]) == ["short"] and probe["cells"]["short"]["repeats"] == 3
    assert probe["threads_requested"] == 1


def test_browser_run_raises_the_pages_error_and_closes_without_release():
    b = FakeBrowser(fail_on=4)
    with pytest.raises(EvidenceError, match="the page threw"):
        browser_lane.run(b, FakeServer(), "ort-web", browser_lane.Target("a/b", "m.onnx", "q4"), _work())
    assert "release" not in b.log and b.pages[0].closed
