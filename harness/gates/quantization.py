"""The quantization-loss rule: held-out loss, perplexity and KL divergence of q8/q4 against fp32."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from dataclasses import dataclass

from ..domain import PEERS
from ..errors import EvidenceError
from ..fields import Where, knob
from ..stats import block_bootstrap, mean_and_stderr, percentile, proportion_stderr, relative_increase
from ..verdict import Measurement, Verdict
from .spec import Evidence, Figure, GateSpec, Policy

MIN_TOKENS = 100  # llama.cpp prints no statistics below 100 tokens; neither do we decide on them


def summarize(evidence: Mapping[str, Any]) -> dict[str, Any]:
    """Loss, perplexity, llama.cpp-style KLD statistics and top-1 agreement from per-token evidence."""
    try:
        fp = np.asarray(evidence["nll_reference"], dtype=np.float64)
        q = np.asarray(evidence["nll_candidate"], dtype=np.float64)
        kld = np.asarray(evidence["kld"], dtype=np.float64)
        same = np.asarray(evidence["top1_same"], dtype=bool)
    except KeyError as exc:
        raise EvidenceError(f"quantization evidence lacks {exc.args[0]!r}") from None
    n = int(fp.size)
    if not (q.size == kld.size == same.size == n):
        raise EvidenceError(f"quantization evidence arrays differ in length: {fp.size}, {q.size}, {kld.size}, {same.size}")
    if n == 0:
        raise EvidenceError("quantization evidence scored no tokens")
    fp_loss, q_loss = float(fp.mean()), float(q.mean())
    ln_ratio, ln_ratio_err = mean_and_stderr(q - fp)  # paired: the covariance is in the difference
    hits = int(same.sum())
    return {
        "tokens": n, "fp_loss": fp_loss, "quant_loss": q_loss,
        "relative_increase": relative_increase(fp_loss, q_loss) if fp_loss > 0 else math.nan,
        "fp_perplexity": math.exp(fp_loss), "quant_perplexity": math.exp(q_loss),
        "perplexity_ratio": math.exp(q_loss - fp_loss), "ln_perplexity_ratio": ln_ratio,
        "ln_perplexity_ratio_stderr": ln_ratio_err,
        "kld_mean": float(kld.mean()), "kld_median": percentile(kld, 50), "kld_p99": percentile(kld, 99),
        "kld_max": float(kld.max()), "kld_min": float(kld.min()),
        "top1_agreement": hits / n, "top1_agreement_stderr": proportion_stderr(hits, n), "top1_hits": hits,
    }


def soundness(summary: Mapping[str, Any]) -> list[str]:
    """Why the summary cannot be judged (empty when it can): the figures are checked, not assumed.

    At least :data:`MIN_TOKENS` scored tokens, finite positive fp loss, ``relative_increase == (q - fp) / fp``
    to 1e-9, KLD >= 0 and top-1 agreement within [0, 1].
    """
    reasons = []
    n = summary.get("tokens", 0)
    fp, q, rel = summary.get("fp_loss"), summary.get("quant_loss"), summary.get("relative_increase")
    if not isinstance(n, int) or n < MIN_TOKENS:
        reasons.append(f"only {n!r} tokens scored; at least {MIN_TOKENS} are needed")
    if not _finite(fp, q, rel) or fp <= 0:
        reasons.append(f"losses are not finite and positive (fp {fp!r}, quantized {q!r}, relative {rel!r})")
    elif not math.isclose(rel, (q - fp) / fp, rel_tol=0, abs_tol=1e-9):
        reasons.append(f"relative increase {rel!r} is not (q - fp) / fp = {(q - fp) / fp!r}")
    if not (summary.get("kld_min", 0) >= 0 and summary.get("kld_mean", 0) >= 0):
        reasons.append(f"negative KL divergence (mean {summary.get('kld_mean')!r}, min {summary.get('kld_min')!r})")
    top1 = summary.get("top1_agreement")
    if not isinstance(top1, (int, float)) or not 0 <= top1 <= 1:
        reasons.append(f"top-1 agreement {top1!r} is outside [0, 1]")
    return reasons


def _finite(*values: Any) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values)


UNITS = {"tokens": "count", "fp_loss": "nats_per_token", "quant_loss": "nats_per_token",
         "relative_increase": "ratio", "fp_perplexity": "perplexity", "quant_perplexity": "perplexity",
         "perplexity_ratio": "ratio", "ln_perplexity_ratio": "nats_per_token",
         "ln_perplexity_ratio_stderr": "nats_per_token", "kld_mean": "nats", "kld_median": "nats",
         "kld_p99": "nats", "kld_max": "nats", "kld_min": "nats", "top1_agreement": "fraction",
         "top1_agreement_stderr": "fraction", "top1_hits": "count"}


def summary_figures(summary: Mapping[str, Any]) -> dict[str, Measurement]:
    """The summary's figures, each with its unit and (for a statistic) the tokens it rests on."""
    n = summary.get("tokens")
    return {k: Measurement(summary[k], UNITS[k], n if k not in ("tokens", "top1_hits") else None)
            for k in UNITS if k in summary}


