"""The gate rules on recorded evidence: pass, fail, and refusal of evidence that cannot be judged."""

import math

import pytest

from harness.errors import EvidenceError
from harness.gates import cache, quantization
from harness.verdict import Verdict

TOL = {"atol": 1e-3, "rtol": 1e-4, "min_greedy_agreement": 1.0}
POLICY = cache.CachePolicy(tolerance={"q8": cache.Tolerance(**TOL)})


def judge(ev, policy=POLICY):
    """The cache rule on the test's dict of cases, at q8's tolerance."""
    return cache.decide(cache.CacheEvidence(ev["cases"], "q8"), policy)


def case(check="incremental_vs_full", err=1e-5, ref=30.0, agree=9, total=9, gated=True, row=None):
    return {"check": check, "gated": gated, "prompt_tokens": 7, "row": row, "max_abs_error": err,
            "reference_max_abs": ref, "elements": 100, "greedy_agree": agree, "greedy_total": total}


def full(**kw):
    return {"cases": [case(**kw), case(check="padded_vs_unpadded", row=0)]}


def test_cache_passes_within_tolerance():
    v = judge(full())
    assert v.passed and v.figures["incremental_vs_full_greedy_agreement"].value == 1.0


def test_cache_fails_beyond_atol_plus_rtol_times_reference():
    limit = TOL["atol"] + TOL["rtol"] * 30.0
    assert judge(full(err=limit * 0.99)).passed
    v = judge(full(err=limit * 1.01))
    assert not v.passed and "exceeds" in v.reasons[0]


def test_cache_fails_on_greedy_disagreement_and_bad_counts():
    assert "agree on 8/9" in judge(full(agree=8)).reasons[0]
    assert "invalid greedy" in judge(full(agree=10)).reasons[0]


def test_ungated_cases_are_reported_not_decisive():
    ev = full()
    ev["cases"].append(case(check="graph_vs_torch", err=50.0, gated=False))
    v = judge(ev)
    assert v.passed and v.figures["graph_vs_torch_ungated_max_abs_error"].value == 50.0


def test_cache_refuses_empty_or_unknown_evidence_and_fails_missing_checks():
    with pytest.raises(EvidenceError):
        judge({"cases": []})
    with pytest.raises(EvidenceError, match="unknown check"):
        judge({"cases": [case(check="bogus")]})
    v = judge({"cases": [case()]})
    assert not v.passed and "padded_vs_unpadded: no gated case" in v.reasons[0]
    assert not judge(full(err=math.nan)).passed


def test_an_int8_graphs_own_comparisons_are_reported_not_decisive():
    ev = full()   # gated cases: the fp32-compute twin, within tolerance
    for check, err in (("incremental_vs_full", 3.6), ("padded_vs_unpadded", 2.0), ("rounding_noise", 5.2)):
        ev["cases"].append({**case(check=check, err=err, gated=False, agree=7), "graph": "int8 activations"})
    v = judge(ev)
    assert v.passed
    assert v.figures["rounding_noise_ungated_max_abs_error"].value == 5.2
    assert v.figures["incremental_vs_full_ungated_max_abs_error"].value == 3.6
    ev["cases"][0]["max_abs_error"] = 0.5          # the twin itself disagrees: a cache bug
    assert not judge(ev).passed


def test_greedy_flips_within_the_bound_are_ties():
    limit = TOL["atol"] + TOL["rtol"] * 30.0
    ev = full(agree=8)
    ev["cases"][0]["flip_margins"] = [limit * 0.5]
    v = judge(ev)
    assert v.passed and v.figures["greedy_ties_within_bound"].value == 1
    ev["cases"][0]["flip_margins"] = [limit * 2]
    assert "agree on 8/9" in judge(ev).reasons[0]
    # padded rows: a first divergence at a tie excuses the steps after it, a clear one does not
    ev = full()
    ev["cases"][1].update(greedy_agree=3, first_flip_margin=limit * 0.5)
    assert judge(ev).passed
    ev["cases"][1]["first_flip_margin"] = 3.0
    assert "agree on 3/9" in judge(ev).reasons[0]


def summary(fp=3.0, q=3.06, n=500, **kw):
    base = {"tokens": n, "fp_loss": fp, "quant_loss": q, "relative_increase": (q - fp) / fp if fp else 0.0,
            "kld_mean": 0.01, "kld_min": 0.0, "top1_agreement": 0.9}
    base.update(kw)
    return base


def test_quantization_passes_and_fails_on_the_policy_limit():
    assert quantization.decide_point(summary(), 0.03).passed
    v = quantization.decide_point(summary(q=3.1), 0.03)
    assert not v.passed and "exceeds the policy" in v.reasons[0]


@pytest.mark.parametrize("bad, reason", [
    (dict(n=99), "at least 100"),
    (dict(relative_increase=0.5), "is not (q - fp) / fp"),
    (dict(fp=0.0, relative_increase=0.0), "finite and positive"),
    (dict(kld_min=-0.1), "negative KL"),
    (dict(top1_agreement=1.5), "outside [0, 1]"),
])
def test_quantization_refuses_unsound_figures(bad, reason):
    v = quantization.decide_point(summary(**bad), 1.0)
    assert not v.passed and any(reason in r for r in v.reasons), v.reasons


def test_verdict_must_be_consistent():
    with pytest.raises(ValueError):
        Verdict(passed=True, reasons=("x",))
    with pytest.raises(ValueError):
        Verdict(passed=False)
