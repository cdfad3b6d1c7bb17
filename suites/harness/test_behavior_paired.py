"""The paired behavior rule: flips counted case by case, the exact and score tests, Holm, and the rule's own
error rates over the flip model (false-fail on a candidate equal to its reference, power at the policy's drop)."""

import math

import numpy as np
import pytest

from harness.behavior import paired
from harness.errors import EvidenceError
from harness.fields import Where
from harness.gates import behavior as rule


def typed_decide_gate(e, *args):
    """The rule on the test's dict of evidence, typed as the gate's."""
    return rule.decide_gate(rule.BehaviorEvidence.pick(e), *args)


def typed_paired_record(e, *args):
    """The rule on the test's dict of evidence, typed as the gate's."""
    return rule.paired_record(rule.BehaviorEvidence.pick(e), *args)


def typed_paired_decisions(e, *args):
    """The rule on the test's dict of evidence, typed as the gate's."""
    return rule.paired_decisions(rule.BehaviorEvidence.pick(e), *args)


def typed_needs_confirmation(e, *args):
    """The rule on the test's dict of evidence, typed as the gate's."""
    return rule.needs_confirmation(rule.BehaviorEvidence.pick(e), *args)



def pairs(lost, gained, both=0, neither=0):
    return [(True, False)] * lost + [(False, True)] * gained + [(True, True)] * both + [(False, False)] * neither


def row(mode, case, category, passed, stopped=True, ids=(1, 2, 3), **flags):
    return {"mode": mode, "case": case, "category": category, "passed": passed, "stopped": stopped,
            "output_ids": list(ids), "flags": {"repetition": False, "empty": False, "garbage": False,
                                               "budget_exhausted": not stopped, **flags}}


def test_flips_pair_rows_by_mode_and_case_and_count_counters_as_events():
    ref = [row("greedy", "a", "format", True), row("greedy", "b", "format", False),
           row("greedy", "c", "arithmetic", True, stopped=False), row("sampled", "a", "format", True)]
    cand = [row("greedy", "a", "format", False, ids=(1, 2, 4)), row("greedy", "b", "format", True),
            row("greedy", "c", "arithmetic", True, stopped=True, garbage=True), row("sampled", "a", "format", True)]
    got = {f.metric: f for f in paired.flips(ref, cand, ["greedy.format", "greedy.stopped", "greedy.garbage",
                                                         "greedy.agreement", "sampled.format"], 2)}
    assert (got["greedy.format"].lost, got["greedy.format"].gained, got["greedy.format"].n) == (1, 1, 2)
    assert (got["greedy.stopped"].lost, got["greedy.stopped"].gained) == (0, 1)
    assert (got["greedy.garbage"].lost, got["greedy.garbage"].gained) == (1, 0)     # garbage appeared: lost
    assert (got["greedy.agreement"].lost, got["greedy.agreement"].n) == (0, 3)      # first 2 ids agree everywhere
    assert got["sampled.format"].n == 1
    with pytest.raises(EvidenceError, match="different cases .*1 unpaired"):
        paired.flips(ref, cand[:-1], ["greedy.format"], 2)


def test_flip_counts_must_be_consistent():
    with pytest.raises(EvidenceError, match="exceed the 5 paired cases"):
        paired.Flips("greedy.format", 5, 4, 3, 4, 3)
    with pytest.raises(EvidenceError, match="zero denominator"):
        paired.Flips("greedy.format", 0, 0, 0, 0, 0)
    with pytest.raises(EvidenceError, match="not gained"):
        paired.Flips("greedy.format", 10, 2, 1, 5, 5)
    with pytest.raises(EvidenceError, match="not a non-negative integer"):
        paired.Flips("greedy.format", 10, True, 1, 5, 4)


@pytest.mark.parametrize("lost, gained, p", [(6, 1, 0.0625), (5, 1, 7 / 64), (8, 0, 1 / 256), (0, 0, 1.0),
                                             (3, 5, 219 / 256)])
