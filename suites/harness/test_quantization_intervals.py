"""The quantization gate's block-bootstrap intervals on synthetic per-token arrays: what they are on identical
graphs, a constant shift and a heavy-tailed window; the verdict's outcomes against the limit; determinism with
the seed; and the policy's bootstrap fields refused by name."""

import math

import numpy as np
import pytest

from harness import stats
from harness.errors import CampaignError, EvidenceError
from harness.fields import Where
from harness.gates import quantization as q

WINDOWS, PER_WINDOW = 32, 63      # the CI model's layout: eval_context 128, the second half scored
WHERE = Where("campaign.toml", "policy.quantization")


def typed_decide(e, policy):
    """The gate's rule on the test's dict of evidence."""
    return q.decide(q.QuantizationEvidence.pick(e), policy)


def policy(limit=0.03, **kw) -> q.QuantizationPolicy:
    return q.QuantizationPolicy(max_relative_increase={"q8": limit, "q4": limit}, **kw)


def arrays(shift=0.0, noise=0.0, seed=1, windows=WINDOWS, per_window=PER_WINDOW):
    """fp NLL around 3 nats, the candidate's shifted by ``shift`` plus per-token noise, KLD its square."""
    rng = np.random.default_rng(seed)
    fp = rng.uniform(1.0, 5.0, windows * per_window)
    d = shift + noise * rng.standard_normal(fp.size)
    return {"nll_reference": fp, "nll_candidate": fp + d, "kld": d ** 2 / 2,
            "top1_same": np.abs(d) < 0.5, "policy_dtype": "q8"}, [per_window] * windows


def intervals(per_token, layout, resamples=2000, seed=0, confidence=0.95) -> q.Intervals:
    sums = q.window_sums(per_token["nll_reference"], per_token["nll_candidate"], per_token["kld"], layout)
    return q.bootstrap(sums, confidence, resamples, seed)


def test_identical_graphs_give_an_interval_of_exactly_zero():
    ev, layout = arrays()
    iv = intervals(ev, layout)
    assert iv.loss_increase == (0.0, 0.0) and iv.kld_mean == (0.0, 0.0) and iv.perplexity_ratio == (1.0, 1.0)
    v = q.decide_windows(ev, layout, policy(), "q8", seed=0)
    assert v.passed and v.figures["limit_outcome"].value == q.WITHIN
    assert v.figures["loss_increase_low"].value == v.figures["loss_increase_high"].value == 0.0


def test_a_constant_shift_gives_a_tight_interval_around_it():
    ev, layout = arrays(shift=0.06)
    iv = intervals(ev, layout)
    fp = float(np.mean(ev["nll_reference"]))
    low, high = iv.loss_increase
    assert low <= 0.06 / fp <= high and high - low < 0.1 * (0.06 / fp)   # only fp's window-to-window spread
    assert iv.perplexity_ratio == pytest.approx((math.exp(0.06), math.exp(0.06)), rel=1e-12)
    assert iv.kld_mean == pytest.approx((0.0018, 0.0018), rel=1e-9)


def test_a_heavy_tailed_window_widens_the_interval():
    ev, layout = arrays(shift=0.03, noise=0.1)
    calm = intervals(ev, layout)
    wild = {k: np.array(v, copy=True) for k, v in ev.items() if k != "policy_dtype"}
    wild["nll_candidate"][5 * PER_WINDOW:6 * PER_WINDOW] += 4.0     # one window the quantized graph gets badly wrong
    wild["kld"][5 * PER_WINDOW:6 * PER_WINDOW] += 8.0
    heavy = intervals(wild, layout)
    width = lambda pair: pair[1] - pair[0]  # noqa: E731
    assert width(heavy.loss_increase) > 5 * width(calm.loss_increase)
    assert width(heavy.kld_mean) > 5 * width(calm.kld_mean)


