"""measure_start: per-repeat pooling over waves, and a lane error that leaves the start incomplete."""

from harness import winrule
from harness.errors import EvidenceError
from harness.throughput import stats
from harness.winrule.lane import measure_start

REG = winrule.Registration(name="t", version=1, cells=("short",), repeats=2, waves_per_repeat=2,
                           primary=winrule.Metric("decode_tok_s", "tokens/s", True),
                           guards=(winrule.Metric("prefill_ms", "ms", False),))


def scripted(step_ms):
    calls = []

    def generate(prompt, n):
        calls.append(len(calls))
        ms = step_ms[min(len(calls) - 1, len(step_ms) - 1)]
        if ms is None:
            raise EvidenceError("the probe died")
        return {"ids": list(range(n)), "token_ms": [5.0 + ms * i for i in range(n)]}
    return generate


def test_pools_waves_into_repeats():
    start, raw = measure_start("s1", "control", "threads=2", REG, scripted([10.0, 10.0, 20.0, 10.0, 10.0]),
                               {"short": [1, 2]}, {"short": "a" * 64}, 5, 1, {"cpu_model": "x"}, "abc",
                               stats.figures)
    assert start.complete and len(raw) == 4
    # warm-up (call 0) is excluded; repeat 0 pools calls 1 and 2: 8 tokens over 0.04 + 0.08 s
    assert abs(start.values["short"]["decode_tok_s"][0] - 8 / 0.12) < 1e-9
    assert start.values["short"]["prefill_ms"] == (5.0, 5.0)
    assert len(start.inputs["short"]) == 4 and start.commit == "abc"


def test_lane_error_makes_an_incomplete_start_and_an_inconclusive_window():
    ok = scripted([10.0])
    bad = scripted([10.0, 10.0, None])
    args = ({"short": [1, 2]}, {"short": "a" * 64}, 5, 1, {"cpu_model": "x"}, "abc", stats.figures)
    s1, _ = measure_start("s1", "control", "c", REG, ok, *args)
    s2, _ = measure_start("s2", "candidate", "c2", REG, bad, *args)
    s3, _ = measure_start("s3", "control", "c", REG, ok, *args)
    assert not s2.complete and "the probe died" in s2.incomplete_reason
    d = winrule.decide([s1, s2, s3], REG)
    assert d.verdict == winrule.INCONCLUSIVE and d.verdict_before_override is None