def decide_point(summary: Mapping[str, Any], max_relative_increase: float) -> Verdict:
    """Pass when the relative loss increase's point estimate is within policy and every figure is sound.

    The rule without an error model (what the gate decided before :func:`decide_windows`); kept for summaries
    that carry no window layout.  See :func:`soundness` for the checks.
    """
    reasons = soundness(summary)
    fp, q, rel, n = (summary.get(k) for k in ("fp_loss", "quant_loss", "relative_increase", "tokens"))
    if _finite(fp, q, rel) and fp > 0 and rel > max_relative_increase:
        reasons.append(f"relative loss increase {rel:.4%} exceeds the policy's {max_relative_increase:.2%} "
                       f"(fp {fp:.4f} -> quantized {q:.4f} nats/token over {n} tokens)")
    return Verdict.from_checks(reasons, summary_figures(summary))


# -- the figures' uncertainty: a block bootstrap over the held-out windows -------------------------------------

WITHIN = "within the limit"                          # the interval's upper bound is at or below the limit: pass
UNDER_NOISY = "under the limit within the noise"     # the point is at or below the limit, the interval is not: pass
OVER_NOISY = "over the limit within the noise"       # the point is above the limit, the interval is not: fail
OVER = "over the limit beyond the noise"             # the interval's lower bound is above the limit: fail
OUTCOMES = (WITHIN, UNDER_NOISY, OVER_NOISY, OVER)
MIN_WINDOWS = 2      # one window resampled is always itself: no interval at all
BOOTSTRAP_SEED = 0   # the seed when the evidence names none (the suite passes the campaign's seed)


@dataclass(frozen=True)
class Intervals:
    """Percentile intervals at ``confidence`` from ``resamples`` block-bootstrap draws of ``windows`` windows."""

    loss_increase: tuple[float, float]
    kld_mean: tuple[float, float]
    perplexity_ratio: tuple[float, float]
    windows: int
    resamples: int
    seed: int
    confidence: float


def window_sums(nll_reference: Sequence[float], nll_candidate: Sequence[float], kld: Sequence[float],
                window_tokens: Sequence[int]) -> np.ndarray:
    """(windows, 4): per window the fp NLL sum, the paired (q - fp) NLL sum, the KLD sum and the tokens.

    Sums because every statistic the gate reports is a ratio of sums over the tokens a resample holds; the
    paired difference is summed on its own so that identical graphs give exactly zero in every resample.
    """
    sizes = np.asarray(window_tokens, dtype=np.int64)
    fp, q, kl = (np.asarray(a, dtype=np.float64) for a in (nll_reference, nll_candidate, kld))
    if sizes.ndim != 1 or (sizes <= 0).any() or int(sizes.sum()) != fp.size or not (q.size == kl.size == fp.size):
        raise EvidenceError(f"window layout {sizes.tolist()} does not cover the {fp.size} scored tokens "
                            f"({q.size} quantized, {kl.size} KLD)")
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    return np.stack([np.add.reduceat(fp, starts), np.add.reduceat(q - fp, starts), np.add.reduceat(kl, starts),
                     sizes.astype(np.float64)], axis=1)


def _ratios(totals: np.ndarray) -> np.ndarray:
    """(resamples, 4) totals -> (resamples, 3): relative loss increase, mean KLD, perplexity ratio."""
    fp, diff, kl, n = totals.T
    return np.stack([diff / fp, kl / n, np.exp(diff / n)], axis=1)


def bootstrap(sums: np.ndarray, confidence: float, resamples: int, seed: int) -> Intervals:
    """The gate's intervals: whole windows resampled with replacement (:func:`harness.stats.block_bootstrap`)."""
    low, high = block_bootstrap(sums, _ratios, resamples, seed, confidence)
    pairs = [(float(lo), float(hi)) for lo, hi in zip(low, high)]
    return Intervals(pairs[0], pairs[1], pairs[2], int(sums.shape[0]), resamples, seed, confidence)