def test_windows_are_resampled_whole_so_correlated_tokens_widen_the_interval():
    """The same tokens, but the shift varies by window (each window's tokens share it): resampling windows sees
    that spread; a layout of one token per window (a token bootstrap) would see less of it."""
    rng = np.random.default_rng(3)
    ev, layout = arrays()
    ev["nll_candidate"] = ev["nll_reference"] + np.repeat(rng.normal(0.05, 0.05, WINDOWS), PER_WINDOW)
    by_window, by_token = intervals(ev, layout), intervals(ev, [1] * (WINDOWS * PER_WINDOW))
    assert by_window.loss_increase[1] - by_window.loss_increase[0] > \
        3 * (by_token.loss_increase[1] - by_token.loss_increase[0])


@pytest.mark.parametrize("point, low, high, outcome", [
    (0.02, 0.01, 0.029, q.WITHIN), (0.03, 0.02, 0.03, q.WITHIN),   # at the limit is within, as before
    (0.02, 0.01, 0.04, q.UNDER_NOISY),
    (0.035, 0.025, 0.045, q.OVER_NOISY),
    (0.05, 0.04, 0.06, q.OVER),
])
def test_limit_outcome(point, low, high, outcome):
    assert q.limit_outcome(point, low, high, 0.03) == outcome


def rel_of(ev) -> float:
    fp = float(np.mean(ev["nll_reference"]))
    return (float(np.mean(ev["nll_candidate"])) - fp) / fp


def test_the_verdict_passes_within_the_limit_and_fails_beyond_the_noise():
    ev, layout = arrays(shift=0.03, noise=0.05)          # about 1 % loss increase, tight
    v = q.decide_windows(ev, layout, policy(0.03), "q8", seed=0)
    assert v.passed and v.figures["limit_outcome"].value == q.WITHIN
    assert v.figures["loss_increase_high"].value < 0.03 and v.figures["confidence"].value == 0.95
    v = q.decide_windows(ev, layout, policy(0.005), "q8", seed=0)
    assert not v.passed and v.figures["limit_outcome"].value == q.OVER
    assert "beyond the noise" in v.reasons[0] and "lies above it" in v.reasons[0]
    assert v.figures["loss_increase_low"].value > 0.005


def test_the_verdict_fails_over_the_limit_within_the_noise_saying_the_interval_straddles():
    ev, layout = arrays(shift=0.03, noise=1.0)           # the same increase, noisy
    rel = rel_of(ev)
    iv = intervals(ev, layout)
    limit = (rel + iv.loss_increase[0]) / 2              # between the lower bound and the point
    v = q.decide_windows(ev, layout, policy(limit), "q8", seed=0)
    assert not v.passed and v.figures["limit_outcome"].value == q.OVER_NOISY
    assert "within the noise" in v.reasons[0] and "straddles" in v.reasons[0]
    limit = (rel + iv.loss_increase[1]) / 2              # between the point and the upper bound: passes
    v = q.decide_windows(ev, layout, policy(limit), "q8", seed=0)
    assert v.passed and v.figures["limit_outcome"].value == q.UNDER_NOISY


def test_the_figures_record_the_intervals_and_the_bootstrap():
    ev, layout = arrays(shift=0.03, noise=0.3)
    v = q.decide_windows(ev, layout, policy(bootstrap_resamples=500, confidence=0.9), "q8", seed=7)
    f = {k: m.value for k, m in v.figures.items()}
    assert f["loss_increase_low"] <= f["relative_increase"] <= f["loss_increase_high"]
    assert f["kld_mean_low"] <= f["kld_mean"] <= f["kld_mean_high"]
    assert f["perplexity_ratio_low"] <= f["perplexity_ratio"] <= f["perplexity_ratio_high"]
    assert (f["bootstrap_resamples"], f["bootstrap_seed"], f["bootstrap_windows"], f["confidence"]) == (500, 7, 32, 0.9)
    assert v.figures["loss_increase_low"].count == WINDOWS * PER_WINDOW


def test_the_seed_makes_the_interval_deterministic():
    ev, layout = arrays(shift=0.03, noise=0.5)
    assert intervals(ev, layout, seed=11) == intervals(ev, layout, seed=11)
    assert intervals(ev, layout, seed=11).loss_increase != intervals(ev, layout, seed=12).loss_increase
    a = typed_decide({**ev, "window_tokens": layout, "bootstrap_seed": 5}, policy())
    b = typed_decide({**ev, "window_tokens": layout, "bootstrap_seed": 5}, policy())
    assert a == b


