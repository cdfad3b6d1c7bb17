"""Pure statistics of a two-run comparison: the Mann-Whitney U rank test and Holm's step-down correction.

Why a rank test: two campaign runs are two separate sessions, never interleaved, so there are no pairs
for the win rule's paired OFF/ON/OFF test; what each run has is a handful of per-repeat decode rates per
lane and cell.  The Mann-Whitney U test asks whether one run's repeats tend to be faster than the other's
without assuming a distribution (decode rates are skewed: a repeat that lost a core is far slower, never
far faster), and it is exact for the sample sizes a workload takes.

- :func:`mann_whitney`: two-sided; the exact null distribution of U when there are no ties (the
  Gaussian binomial coefficient's coefficients, integer arithmetic, no sampling), else the normal
  approximation with the tie-corrected variance and a continuity correction (what
  ``scipy.stats.mannwhitneyu(x, y, method="asymptotic")`` gives; ``method="exact"`` without ties).
- :func:`holm`: Holm-adjusted p-values, so comparing many lanes x cells x variants at once does not
  inflate the chance of one false alarm beyond alpha (family-wise error rate), with more power than
  Bonferroni.
- :func:`smallest_p` / :func:`repeats_needed`: what n per side can show at all: with 5 repeats a side
  no two-sided p falls below 2/252 = 0.0079, whatever the data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

EXACT_MAX_PRODUCT = 10_000   # n_x * n_y up to which the exact distribution is computed (a few ms in pure Python)
TEST_NAME = "Mann-Whitney U (two-sided)"


@dataclass(frozen=True)
class RankTest:
    """One Mann-Whitney U test of sample ``x`` against sample ``y``.

    ``u`` is U of ``x``: the number of (x, y) pairs with x > y, ties counting one half (0 .. n_x * n_y;
    n_x * n_y / 2 when neither tends to be larger).  ``p`` is two-sided.  ``method`` is ``"exact"`` or
    ``"normal approximation (tie and continuity corrected)"``; ``ties`` counts the values shared by
    both or within a sample (tied groups' sizes minus one, summed)."""

    u: float
    p: float
    n_x: int
    n_y: int
    method: str
    ties: int


def ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks with ties given their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def _tie_groups(values: Sequence[float]) -> list[int]:
    counts: dict[float, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return [t for t in counts.values() if t > 1]


def u_distribution(n_x: int, n_y: int) -> list[int]:
    """How many of the C(n_x + n_y, n_x) equally likely rank arrangements give U = 0, 1, ..., n_x * n_y.

    The counts are the coefficients of the Gaussian binomial coefficient [n_x + n_y choose n_x]_q, built as
    the product of (1 - q^(n_y + i)) / (1 - q^i) for i = 1 .. n_x: a multiplication and an exact division
    per factor, in integers."""
    k, n = min(n_x, n_y), n_x + n_y
    coef = [1]
    for i in range(1, k + 1):
        a = n - k + i
        prod = coef + [0] * a
        for t, c in enumerate(coef):
            prod[t + a] -= c
        for t in range(i, len(prod)):        # divide by (1 - q^i): r[t] = p[t] + r[t - i]
            prod[t] += prod[t - i]
        coef = prod[:i * (n - k) + 1]
    return coef


def _exact_p(u: float, n_x: int, n_y: int) -> float:
    counts = u_distribution(n_x, n_y)
    total = sum(counts)
    k = int(round(u))
    lower = sum(counts[:k + 1])          # P(U <= u)
    upper = sum(counts[k:])              # P(U >= u)
    return float(min(Fraction(1), Fraction(2 * min(lower, upper), total)))


METHODS = ("auto", "exact", "asymptotic")


def mann_whitney(x: Sequence[float], y: Sequence[float], method: str = "auto") -> RankTest:
    """The two-sided Mann-Whitney U test of ``x`` against ``y`` (each at least one finite number).

    ``auto``: exact when no value occurs twice and n_x * n_y <= :data:`EXACT_MAX_PRODUCT`, otherwise the
    normal approximation: mean n_x n_y / 2, variance n_x n_y / 12 * ((n + 1) - sum(t^3 - t) / (n (n - 1)))
    over tied groups of size t, z = (|U - mean| - 1/2) / sd.  Every value tied (no spread at all) gives
    p = 1.  ``exact`` and ``asymptotic`` force one (``exact`` refuses ties: its distribution assumes none)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    x, y = [float(v) for v in x], [float(v) for v in y]
    if not x or not y:
        raise ValueError(f"the rank test needs a value on each side, got {len(x)} and {len(y)}")
    if not all(math.isfinite(v) for v in x + y):
        raise ValueError("the rank test takes finite numbers only")
    n_x, n_y = len(x), len(y)
    both = x + y
    r = ranks(both)
    u = sum(r[:n_x]) - n_x * (n_x + 1) / 2
    groups = _tie_groups(both)
    ties = sum(t - 1 for t in groups)
    if method == "exact" and groups:
        raise ValueError(f"the exact distribution assumes no ties; {ties} value(s) are tied")
    if method == "exact" or (method == "auto" and not groups and n_x * n_y <= EXACT_MAX_PRODUCT):
        return RankTest(u, _exact_p(u, n_x, n_y), n_x, n_y, "exact", 0)
    n = n_x + n_y
    mean = n_x * n_y / 2
    var = n_x * n_y / 12 * ((n + 1) - sum(t ** 3 - t for t in groups) / (n * (n - 1)))
    if var <= 0:
        p = 1.0
    else:
        z = max(0.0, (abs(u - mean) - 0.5) / math.sqrt(var))
        p = min(1.0, math.erfc(z / math.sqrt(2)))
    return RankTest(u, p, n_x, n_y, "normal approximation (tie and continuity corrected)", ties)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input's order: sorted ascending, the i-th smallest
    (from 0) is multiplied by (m - i), capped at 1, and kept at least as large as the one before.  A test is
    significant at family-wise level alpha when its adjusted p is below alpha."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * float(pvalues[i])))
        out[i] = running
    return out


def smallest_p(n_x: int, n_y: int) -> float:
    """The smallest two-sided p the exact test can give with these sample sizes: 2 / C(n_x + n_y, n_x)
    (every x above every y), capped at 1."""
    return min(1.0, 2 / math.comb(n_x + n_y, n_x))


def repeats_needed(alpha: float, tests: int, limit: int = 100) -> int | None:
    """The fewest repeats per side (equal on both) at which a Holm family of ``tests`` can show anything at
    level ``alpha``: the smallest n with 2 / C(2n, n) < alpha / tests (None beyond ``limit``)."""
    for n in range(1, limit + 1):
        if smallest_p(n, n) < alpha / max(tests, 1):
            return n
    return None