def limit_outcome(point: float, low: float, high: float, limit: float) -> str:
    """Where the relative loss increase stands against the limit, the noise counted (one of :data:`OUTCOMES`).

    Failing needs the point above the limit (as without intervals); the interval says whether that is beyond
    the noise.  A point at or below the limit passes whatever its interval, so noise never fails a variant.
    """
    if point > limit:
        return OVER if low > limit else OVER_NOISY
    return WITHIN if high <= limit else UNDER_NOISY


def _over_reason(outcome: str, summary: Mapping[str, Any], iv: Intervals, limit: float) -> str:
    rel, fp, q, n = (summary[k] for k in ("relative_increase", "fp_loss", "quant_loss", "tokens"))
    low, high = iv.loss_increase
    noise = "beyond the noise" if outcome == OVER else "within the noise"
    where = ("lies above it" if outcome == OVER else
             "straddles it" if high > limit else "lies below it (a skewed bootstrap)")
    return (f"relative loss increase {rel:.4%} exceeds the policy's {limit:.2%} {noise}: its "
            f"{iv.confidence:.0%} block-bootstrap interval {low:.4%}..{high:.4%} ({iv.resamples} resamples of "
            f"{iv.windows} held-out windows) {where} (fp {fp:.4f} -> quantized {q:.4f} nats/token over {n} tokens)")


def interval_figures(iv: Intervals, tokens: int, limit: float, outcome: str) -> dict[str, Measurement]:
    """The intervals, the bootstrap's parameters and the outcome as figures, so the receipt records them."""
    out = {}
    for name, unit, (low, high) in (("loss_increase", "ratio", iv.loss_increase), ("kld_mean", "nats", iv.kld_mean),
                                    ("perplexity_ratio", "ratio", iv.perplexity_ratio)):
        out[f"{name}_low"], out[f"{name}_high"] = Measurement(low, unit, tokens), Measurement(high, unit, tokens)
    out.update(confidence=Measurement(iv.confidence, "fraction"),
               bootstrap_resamples=Measurement(iv.resamples, "count"),
               bootstrap_windows=Measurement(iv.windows, "count"), bootstrap_seed=Measurement(iv.seed, "seed"),
               max_relative_increase=Measurement(limit, "ratio"), limit_outcome=Measurement(outcome, "outcome"))
    return out


def decide_windows(per_token: Mapping[str, Any], window_tokens: Sequence[int], policy: "QuantizationPolicy",
                   policy_dtype: str, seed: int) -> Verdict:
    """The gate's rule on per-token arrays (``nll_reference``, ``nll_candidate``, ``kld``, ``top1_same``) and their
    window layout: sound figures, and the relative loss increase at or below the dtype's limit, the
    block-bootstrap interval at the policy's confidence saying whether a crossing is beyond the noise.

    Pure: the same arrays, layout, policy and seed give the same verdict.  Fails (never raises) on unsound
    figures and on fewer than :data:`MIN_WINDOWS` windows, since the noise cannot then be measured.
    """
    limit = policy.limit_for(policy_dtype)
    summary = summarize(per_token)
    reasons, figures = soundness(summary), summary_figures(summary)
    sums = window_sums(per_token["nll_reference"], per_token["nll_candidate"], per_token["kld"], window_tokens)
    if sums.shape[0] < MIN_WINDOWS:
        reasons.append(f"only {sums.shape[0]} held-out window(s); the bootstrap needs at least {MIN_WINDOWS} "
                       f"to measure the noise (lower eval_context or raise max_tokens)")
    if reasons:
        return Verdict.from_checks(reasons, figures)
    iv = bootstrap(sums, policy.confidence, policy.bootstrap_resamples, seed)
    if not _finite(*iv.loss_increase, *iv.kld_mean, *iv.perplexity_ratio):
        return Verdict.from_checks([f"block-bootstrap intervals are not finite ({iv!r})"], figures)
    outcome = limit_outcome(summary["relative_increase"], *iv.loss_increase, limit)
    figures.update(interval_figures(iv, summary["tokens"], limit, outcome))
    if outcome in (OVER, OVER_NOISY):
        reasons.append(_over_reason(outcome, summary, iv, limit))
    return Verdict.from_checks(reasons, figures)