def test_exact_mcnemar_at_margin_zero(lost, gained, p):
    f = paired.count("m.x", pairs(lost, gained, both=10))
    assert math.isclose(paired.p_value(f, 0.0), p, rel_tol=1e-12)


def test_the_issue_figures_on_twenty_cases_are_noise_and_a_real_drop_is_not():
    """q8's sampled stopping (6 lost, 1 gained) and q8-gptq's greedy stopping (5/1) of 20 cases are noise under a
    correction for 19 metrics; 8 lost of 20 with none gained is significant on its own (uncorrected)."""
    q8 = paired.count("sampled.stopping", pairs(6, 1, both=11, neither=2))
    assert paired.holm([paired.p_value(q8, 0.0)] + [0.5] * 18)[0] > 0.05
    kquant = paired.count("greedy.stopping", pairs(8, 0, both=10, neither=2))
    assert paired.p_value(kquant, 0.0) < 0.005
    # the same shares on 200 cases are decided: 80 lost / 0 gained fails under 23 metrics
    big = paired.count("greedy.stopping", pairs(80, 0, both=100, neither=20))
    assert paired.holm([paired.p_value(big, 0.0)] + [0.5] * 22)[0] < 1e-6


def test_holm_adjusts_step_down_and_keeps_order():
    assert paired.holm([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert paired.holm([]) == []


def test_score_bounds_bracket_the_estimate_and_cover_in_simulation():
    f = paired.count("m", pairs(18, 6, both=50, neither=6))
    lo, hi = paired.bound(f, 0.975, upper=False), paired.bound(f, 0.975, upper=True)
    assert lo < f.drop < hi and -1 <= lo and hi <= 1
    rng = np.random.Generator(np.random.PCG64(7))
    miss = 0
    for _ in range(400):
        b, c, s = rng.multinomial(200, [0.12, 0.06, 0.82])
        g = paired.Flips("m", 200, int(b), int(c), int(b + s), int(c + s))
        miss += paired.bound(g, 0.95, upper=True) < 0.06
    assert miss / 400 <= 0.08      # one-sided 95 %: about 5 % misses


def test_sample_size_and_detectable_drop_are_inverse():
    n = paired.sample_size(0.2, 0.10, 0.05 / 23, 0.9)
    assert 300 < n < 400
    d = paired.detectable_drop(n, 0.2, 0.05 / 23, 0.9)
    assert d == pytest.approx(0.10, abs=0.002)
    assert paired.detectable_drop(10, 0.2, 0.05 / 23, 0.9) is None
    with pytest.raises(ValueError, match="detect - margin <= psi"):
        paired.sample_size(0.05, 0.10, 0.05, 0.9)


def test_simulated_error_rates_of_the_rule_at_the_default_suite_size():
    """The rule's own error rates over the flip model at 200 cases a metric and 23 metrics (the default suite and
    policy): a candidate equal to its reference (15 % of cases flip either way) fails at most 5 % of the time
    (Holm bounds it at 5 %; measured well below); a true drop of 12 points on one metric is caught >= 90 %."""
    null = paired.simulate(200, 0.075, 0.075, 23, 0.0, 0.95, trials=300, seed=1)
    assert null <= 0.05
    # power: one damaged metric among 23 (the others null) -- simulate the damaged one at the Bonferroni level
    power = paired.simulate(200, 0.135, 0.015, 1, 0.0, 1 - 0.05 / 23, trials=300, seed=2)
    assert power >= 0.9


def policy(**kw):
    base = dict(minimum=("greedy.format", "greedy.stopping", "greedy.agreement"), maximum=("greedy.garbage",))
    return rule.BehaviorPolicy(**{**base, **kw})


def evidence(lost, gained, n=200, agree_lost=10):
    rep = {"status": "complete", "suite_sha256": "s" * 64, "contract": {"seed": 1}, "rate_counts": {}, "rates": {}}
    table = [paired.count("greedy.format", pairs(lost, gained, both=n - lost - gained)).as_dict(),
             paired.count("greedy.stopping", pairs(3, 2, both=n - 5)).as_dict(),
             paired.count("greedy.agreement", pairs(agree_lost, 0, both=n - agree_lost)).as_dict(),
             paired.count("greedy.garbage", pairs(0, 0, both=n)).as_dict(),
             paired.count("greedy.extra", pairs(50, 0, both=n - 50)).as_dict()]     # not judged by the policy
    return {"reference": rep, "candidate": dict(rep), "flips": table}


def test_the_gate_passes_noise_and_fails_a_real_drop_naming_counts_and_interval():
    p = policy()
    ok = typed_decide_gate(evidence(12, 6), p)
    assert ok.passed, ok.render()
    assert ok.figures["greedy_format_lost"].value == 12 and ok.figures["metrics_judged"].value == 4
    bad = typed_decide_gate(evidence(40, 4), p)
    assert not bad.passed and len(bad.reasons) == 1
    assert bad.reasons[0].startswith("greedy.format: lost 40, gained 4 of 200 paired cases; drop +0.180")
    assert "simultaneous 95% interval" in bad.reasons[0] and "Holm-adjusted p" in bad.reasons[0]


def test_agreement_keeps_its_own_margin_and_a_margin_tolerates_a_small_drop():
    p = policy()
    assert typed_decide_gate(evidence(0, 0, agree_lost=90), p).passed           # 45 % disagree, margin 0.5
    bad = typed_decide_gate(evidence(0, 0, agree_lost=150), p)
    assert not bad.passed and bad.reasons[0].startswith("greedy.agreement: lost 150")
    assert not typed_decide_gate(evidence(30, 6), p).passed
    assert typed_decide_gate(evidence(30, 6), policy(margin=0.15)).passed


def test_the_record_lists_every_judged_metric_and_what_the_suite_did_not_measure():
    rec = typed_paired_record(evidence(12, 6), policy(minimum=("greedy.format", "greedy.instruction")))
    assert [m["metric"] for m in rec["metrics"]] == ["greedy.format", "greedy.garbage"]
    assert rec["not_measured"] == ["greedy.instruction"]
    m = rec["metrics"][0]
    assert (m["lost"], m["gained"], m["decision"]) == (12, 6, "pass") and m["low"] < m["drop"] < m["high"]
    assert m["detectable_drop"] is not None and 0 < m["detectable_drop"] < 0.3


def test_missing_flips_fail_with_a_reason_and_the_margin_rule_stays_available():
    e = evidence(0, 0)
    del e["flips"]
    v = typed_decide_gate(e, policy())
    assert not v.passed and "needs the flip table" in v.reasons[0]
    e["reference"]["rate_counts"] = {"greedy.format": {"numerator": 9, "denominator": 10}}
    e["reference"]["rates"] = {"greedy.format": 0.9}
    e["candidate"] = {**e["reference"], "rate_counts": {"greedy.format": {"numerator": 7, "denominator": 10}},
                      "rates": {"greedy.format": 0.7}}
    seed = typed_decide_gate(e, policy(rule="margin", minimum=("greedy.format",), maximum=()))
    assert not seed.passed and "below reference 0.9000 - margin 0.15" in seed.reasons[0]


@pytest.mark.parametrize("raw, says", [
    ({"rule": "vibes"}, r"policy\.behavior\.rule"),
    ({"confidence": 1.5}, r"policy\.behavior\.confidence"),
    ({"batch": 0}, r"policy\.behavior\.batch"),
    ({"slices": {"ci-tiny": "all"}}, r"policy\.behavior\.slices\.ci-tiny"),
    ({"confirm_seeds": -1}, r"policy\.behavior\.confirm_seeds: must be >= 0"),
    ({"confirm_seeds": 40}, r"policy\.behavior\.confirm_seeds: must be <= 16"),
])
def test_policy_fields_are_checked_at_load(raw, says):
    with pytest.raises(Exception, match=says):
        rule.BehaviorPolicy.parse(raw, Where("c.toml", "policy.behavior"))


def test_policy_defaults_are_the_paired_rule():
    p = rule.BehaviorPolicy.parse({}, Where("c.toml", "policy.behavior"))
    assert (p.rule, p.effective_margin, p.confidence) == ("paired", 0.0, 0.95)
    assert rule.BehaviorPolicy.parse({"rule": "margin"}, Where("c.toml", "policy.behavior")).effective_margin == 0.15


# -- the sampled metrics' confirmation seeds --------------------------------------------------------------------


def sampled_evidence(lost, gained, n=200):
    e = evidence(0, 0, n)
    e["flips"] = [*e["flips"], paired.count("sampled.stopping", pairs(lost, gained, both=n - lost - gained)).as_dict()]
    return e


def pooled_evidence(e, lost, gained, seeds=3, n=200):
    extra = paired.count("sampled.stopping", pairs(lost, gained, both=n * (seeds - 1) - lost - gained))
    first = paired.Flips.from_dict(e["flips"][-1])
    flips = paired.pooled([[first], [extra]])
    return {**e, "pooled_flips": {"seeds": seeds, "seed_list": list(range(seeds)), "flips": [f.as_dict() for f in flips]}}


def test_pooling_sums_each_metric_and_refuses_tables_of_other_metrics():
    a = [paired.count("sampled.x", pairs(3, 1, both=6)), paired.count("sampled.y", pairs(0, 2, both=8))]
    b = [paired.count("sampled.x", pairs(1, 1, both=8)), paired.count("sampled.y", pairs(1, 0, both=9))]
    x, y = paired.pooled([a, b])
    assert (x.n, x.lost, x.gained, x.reference_ok, x.candidate_ok) == (20, 4, 2, 18, 16)
    assert (y.n, y.lost, y.gained) == (20, 1, 2)
    with pytest.raises(EvidenceError, match="different metrics"):
        paired.pooled([a, b[:1]])


def test_a_sampled_failure_on_the_campaigns_seed_alone_is_confirmed_on_more_seeds():
    p = policy(minimum=("greedy.format", "sampled.stopping"))
    lucky = sampled_evidence(45, 20)            # SmolLM2's seed null: one lucky reference draw
    first = typed_paired_decisions(lucky, policy(minimum=("greedy.format", "sampled.stopping"), confirm_seeds=0))
    assert [d.flips.metric for d in first if d.failed] == ["sampled.stopping"]
    v = typed_decide_gate(lucky, p)              # confirmation asked, evidence lacks it: a named reason, not a pass
    assert not v.passed and "confirm_seeds = 2 asks for a confirmation" in v.reasons[0]
    ok = typed_decide_gate(pooled_evidence(lucky, 60, 62), p)    # the next two seeds show no drop
    assert ok.passed, ok.render()
    rec = typed_paired_record(pooled_evidence(lucky, 60, 62), p)
    m = {x["metric"]: x for x in rec["metrics"]}["sampled.stopping"]
    assert (m["lost"], m["gained"], m["n"], m["seeds"], m["decision"]) == (105, 82, 600, 3, "pass")
    assert (m["first_stage"]["lost"], m["first_stage"]["decision"]) == (45, "fail")
    assert rec["confirmed_on"] == [0, 1, 2]
    assert rule._flip(m).startswith("sampled.stopping 105/82 of 600 over 3 seeds, drop ")
    bad = typed_decide_gate(pooled_evidence(lucky, 70, 30), p)   # a real drop on every seed
    assert not bad.passed and len(bad.reasons) == 1
    assert bad.reasons[0].startswith("sampled.stopping: lost 115, gained 50 of 600 paired cases pooled over 3 seeds")
    assert "on the campaign's seed alone: lost 45, gained 20 of 200" in bad.reasons[0]
    wrong = typed_decide_gate(pooled_evidence(lucky, 60, 62, seeds=2), p)
    assert not wrong.passed and "pooled_flips.seeds: expected 3 seeds" in wrong.reasons[0]


def test_confirmation_never_fails_what_the_first_stage_passed_and_greedy_is_judged_once():
    """The two-stage rule's failures are a subset of the first stage's Holm failures (its family-wise false-fail
    stays at most 1 - confidence): a sampled metric passing on the campaign's seed passes however the pooled
    flips look, and a greedy failure stands whatever the sampled seeds say."""
    first = paired.decide([paired.count("greedy.format", pairs(40, 4, both=156)),
                           paired.count("sampled.stopping", pairs(45, 20, both=135)),
                           paired.count("sampled.format", pairs(10, 10, both=180))], {}, 0.0, 0.95)
    assert [d.failed for d in first] == [True, True, False]
    pooled = [paired.count("sampled.stopping", pairs(100, 40, both=460)),
              paired.count("sampled.format", pairs(90, 10, both=500))]
    got = paired.confirm(first, pooled, 3, {}, 0.0, 0.95)
    assert [d.failed for d in got] == [True, True, False]
    assert got[0] is first[0] and got[2].first is first[2] and got[2].flips.n == 600
    with pytest.raises(EvidenceError, match="lack 'sampled.format'"):
        paired.confirm(first, pooled[:1], 3, {}, 0.0, 0.95)
    with pytest.raises(EvidenceError, match="at least 2 seeds"):
        paired.confirm(first, pooled, 1, {}, 0.0, 0.95)


def test_the_two_stage_false_fail_under_independent_sampling_stays_within_the_confidence():
    """Simulated seed nulls (each case a fresh Bernoulli draw on both sides, p per case spread over (0, 1)):
    the two-stage rule's false-fail over 10 sampled metrics stays at most 0.05 (and below the first stage's)."""
    rng = np.random.Generator(np.random.PCG64(7))
    p = rng.uniform(0.05, 0.95, size=(10, 200))
    first_fails = final_fails = 0
    for _ in range(300):
        draw = lambda: rng.random((3, 10, 200)) < p                     # noqa: E731  (seeds, metrics, cases)
        ref, cand = draw(), draw()
        tables = [[paired.count(f"sampled.m{i}", zip(ref[s, i], cand[s, i])) for i in range(10)] for s in range(3)]
        first = paired.decide(tables[0], {}, 0.0, 0.95)
        first_fails += any(d.failed for d in first)
        if paired.needs_confirmation(first):
            first = paired.confirm(first, paired.pooled(tables), 3, {}, 0.0, 0.95)
        final_fails += any(d.failed for d in first)
    assert final_fails <= first_fails and final_fails / 300 <= 0.05


def test_a_greedy_failure_decides_and_leaves_the_sampled_failures_unconfirmed():
    p = policy(minimum=("greedy.format", "sampled.stopping"))
    e = sampled_evidence(45, 20)
    e["flips"][0] = paired.count("greedy.format", pairs(40, 4, both=156)).as_dict()
    assert not typed_needs_confirmation(e, p) and typed_needs_confirmation(sampled_evidence(45, 20), p)
    assert not typed_needs_confirmation(sampled_evidence(45, 20), policy(minimum=("sampled.stopping",), confirm_seeds=0))
    v = typed_decide_gate(e, p)                  # no pooled flips needed: the greedy drop decides
    assert not v.passed and len(v.reasons) == 2 and v.reasons[0].startswith("greedy.format: lost 40")
    assert "sampled.stopping: lost 45, gained 20 of 200 paired cases on the campaign's seed alone (not confirmed" \
        in v.reasons[1]
