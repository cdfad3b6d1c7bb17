"""Property tests of the pure statistics behind the quantization gate."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from harness import stats
from harness.gates import quantization as qrule

logits = arrays(np.float64, st.tuples(st.integers(1, 6), st.integers(2, 12)),
                elements=st.floats(-30, 30, allow_nan=False, allow_infinity=False))


@settings(max_examples=200, deadline=None)
@given(logits, st.data())
def test_kld_is_nonnegative_and_zero_on_identity(ref, data):
    cand = data.draw(arrays(np.float64, ref.shape, elements=st.floats(-30, 30, allow_nan=False)))
    kld = stats.kl_divergence(ref, cand)
    assert kld.shape == (ref.shape[0],)
    assert (kld >= 0).all()
    assert np.allclose(stats.kl_divergence(ref, ref), 0.0, atol=1e-12)


@settings(max_examples=200, deadline=None)
@given(logits, st.floats(-5, 5))
def test_kld_is_invariant_to_a_shift_of_the_logits(ref, shift):
    assert np.allclose(stats.kl_divergence(ref, ref + shift), 0.0, atol=1e-9)


@settings(max_examples=200, deadline=None)
@given(logits, st.data())
def test_top1_agreement_is_a_fraction(ref, data):
    cand = data.draw(arrays(np.float64, ref.shape, elements=st.floats(-30, 30, allow_nan=False)))
    hits, n = stats.top1_agreement(ref, cand)
    assert n == ref.shape[0] and 0 <= hits <= n
    assert stats.top1_agreement(ref, ref) == (n, n)


@settings(max_examples=300, deadline=None)
@given(st.floats(1e-3, 20), st.floats(0, 40))
def test_relative_increase_identity(fp, q):
    rel = stats.relative_increase(fp, q)
    assert math.isclose(rel, (q - fp) / fp, rel_tol=1e-12, abs_tol=1e-12)
    assert math.isclose(fp * (1 + rel), q, rel_tol=1e-9, abs_tol=1e-9)


@pytest.mark.parametrize("fp", [0.0, -1.0, math.nan, math.inf])
def test_relative_increase_refuses_a_bad_reference(fp):
    with pytest.raises(ValueError, match="finite positive reference"):
        stats.relative_increase(fp, 1.0)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0.01, 10), min_size=1, max_size=50), st.data())
def test_summary_obeys_its_own_identities(nll_fp, data):
    n = len(nll_fp)
    nll_q = data.draw(st.lists(st.floats(0.01, 10), min_size=n, max_size=n))
    kld = data.draw(st.lists(st.floats(0, 5), min_size=n, max_size=n))
    same = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    s = qrule.summarize({"nll_reference": nll_fp, "nll_candidate": nll_q, "kld": kld, "top1_same": same})
    assert math.isclose(s["relative_increase"], (s["quant_loss"] - s["fp_loss"]) / s["fp_loss"], abs_tol=1e-12)
    assert math.isclose(s["perplexity_ratio"], s["quant_perplexity"] / s["fp_perplexity"], rel_tol=1e-9)
    assert 0 <= s["top1_agreement"] <= 1 and s["kld_mean"] >= 0 and s["kld_min"] <= s["kld_p99"] <= s["kld_max"]


def test_token_nll_matches_a_hand_computation():
    logits = np.array([[0.0, math.log(3.0)]])
    assert np.allclose(stats.token_nll(logits, [1]), [-math.log(0.75)])


def test_max_errors_reports_the_norm_wise_relative_error():
    e = stats.max_errors(np.array([1.0, 2.5]), np.array([1.0, 2.0]))
    assert e == {"max_abs_error": 0.5, "reference_max_abs": 2.0, "max_rel_error": 0.25, "elements": 2}
    with pytest.raises(ValueError, match="shape"):
        stats.max_errors(np.zeros(2), np.zeros(3))
