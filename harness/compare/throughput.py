"""The throughput rows of a comparison: per lane x cell x (model, dtype), each side's per-repeat decode tok/s
(every run of a side pooled), tested with the Mann-Whitney U test (:mod:`harness.compare.stats`), Holm-corrected
across the comparison, and judged against the policy's ``decode:N%`` threshold and the session guard.

A cell is tested only when both sides ran on one machine (:class:`harness.compare.sides.Machine`), both carry
enough per-repeat samples, and other processes took no more than the policy's ``max_foreign_cpu`` during the
timing; otherwise its row says why not.  A regression must exceed the larger of the registered
``session_spread`` and the spread measured between a side's runs (:func:`session_guard`).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence

from .. import fmt
from ..view import ReceiptView
from . import stats
from .policy import ComparePolicy
from .sides import Machine, machine_of

INTERLEAVING = ("the two runs were not interleaved (two separate sessions), so each lane's repeats are compared with "
                "a rank test between the runs, not with the win rule's paired OFF/ON/OFF test, which needs both "
                "sides measured in alternation in one session")
SESSION_CAVEAT = ("the test sees each run's repeat-to-repeat spread only: a shift shared by every repeat of one session "
                  "(another process, the CPU clock, where the scheduler put the threads) reads as a difference between "
                  "the runs, which is why a throughput regression also needs the effect threshold (decode:N%) and the "
                  "session guard")
NO_SAMPLES = "no per-repeat samples (receipt predates decode_tokens_per_s_samples)"


@dataclass(frozen=True)
class LaneCell:
    """One lane's figures on one cell on one side of the comparison (one run or several): the pooled decode
    rate of the first run's receipt, the per-repeat rates of every run pooled (None when a receipt has none),
    each run's median, the machines, and the largest share of CPU time other processes took during a timing."""

    nodeid: str
    pooled: float | None
    samples: tuple[float, ...] | None
    machine: Machine
    foreign_cpu: float | None
    run_medians: tuple[float, ...] = ()
    machines: tuple[Machine, ...] = ()

    @property
    def spread(self) -> float | None:
        """The largest drop between two of this side's runs' medians (1 - min / max): how far sessions of the
        same code landed apart, on the scale a regression is judged; None with fewer than two runs."""
        m = self.run_medians
        return 1 - min(m) / max(m) if len(m) >= 2 and max(m) > 0 else None


@dataclass(frozen=True)
class ThroughputRow:
    """One lane x cell x (model, dtype) on both sides.

    ``statistic`` is ``median`` (of the per-repeat decode tok/s, every run of a side pooled) when both sides
    have samples, else ``pooled`` (the receipts' pooled rates, shown, never tested).  ``change`` is new / base - 1
    of that statistic.  ``test`` is the rank test of the new side's repeats against the base side's (U counts
    the (new, base) pairs where the new repeat was faster, ties one half), ``p_holm`` its Holm-adjusted p.
    ``guard`` is the change a regression must exceed besides the decode threshold: the larger spread of run
    medians within a side when a side has two or more runs, else the policy's ``session_spread``
    (``guard_source`` says which).  ``result``: regression (significant, slower, past both), slower, faster
    (significant), unchanged (no significant change), not tested, not compared; ``why`` says which and why."""

    gate: str
    lane: str
    model: str | None
    dtype: str | None
    cell: str
    base: LaneCell | None
    new: LaneCell | None
    statistic: str
    base_value: float | None
    new_value: float | None
    change: float | None
    test: stats.RankTest | None
    p_holm: float | None
    result: str
    why: str
    guard: float | None = None
    guard_source: str = ""


def _lane_cells(views: Sequence[ReceiptView]) -> dict[tuple[str, str, str | None, str | None, str], LaneCell]:
    out = {}
    for v in views:
        row = v.lane
        if row is None:
            continue
        samples = v.lane_samples
        for cell in sorted(set(row.cells) | set(samples)):
            s = samples.get(cell)
            m = machine_of(v)
            out[(v.gate, row.lane, v.model, v.dtype, cell)] = LaneCell(
                v.nodeid, row.speed(cell), s, m, row.foreign_cpu_share,
                (statistics.median(s),) if s else (), (m,))
    return out


def _merge(cells_of_runs: Sequence[LaneCell]) -> LaneCell:
    """One side's lane cell from its runs' (in run order): samples pooled (None if any run has none), every
    run's median, the largest foreign CPU share, the first run's machine and all of them."""
    first = cells_of_runs[0]
    if len(cells_of_runs) == 1:
        return first
    samples = None if any(c.samples is None for c in cells_of_runs) else tuple(x for c in cells_of_runs for x in c.samples)
    foreign = [c.foreign_cpu for c in cells_of_runs if c.foreign_cpu is not None]
    machines = tuple(dict.fromkeys(m for c in cells_of_runs for m in c.machines))
    return LaneCell(first.nodeid, first.pooled, samples, first.machine, max(foreign) if foreign else None,
                    tuple(m for c in cells_of_runs for m in c.run_medians), machines)


