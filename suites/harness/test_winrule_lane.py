"""measure_start: per-repeat pooling over waves, and a lane error that leaves the start incomplete."""

from harness import winrule
from harness import workload as workloads
from harness.errors import EvidenceError
from harness.lanes import Generation
from harness.winrule.lane import measure_start

REG = winrule.Registration(name="t", version=1, cells=("short",), repeats=2, waves_per_repeat=2,
                           primary=winrule.Metric("decode_tok_s", "tokens/s", True),
                           guards=(winrule.Metric("prefill_ms", "ms", False),))


WORK = workloads.Workload(cells=(workloads.Cell("short", (1, 2)),), new_tokens=5, warmup=1, repeats=5, max_repeats=15,
                          cv_limit=0.05, threads=2)


class scripted:
    """A lane whose n-th call steps ``step_ms[n]`` ms per token (the last value repeats); None raises."""

    name = "scripted"

    def __init__(self, step_ms):
        self.step_ms, self.calls = step_ms, 0

    def generate(self, prompt, n):
        ms = self.step_ms[min(self.calls, len(self.step_ms) - 1)]
        self.calls += 1
        if ms is None:
            raise EvidenceError("the probe died")
        return Generation(tuple(range(n)), tuple(5.0 + ms * i for i in range(n)))


def test_pools_waves_into_repeats():
    start, raw = measure_start("s1", "control", "threads=2", REG, scripted([10.0, 10.0, 20.0, 10.0, 10.0]), WORK,
                               {"cpu_model": "x"}, "abc")
    assert start.complete and len(raw) == 4
    # warm-up (call 0) is excluded; repeat 0 pools calls 1 and 2: 8 tokens over 0.04 + 0.08 s
    assert abs(start.values["short"]["decode_tok_s"][0] - 8 / 0.12) < 1e-9
    assert start.values["short"]["prefill_ms"] == (5.0, 5.0)
    assert len(start.inputs["short"]) == 4 and start.commit == "abc"


def test_lane_error_makes_an_incomplete_start_and_an_inconclusive_window():
    ok = scripted([10.0])
    bad = scripted([10.0, 10.0, None])
    args = (WORK, {"cpu_model": "x"}, "abc")
    s1, _ = measure_start("s1", "control", "c", REG, ok, *args)
    s2, _ = measure_start("s2", "candidate", "c2", REG, bad, *args)
    s3, _ = measure_start("s3", "control", "c", REG, ok, *args)
    assert not s2.complete and "the probe died" in s2.incomplete_reason
    d = winrule.decide([s1, s2, s3], REG)
    assert d.verdict == winrule.INCONCLUSIVE and d.verdict_before_override is None