@dataclass(frozen=True)
class QuantizationEvidence(Evidence):
    """Per held-out token (:func:`harness.evidence.quantization.collect`), the reference (fp32 graph) against the
    candidate, and the window layout they were scored in."""

    nll_reference: Sequence[float]
    nll_candidate: Sequence[float]
    kld: Sequence[float]
    top1_same: Sequence[bool]
    policy_dtype: str                              # the dtype whose limit applies (a peer's: q4)
    window_tokens: Sequence[int] | None = None     # the tokens each window scored
    windows: int | None = None                     # older evidence: this many equal windows
    bootstrap_seed: int = BOOTSTRAP_SEED           # the suite passes the campaign's seed

    def per_token(self) -> dict[str, Sequence[Any]]:
        return {"nll_reference": self.nll_reference, "nll_candidate": self.nll_candidate, "kld": self.kld,
                "top1_same": self.top1_same}


def window_layout(evidence: QuantizationEvidence) -> list[int]:
    """The tokens each window scored: ``window_tokens`` as collected, else (evidence collected before it was
    recorded) ``windows`` equal windows, which :func:`harness.evidence.quantization.collect` always scores."""
    if evidence.window_tokens is not None:
        return [int(t) for t in evidence.window_tokens]
    windows, n = evidence.windows, len(evidence.nll_reference)
    if not isinstance(windows, int) or windows <= 0 or n % windows:
        raise EvidenceError(f"quantization evidence has no window layout ({windows!r} windows over {n} tokens)")
    return [n // windows] * windows


MAX_RESAMPLES = 100_000   # the resample counts are (resamples, windows) integers: bound the memory and time
MIN_TAIL = 5              # resamples beyond each end of the interval, so its ends are not the extreme draws


@dataclass(frozen=True)
class QuantizationPolicy(Policy):
    """``[policy.quantization]``: tokens scored, the largest relative loss increase per quantized dtype, and the
    confidence and resample count of the block-bootstrap intervals that say whether a crossing is noise."""

    REQUIRED = True
    max_tokens: int = knob(4096, lo=MIN_TOKENS, required=True)
    max_relative_increase: dict[str, float] = knob(None, required=True, keys=lambda k: k in ("q8", "q4"),
                                                   keys_doc="only q8 and q4 are quantized dtypes")
    confidence: float = knob(0.95, lo=0.5, hi=0.9999)
    bootstrap_resamples: int = knob(2000, lo=100, hi=MAX_RESAMPLES)

    @classmethod
    def finish(cls, values: dict[str, Any], where: Where) -> dict[str, Any]:
        """At least :data:`MIN_TAIL` resamples beyond each end of the interval (else its ends would be the extreme
        draws)."""
        confidence = values.get("confidence", cls.confidence)
        resamples = values.get("bootstrap_resamples", cls.bootstrap_resamples)
        if resamples * (1 - confidence) / 2 < MIN_TAIL - 1e-9:   # (1 - 0.9999 is a hair under 1e-4)
            needed = math.ceil(2 * MIN_TAIL / (1 - confidence) - 1e-6)
            raise where.child("bootstrap_resamples").fail(
                f"{resamples} resamples leave fewer than {MIN_TAIL} beyond each end of a {confidence:g} interval; "
                f"use at least {needed}")
        return values

    def limit_for(self, dtype: str) -> float:
        key = PEERS[dtype].policy_dtype if dtype in PEERS else dtype
        if key not in self.max_relative_increase:
            raise EvidenceError(f"policy.quantization.max_relative_increase has no entry for {key!r}")
        return self.max_relative_increase[key]


def decide(evidence: QuantizationEvidence, policy: QuantizationPolicy) -> Verdict:
    """The gate's decision on per-token evidence: :func:`decide_windows` at the dtype's limit, the windows as
    collected, seeded by ``bootstrap_seed``."""
    return decide_windows(evidence.per_token(), window_layout(evidence), policy, evidence.policy_dtype,
                          evidence.bootstrap_seed)


SPEC = GateSpec(
    name="quantization", level="variant", applies_to=("q8", "q4", "recipe", "ort-genai-int4", "ort-genai-kquant"), policy=QuantizationPolicy,
    evidence=QuantizationEvidence, decide=decide, figures=(
        Figure("relative_increase", "ratio", "lower", table=True), Figure("kld_mean", "nats", "lower", table=True),
        Figure("kld_p99", "nats", "lower", table=True), Figure("top1_agreement", "fraction", "higher", table=True),
        Figure("fp_loss", "nats_per_token", table=True), Figure("quant_loss", "nats_per_token", "lower", table=True),
        Figure("perplexity_ratio", "ratio", "lower", table=True), Figure("limit_outcome", "outcome")),
    describe="held-out loss, perplexity and llama.cpp-style KL divergence of q8/q4 against the fp32 graph")