def side_cells(runs: Sequence[Sequence[ReceiptView]]) -> dict[tuple[str, str, str | None, str | None, str], LaneCell]:
    """Every lane cell of a side's runs, merged across the runs that measured it."""
    per_run = [_lane_cells(views) for views in runs]
    keys = dict.fromkeys(k for cells_ in per_run for k in cells_)
    return {k: _merge([cells_[k] for cells_ in per_run if k in cells_]) for k in keys}


def _change(base: float | None, new: float | None) -> float | None:
    if base is None or new is None or base <= 0:
        return None
    return new / base - 1


def _untested(b: LaneCell | None, n: LaneCell | None, policy: ComparePolicy) -> tuple[str, str] | None:
    """(result, why) for a lane cell that gets no test, or None when it can be tested."""
    if b is None or n is None:
        return "not compared", f"only in the {'new' if b is None else 'base'} run"
    machines = list(dict.fromkeys((*b.machines, *n.machines))) or [b.machine, n.machine]
    if len(set(machines)) > 1:
        diff = "; ".join(machines[0].differences(machines[1]))
        return "not compared", f"different machines ({machines[0].digest} vs {machines[1].digest}: {diff})"
    missing = [side for side, c in (("base", b), ("new", n)) if c.samples is None]
    if missing:
        return "not tested", f"{NO_SAMPLES} in the {' and '.join(missing)} run{'s' if len(missing) > 1 else ''}"
    busy = [f"the {side} run's {fmt.pct(c.foreign_cpu)}" for side, c in (("base", b), ("new", n))
            if c.foreign_cpu is not None and c.foreign_cpu > policy.max_foreign_cpu]
    if busy:
        return "not tested", (f"busy machine: other processes took more than {fmt.pct(policy.max_foreign_cpu)} of the "
                              f"CPU during the timing ({' and '.join(busy)})")
    if min(len(b.samples), len(n.samples)) < policy.min_samples:
        return "not tested", (f"n={len(b.samples)}/{len(n.samples)}, below the minimum of {policy.min_samples} "
                              f"samples per side")
    return None


def session_guard(b: LaneCell, n: LaneCell, policy: ComparePolicy) -> tuple[float, str]:
    """The drop a regression must exceed because sessions of the same code land apart: the policy's registered
    ``session_spread`` (this machine's, measured over repeated same-commit sessions), or, when a side has two or
    more runs and their medians lie further apart than that, their largest drop (measured here)."""
    measured = [x for x in (b.spread, n.spread) if x is not None]
    if measured and max(measured) > policy.session_spread:
        return max(measured), (f"measured: two runs of one side lie {fmt.pct(max(measured))} apart, more than the "
                               f"registered session_spread {fmt.pct(policy.session_spread)}")
    runs = f" ({len(b.run_medians)} base, {len(n.run_medians)} new run(s))" if measured else " (one run per side)"
    return policy.session_spread, f"registered: session_spread {fmt.pct(policy.session_spread)}{runs}"


def throughput_rows(runs_b: Sequence[Sequence[ReceiptView]], runs_n: Sequence[Sequence[ReceiptView]],
                    policy: ComparePolicy) -> list[ThroughputRow]:
    """Every lane cell of either side: tested where both sides recorded enough per-repeat samples on one
    machine, Holm-corrected across all of this comparison's tests, then judged against ``decode:N%`` and the
    session guard (:func:`session_guard`)."""
    lb, ln = side_cells(runs_b), side_cells(runs_n)
    keys = sorted(set(lb) | set(ln), key=lambda k: (str(k[2]), str(k[3]), k[0], k[1], k[4]))
    pending = []
    for key in keys:
        b, n = lb.get(key), ln.get(key)
        both = b is not None and n is not None and b.samples is not None and n.samples is not None
        statistic = "median" if both else "pooled"
        bv = (statistics.median(b.samples) if both else b.pooled) if b is not None else None
        nv = (statistics.median(n.samples) if both else n.pooled) if n is not None else None
        skip = _untested(b, n, policy)
        test = None if skip else stats.mann_whitney(n.samples, b.samples)
        pending.append((key, b, n, statistic, bv, nv, test, skip))
    adjusted = iter(stats.holm([t.p for *_, t, skip in pending if t is not None]))
    decode = policy.threshold("decode")
    out = []
    for key, b, n, statistic, bv, nv, test, skip in pending:
        change = _change(bv, nv)
        p_holm = next(adjusted) if test is not None else None
        guard, source = session_guard(b, n, policy) if test is not None else (None, "")
        if skip:
            result, why = skip
        elif p_holm < policy.alpha and change is not None and change < 0:
            past_decode = decode is not None and change < -decode.limit
            if past_decode and change < -guard:
                result, why = "regression", f"significant, slower than the {decode} threshold and the session guard ({source})"
            elif past_decode:
                result, why = "slower", f"significant, but within the session guard {fmt.pct(guard)} ({source})"
            else:
                result = "slower"
                why = (f"significant, within the {decode} threshold" if decode is not None
                       else "significant; no decode threshold declared")
        elif p_holm < policy.alpha and change is not None and change > 0:
            result, why = "faster", "significant (an improvement never fails)"
        else:
            result, why = "unchanged", "no significant change"
        out.append(ThroughputRow(key[0], key[1], key[2], key[3], key[4], b, n, statistic, bv, nv, change, test,
                                 p_holm, result, why, guard, source))
    return out
