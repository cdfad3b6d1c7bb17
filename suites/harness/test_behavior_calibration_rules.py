"""The calibration's pure pieces: the case matrix, resampled fail rates, and the gate's verdict."""

import pytest

from harness.behavior import calibration
from harness.fields import Where
from harness.gates import behavior_calibration as gate


def rows(mode, passes, ids=None):
    return [{"mode": mode, "case": f"c{i:03d}", "category": "format", "passed": p, "stopped": True,
             "output_ids": [1, 2] if ids is None else ids[i],
             "flags": {"repetition": False, "empty": False, "garbage": False, "budget_exhausted": False}}
            for i, p in enumerate(passes)]


METRICS = ["greedy.format", "greedy.stopped", "greedy.agreement"]
RULE = dict(margins={"greedy.agreement": 0.5}, margin=0.0, confidence=0.95, agreement_tokens=2)


def test_matrix_counts_equal_the_paired_table_and_weights_multiply():
    ref = rows("greedy", [True] * 150 + [False] * 50)
    cand = rows("greedy", [True] * 140 + [False] * 10 + [True] * 5 + [False] * 45)
    m = calibration.case_matrix(ref, cand, METRICS, 2)
    f = {x.metric: x for x in m.flips()}
    assert (f["greedy.format"].lost, f["greedy.format"].gained, f["greedy.format"].n) == (10, 5, 200)
    assert f["greedy.agreement"].lost == 0
    doubled = {x.metric: x for x in m.flips([2] * 200)}
    assert (doubled["greedy.format"].lost, doubled["greedy.format"].n) == (20, 400)


def test_a_null_pair_passes_and_rarely_fails_on_resamples_and_damage_is_caught():
    ref = rows("greedy", [True] * 100 + [False] * 100)
    null = rows("greedy", [True] * 90 + [False] * 10 + [True] * 10 + [False] * 90)       # 10 lost, 10 gained
    c = calibration.measure("null", "null", "swap", ref, null, METRICS, resamples=200, seed=1, **RULE)
    assert not c.failed and c.fail_rate <= 0.05
    broken = rows("greedy", [True] * 60 + [False] * 40 + [True] * 2 + [False] * 98)      # 40 lost, 2 gained
    d = calibration.measure("dmg", "damaged", "noise", ref, broken, METRICS, resamples=200, seed=2,
                            measured={"heldout_loss_increase": 0.2}, **RULE)
    assert d.failed and d.failing == ("greedy.format",) and d.fail_rate >= 0.9
    v = gate.decide(gate.CalibrationEvidence((c.as_dict(), d.as_dict())), gate.CalibrationPolicy())
    assert v.passed, v.render()
    assert v.figures["worst_false_fail"].value == c.fail_rate and v.figures["dmg_power"].value == d.fail_rate
    # the same conditions with the kinds swapped: both reasons named
    swapped = [{**c.as_dict(), "kind": "damaged"}, {**d.as_dict(), "kind": "null"}]
    bad = gate.decide(gate.CalibrationEvidence(tuple(swapped)), gate.CalibrationPolicy())
    assert not bad.passed
    assert any("null condition dmg (noise) failed the paired rule on greedy.format" in r for r in bad.reasons)
    assert any("damaged condition null (swap) passed" in r for r in bad.reasons)


def test_a_lucky_reference_draw_is_confirmed_away_on_the_pooled_seeds():
    """The seed null as measured on SmolLM2: the reference's one sampled draw passes 161 of 200, the candidate's
    (another seed) 136; on the confirmation seeds both sides are even, so the pooled rule passes the condition,
    and its resamples apply the same two stages to the same cases."""
    def srows(passes):
        return [{**r, "mode": "sampled", "category": "stopping"} for r in rows("sampled", passes)]

    metrics = ["sampled.stopping"]
    ref, cand = srows([True] * 161 + [False] * 39), srows([True] * 116 + [False] * 45 + [True] * 20 + [False] * 19)
    alone = calibration.measure("seed+1", "null", "x", ref, cand, metrics, resamples=100, seed=1, **RULE)
    assert alone.failed and alone.failing == ("sampled.stopping",)
    # as a null its resamples exchange the sides: the rule's false-fail at these flip rates (about its 5 %), not
    # the plain bootstrap's fail rate at the drop this one draw happened to show (above one half)
    assert alone.fail_rate <= 0.06
    plain = calibration.resampled_fail_rate(calibration.case_matrix(ref, cand, metrics, 2), RULE["margins"], 0.0, 0.95,
                                            100, 1, calibration.case_matrix(ref, cand, metrics, 2), 2, "damaged")
    assert plain > 0.5
    even = [(srows([True] * 140 + [False] * 60), srows([True] * 110 + [False] * 30 + [True] * 32 + [False] * 28))
            for _ in range(2)]
    c = calibration.measure("seed+1", "null", "x", ref, cand, metrics, resamples=100, seed=1, confirm=even, **RULE)
    assert not c.failed and c.seeds == 3 and c.fail_rate <= 0.05, c.fail_rate
    pooled = {f.metric: f for f in c.pooled}["sampled.stopping"]
    assert (pooled.n, pooled.lost, pooled.gained) == (600, 45 + 60, 20 + 64)
    assert calibration.Condition.from_dict(c.as_dict()).as_dict() == c.as_dict()


def test_one_kind_alone_is_not_a_calibration():
    ref = rows("greedy", [True] * 20)
    c = calibration.measure("n", "null", "x", ref, ref, METRICS, resamples=50, seed=1, **RULE)
    v = gate.decide(gate.CalibrationEvidence((c.as_dict(),)), gate.CalibrationPolicy())
    assert not v.passed and "at least one null and one damaged" in v.reasons[0]


def test_unpaired_cases_and_unknown_kinds_are_refused():
    with pytest.raises(Exception, match="different cases"):
        calibration.case_matrix(rows("greedy", [True] * 3), rows("greedy", [True] * 2), METRICS, 2)
    with pytest.raises(Exception, match="kind 'maybe'"):
        calibration.Condition("x", "maybe", "", (), False, 0.0, 1, ())


@pytest.mark.parametrize("raw, says", [({"noise": 0.3}, r"noise: expected a list"), ({"resamples": 3}, "resamples"),
                                       ({"min_power": 2}, "min_power"), ({"bogus": 1}, "bogus")])
def test_policy_refuses_bad_fields_by_name(raw, says):
    with pytest.raises(Exception, match=says):
        gate.CalibrationPolicy.parse(raw, Where("c.toml", "policy.behavior_calibration"))