def test_the_gate_reads_the_layout_of_older_evidence_from_the_window_count():
    ev, layout = arrays(shift=0.03, noise=0.5)
    new = typed_decide({**ev, "window_tokens": layout}, policy())
    old = typed_decide({**ev, "windows": WINDOWS}, policy())
    assert new == old
    with pytest.raises(EvidenceError, match="no window layout"):
        typed_decide({**ev, "windows": 5}, policy())        # 2016 tokens do not split into 5 equal windows
    with pytest.raises(EvidenceError, match="does not cover"):
        typed_decide({**ev, "window_tokens": [PER_WINDOW] * (WINDOWS - 1)}, policy())


def test_one_window_cannot_measure_the_noise_and_fails():
    ev, _ = arrays(windows=1, per_window=200)
    v = q.decide_windows(ev, [200], policy(), "q8", seed=0)
    assert not v.passed and "at least 2" in v.reasons[0]


def test_unsound_figures_still_fail_before_any_bootstrap():
    ev, layout = arrays(windows=2, per_window=40)         # 80 tokens: fewer than MIN_TOKENS
    v = q.decide_windows(ev, layout, policy(), "q8", seed=0)
    assert not v.passed and "at least 100" in v.reasons[0] and "loss_increase_low" not in v.figures


def test_block_bootstrap_refuses_what_it_cannot_resample():
    ratio = lambda t: t[:, 0] / t[:, 1]  # noqa: E731
    with pytest.raises(ValueError, match="at least 2 blocks"):
        stats.block_bootstrap(np.ones((1, 2)), ratio, 100, 0, 0.95)
    with pytest.raises(ValueError, match="resamples"):
        stats.block_bootstrap(np.ones((3, 2)), ratio, 0, 0, 0.95)
    with pytest.raises(ValueError, match="confidence"):
        stats.block_bootstrap(np.ones((3, 2)), ratio, 100, 0, 1.0)
    low, high = stats.block_bootstrap(np.array([[1.0, 1.0], [3.0, 1.0]]), ratio, 400, 0, 0.95)
    assert 1.0 <= low <= high <= 3.0


def parse(**extra) -> q.QuantizationPolicy:
    return q.QuantizationPolicy.parse({"max_tokens": 4096, "max_relative_increase": {"q8": 0.03}, **extra}, WHERE)


def test_the_policy_defaults_and_accepts_its_bootstrap_fields():
    p = parse()
    assert (p.confidence, p.bootstrap_resamples) == (0.95, 2000)
    p = parse(confidence=0.9, bootstrap_resamples=500)
    assert (p.confidence, p.bootstrap_resamples) == (0.9, 500)
    assert p.as_dict()["confidence"] == 0.9 and p.as_dict()["bootstrap_resamples"] == 500


@pytest.mark.parametrize("extra, message", [
    ({"confidence": 1.5}, r"policy\.quantization\.confidence: must be <= 0\.9999, got 1\.5"),
    ({"confidence": 0.2}, r"policy\.quantization\.confidence: must be >= 0\.5, got 0\.2"),
    ({"confidence": "high"}, r"policy\.quantization\.confidence: expected a finite number, got 'high'"),
    ({"bootstrap_resamples": 2000.0}, r"policy\.quantization\.bootstrap_resamples: expected an integer"),
    ({"bootstrap_resamples": True}, r"policy\.quantization\.bootstrap_resamples: expected an integer"),
    ({"bootstrap_resamples": 10}, r"policy\.quantization\.bootstrap_resamples: must be >= 100, got 10"),
    ({"bootstrap_resamples": 10 ** 6}, r"policy\.quantization\.bootstrap_resamples: must be <= 100000"),
    ({"confidence": 0.999, "bootstrap_resamples": 2000},
     r"policy\.quantization\.bootstrap_resamples: 2000 resamples leave fewer than 5 .* use at least 10000"),
    ({"bootstrap_seed": 3}, r"policy\.quantization: unknown key\(s\) bootstrap_seed"),
])
def test_bad_bootstrap_fields_are_refused_by_name(extra, message):
    with pytest.raises(CampaignError, match=message):
        parse(**extra)
