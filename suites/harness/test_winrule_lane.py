"""run_window: the wave schedule, per-repeat pooling, blocks of adaptive repeats in A/B/A order, the outputs the
correctness prerequisite compares, the machine sampled during each start, and a lane error that leaves the
start incomplete.  The lanes here are scripted (this tests the window's plumbing; the real probe windows are
suites/test_win_rule.py and test_winrule_real.py)."""

from __future__ import annotations

import dataclasses

import pytest

from harness import winrule
from harness.errors import EvidenceError, HarnessError
from harness.lanes import Generation
from harness.winrule.lane import Schedule, prompt_sha256, registered, run_window

REG = winrule.Registration(name="t", version=1, cells=("short",), repeats=2, waves_per_repeat=2,
                           primary=winrule.Metric("decode_tok_s", "tokens/s", True),
                           guards=(winrule.Metric("prefill_ms", "ms", False),), seeds="greedy")
CORPUS = list(range(100, 400))
SCHEDULE = Schedule.build(CORPUS, {"short": 4}, 8)
CALLS: list[str] = []


class scripted:
    """A lane whose n-th call steps ``step_ms[n]`` ms per token (the last value repeats); None raises. Its ids
    follow the prompt (``wrong`` adds one to every id: a lane that computes something else)."""

    def __init__(self, name, step_ms, wrong=False):
        self.name, self.step_ms, self.calls, self.wrong = name, step_ms, 0, wrong

    def generate(self, prompt, n):
        ms = self.step_ms[min(self.calls, len(self.step_ms) - 1)]
        self.calls += 1
        CALLS.append(self.name)
        if ms is None:
            raise EvidenceError("the probe died")
        ids = tuple(prompt[-1] + i + (1 if self.wrong else 0) for i in range(n))
        return Generation(ids, tuple(5.0 + ms * i for i in range(n)))


def window(reg, lanes, **kw):
    CALLS.clear()
    reg = registered(reg, SCHEDULE) if reg.looks[-1] * reg.waves_per_repeat <= 8 else reg
    return run_window(reg, lanes, ("threads=2", "threads=1", "threads=2"), ("a1", "b", "a2"), SCHEDULE,
                      new_tokens=5, warmup=1, fingerprint=lambda: {"cpu_model": "x"}, commit="abc",
                      decide=lambda starts: winrule.decide(starts, reg, winrule.DriftPolicy()),
                      sample_interval_s=0.05, **kw)


def test_schedule_gives_every_wave_its_own_prompt_and_refuses_a_short_corpus():
    shas = SCHEDULE.shas()["short"]
    assert len(set(shas)) == 8 and shas[0] == prompt_sha256(CORPUS[:4])
    with pytest.raises(HarnessError, match="needs 8 distinct prompts of 4 tokens"):
        Schedule.build(list(range(6)), {"short": 4}, 8)
    with pytest.raises(HarnessError, match="repeats itself"):
        Schedule.build([1, 2] * 20, {"short": 4}, 8)


def test_pools_waves_into_repeats_with_the_registered_prompts_and_keeps_the_outputs():
    d, starts, raw = window(REG, [scripted("a1", [10.0, 10.0, 20.0, 10.0, 10.0]), scripted("b", [10.0]),
                                  scripted("a2", [10.0, 10.0, 20.0, 10.0, 10.0])])
    s = starts[0]
    assert s.complete and len(raw["a1"]) == 4
    # warm-up (call 0) is excluded; repeat 0 pools calls 1 and 2: 8 tokens over 0.04 + 0.08 s
    assert abs(s.values["short"]["decode_tok_s"][0] - 8 / 0.12) < 1e-9
    assert s.values["short"]["prefill_ms"] == (5.0, 5.0)
    assert [w.prompt_sha256 for w in s.inputs["short"]] == list(SCHEDULE.shas()["short"][:4])
    assert s.outputs["short"][1] == tuple(SCHEDULE.prompts["short"][1][-1] + i for i in range(5))
    assert s.samples["samples"] >= 2 and "steal_fraction" in s.samples and s.commit == "abc"
    assert d.outputs.startswith("identical")


def test_a_tie_adds_a_block_of_repeats_to_the_same_three_starts_in_aba_order():
    reg = dataclasses.replace(REG, max_repeats=4)
    lanes = [scripted("a1", [10.0]), scripted("b", [10.0]), scripted("a2", [10.0])]
    d, starts, _ = window(reg, lanes)
    assert [x.repeats for x in d.looks] == [2, 4] and d.verdict == winrule.TIE and not d.wants_more
    assert all(len(s.values["short"]["decode_tok_s"]) == 4 for s in starts)
    # block 1: a1 (warm-up + 4 waves), b, a2; block 2: a1, b, a2 again (4 waves each, no warm-up)
    assert CALLS == ["a1"] * 5 + ["b"] * 5 + ["a2"] * 5 + ["a1"] * 4 + ["b"] * 4 + ["a2"] * 4


def test_a_decided_window_stops_at_its_first_look():
    reg = dataclasses.replace(REG, max_repeats=4)
    d, starts, _ = window(reg, [scripted("a1", [10.0]), scripted("b", [5.0]), scripted("a2", [10.0])])
    assert d.verdict == winrule.WIN and [x.repeats for x in d.looks] == [2]
    assert len(starts[1].values["short"]["decode_tok_s"]) == 2


def test_a_faster_candidate_that_computes_something_else_is_invalid():
    d, _, _ = window(REG, [scripted("a1", [10.0]), scripted("b", [5.0], wrong=True), scripted("a2", [10.0])])
    assert d.verdict == winrule.INVALID and d.verdict_before_override == winrule.WIN
    assert any("the candidate computes something else: greedy ids differ in cell 'short' wave 0 at token 0" in r
               for r in d.reasons), d.reasons


def test_lane_error_makes_an_incomplete_start_and_an_inconclusive_window():
    d, starts, _ = window(REG, [scripted("a1", [10.0]), scripted("b", [10.0, 10.0, None]), scripted("a2", [10.0])])
    assert not starts[1].complete and "the probe died" in starts[1].incomplete_reason
    assert d.verdict == winrule.INCONCLUSIVE and d.verdict_before_override is None
