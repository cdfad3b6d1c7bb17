"""Pure statistics over recorded logits and samples: errors, cross-entropy, KL divergence, spread."""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float64 (16-bit base logits lose the precision KLD needs)."""
    x = np.asarray(logits, dtype=np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def token_nll(logits: np.ndarray, targets: Sequence[int]) -> np.ndarray:
    """Negative log-likelihood of each target token under its row of logits (nats)."""
    logp = log_softmax(logits)
    t = np.asarray(targets, dtype=np.int64)
    return -logp[np.arange(len(t)), t]


def kl_divergence(ref_logits: np.ndarray, cand_logits: np.ndarray) -> np.ndarray:
    """KL(P_ref || P_cand) per row, as llama.cpp's ``--kl-divergence`` computes it (nats, >= 0)."""
    lp, lq = log_softmax(ref_logits), log_softmax(cand_logits)
    kld = (np.exp(lp) * (lp - lq)).sum(axis=-1)
    return np.maximum(kld, 0.0)  # rounding can leave -1e-17 where the true value is 0


def top1_agreement(ref_logits: np.ndarray, cand_logits: np.ndarray) -> tuple[int, int]:
    """(rows whose argmax agrees, rows); llama.cpp's "same top p"."""
    a = np.argmax(np.asarray(ref_logits), axis=-1)
    b = np.argmax(np.asarray(cand_logits), axis=-1)
    return int((a == b).sum()), int(a.size)


def relative_increase(reference: float, candidate: float) -> float:
    """(candidate - reference) / reference; the reference loss must be positive and finite."""
    if not (math.isfinite(reference) and math.isfinite(candidate)) or reference <= 0:
        raise ValueError(f"relative increase needs a finite positive reference, got {reference!r} and {candidate!r}")
    return (candidate - reference) / reference


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default), q in [0, 100]."""
    if len(values) == 0:
        raise ValueError("percentile of no values")
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def mean_and_stderr(values: Sequence[float]) -> tuple[float, float]:
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        raise ValueError("mean of no values")
    err = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else float("nan")
    return float(v.mean()), err


def proportion_stderr(successes: int, n: int) -> float:
    """sqrt(p(1-p)/(n-1)), the uncertainty llama.cpp prints beside "same top p"."""
    if n < 2:
        return float("nan")
    p = successes / n
    return math.sqrt(p * (1 - p) / (n - 1))


def max_errors(candidate: np.ndarray, reference: np.ndarray) -> dict[str, float | int]:
    """Max absolute error, the reference's max magnitude, and their ratio (a norm-wise relative error)."""
    a = np.asarray(candidate, dtype=np.float64)
    b = np.asarray(reference, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch {a.shape} vs {b.shape}")
    abs_err = float(np.abs(a - b).max()) if a.size else 0.0
    ref_max = float(np.abs(b).max()) if b.size else 0.0
    return {"max_abs_error": abs_err, "reference_max_abs": ref_max,
            "max_rel_error": abs_err / ref_max if ref_max > 0 else (0.0 if abs_err == 0 else math.inf),
            "elements": int(a.size)}


def coefficient_of_variation(values: Sequence[float]) -> float:
    v = np.asarray(values, dtype=np.float64)
    if v.size < 2 or v.mean() == 0:
        return float("nan")
    return float(v.std(ddof=1) / abs(v.mean()))


def iqr(values: Sequence[float]) -> float:
    return percentile(values, 75) - percentile(values, 25)


def block_bootstrap(block_sums: np.ndarray, statistic: Callable[[np.ndarray], np.ndarray], resamples: int,
                    seed: int, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval at ``confidence`` of ``statistic`` when whole blocks are resampled with replacement.

    Why blocks: tokens scored in one window share their context (and often their topic), so they are not
    independent draws and a token-level bootstrap would give an interval too narrow.  Resampling whole,
    non-overlapping blocks keeps that dependence inside every draw.  ``block_sums`` is (blocks, k) of additive
    per-block quantities (sums and counts), so a resample is ``counts @ block_sums``, the multinomial counts of
    each block drawn ``blocks`` times; ``statistic`` maps those (resamples, k) totals to (resamples,) or
    (resamples, m) values.  A seeded :class:`numpy.random.Generator` makes the interval a pure function of its
    arguments.  Returns (low, high), each of the statistic's trailing shape.
    """
    sums = np.asarray(block_sums, dtype=np.float64)
    if sums.ndim != 2 or sums.shape[0] < 2:
        raise ValueError(f"a block bootstrap needs a (blocks, k) array of at least 2 blocks, got shape {sums.shape}")
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 1:
        raise ValueError(f"resamples must be a positive integer, got {resamples!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    blocks = sums.shape[0]
    counts = np.random.default_rng(seed).multinomial(blocks, np.full(blocks, 1.0 / blocks), size=resamples)
    with np.errstate(divide="ignore", invalid="ignore"):
        values = np.asarray(statistic(counts @ sums), dtype=np.float64)
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(values, [tail, 100.0 - tail], axis=0)
    return low, high
