"""The one measuring loop: warm-up, repeats, extra repeats while noisy, sequential or interleaved rounds, and
the failed-lane record (the package docstring says how)."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ..errors import HarnessError
from ..progress import EVERY_S
from ..fmt import figure
from ..throughput import stats
from ..workload import Cell, Workload
from .protocol import Generation, Lane

ORDERS = ("sequential", "interleaved", "by-repeat")
FIGURES = ("prefill_ms", "decode_tokens", "decode_s", "decode_tok_s", "total_ms")


def _quiet(_: str) -> None:
    pass


def failed(error: str) -> dict[str, Any]:
    """A lane that gave no result: the evidence shape every rule reads, with the error that stopped it."""
    return {"cells": {}, "ids": {}, "raw": {}, "error": error, "ids_stable": {}}


@dataclass
class Series:
    """One lane on one cell: per measured repeat its pooled figures (``repeats``), one raw record per
    generation (warm-ups included), the ids of every measured generation, and the summary once the
    series finished with its lane alive."""

    cell: str
    repeats: list[dict[str, Any]] = field(default_factory=list)
    raw: list[dict[str, Any]] = field(default_factory=list)
    ids: list[list[int]] = field(default_factory=list)
    summary: dict[str, Any] | None = None


@dataclass
class LaneRun:
    """What the loop measured of one lane: its series by cell and the error that stopped it, if any."""

    name: str
    series: dict[str, Series] = field(default_factory=dict)
    error: str | None = None
    exception: HarnessError | None = None

    def fail(self, exc: HarnessError) -> None:
        self.error, self.exception = str(exc), exc

    def evidence(self) -> dict[str, Any]:
        """The evidence dict the rules read (see the package docstring)."""
        done = {c: s for c, s in self.series.items() if s.summary is not None}
        return {"cells": {c: s.summary for c, s in done.items()},
                "ids": {c: s.ids[-1] for c, s in done.items()},
                "raw": {c: s.raw for c, s in self.series.items()},
                "error": self.error,
                "ids_stable": {c: all(i == s.ids[0] for i in s.ids) for c, s in done.items()}}


def _record(g: Generation, **head: Any) -> dict[str, Any]:
    return {**head, "cpu_per_wall": g.cpu_per_wall, "ids": list(g.ids), "token_ms": list(g.token_ms), **g.detail}


def pool(waves: Sequence[dict[str, Any]], gens: Sequence[Generation]) -> dict[str, Any]:
    """One repeat from its waves: decode tokens over decode seconds, the mean prefill, CPU over wall seconds.
    One wave is its own figures."""
    if len(waves) == 1:
        figures = dict(waves[0])
    else:
        tokens, secs = sum(w["decode_tokens"] for w in waves), sum(w["decode_s"] for w in waves)
        figures = {"prefill_ms": sum(w["prefill_ms"] for w in waves) / len(waves), "decode_tokens": tokens,
                   "decode_s": secs, "decode_tok_s": tokens / secs, "total_ms": sum(w["total_ms"] for w in waves)}
    cpu = [g.cpu_s for g in gens]
    wall = sum(g.wall_s or 0.0 for g in gens)
    figures["cpu_per_wall"] = None if any(c is None for c in cpu) or not wall else sum(cpu) / wall
    return figures


def one_repeat(lane: Lane, prompts: Sequence[Sequence[int]], new_tokens: int,
               on_wave: Callable[[int, Generation, dict[str, Any]], None] = lambda w, g, f: None) -> dict[str, Any]:
    """One repeat of a lane: a generation per wave prompt, each wave's figures handed to ``on_wave`` as it ends
    (so a wave recorded before a later one fails is kept), then pooled (:func:`pool`).  Every timed repeat, the
    lane gates' and the win rule's, is this loop."""
    figs, gens = [], []
    for w, ids in enumerate(prompts):
        g = lane.generate(list(ids), new_tokens)
        f = g.figures(new_tokens)
        on_wave(w, g, f)
        figs.append(f)
        gens.append(g)
    return pool(figs, gens)


def _summary(s: Series) -> dict[str, Any]:
    summary = stats.summarize(s.repeats)
    cpu = [r["cpu_per_wall"] for r in s.repeats if r["cpu_per_wall"] is not None]
    summary["cpu_per_wall"] = float(statistics.median(cpu)) if cpu else None
    return summary


def _run_group(group: Sequence[tuple[str, Cell]], lanes: Mapping[str, Lane], runs: dict[str, LaneRun],
               work: Workload, rotate: bool, waves: int, progress: Callable[[str], None]) -> None:
    """Warm-ups of every series in the group, then rounds of one repeat per live series until none needs
    more; a lane error drops that lane's series (all of them: a lane is one engine)."""
    started = [(n, c) for n, c in group if runs[n].error is None]
    for n, c in started:
        runs[n].series[c.name] = Series(c.name)
    for n, c in started:
        if runs[n].error:
            continue
        try:
            for _ in range(work.warmup):
                g = lanes[n].generate(list(c.prompt_ids), work.new_tokens)
                runs[n].series[c.name].raw.append(_record(g, warmup=True, round=None, wave=None))
        except HarnessError as exc:
            runs[n].fail(exc)
    rnd = 0
    shown = [time.monotonic()]

    def show_repeat(n: str, s: Series) -> None:
        """A line for a repeat at most every EVERY_S seconds: a long series shows it is moving."""
        if time.monotonic() - shown[0] >= EVERY_S:
            shown[0] = time.monotonic()
            progress(f"{n} {s.cell}: repeat {len(s.repeats)} (at least {work.repeats}, at most {work.max_repeats}), "
                     f"{figure(s.repeats[-1]['decode_tok_s'], 'tok/s')}")

    while True:
        live = [(n, c) for n, c in started if runs[n].error is None]
        if not live or not any(stats.needs_more([r["decode_tok_s"] for r in runs[n].series[c.name].repeats],
                                                work.repeats, work.max_repeats, work.cv_limit) for n, c in live):
            break
        k = rnd % len(live) if rotate else 0
        rnd += 1
        for n, c in live[k:] + live[:k]:
            if runs[n].error:  # died earlier in this round (on another cell of the same lane)
                continue
            s = runs[n].series[c.name]

            def keep(w: int, g: Generation, f: dict[str, Any], s: Series = s) -> None:
                s.raw.append(_record(g, warmup=False, round=rnd, wave=w, **f))
                s.ids.append(list(g.ids))

            try:
                pooled = one_repeat(lanes[n], [c.prompt_ids] * waves, work.new_tokens, keep)
            except HarnessError as exc:
                runs[n].fail(exc)
                continue
            s.repeats.append({**pooled, "round": rnd})
            show_repeat(n, s)
    for n, c in started:
        s = runs[n].series[c.name]
        if runs[n].error is None and s.repeats:
            s.summary = _summary(s)
            progress(f"{n} {c.name}: {figure(s.summary['decode_tok_s'], 'tok/s')} pooled over {s.summary['repeats']} "
                     f"repeats (CV {figure(s.summary['decode_tok_s_cv'], '%')}), prefill "
                     f"{figure(s.summary['prefill_ms_median'], 'ms')}")


def measure_runs(lanes: Mapping[str, Lane], work: Workload, order: str = "sequential", *, waves: int = 1,
                 progress: Callable[[str], None] = _quiet) -> dict[str, LaneRun]:
    """Every lane (already loaded) through ``work`` in ``order``; {name: LaneRun}, in the lanes' order."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if waves < 1:
        raise ValueError(f"waves must be at least 1, got {waves}")
    runs = {n: LaneRun(n) for n in lanes}
    if order == "sequential":
        groups = [[(n, c)] for n in lanes for c in work.cells]
    elif order == "interleaved":
        groups = [[(n, c) for n in lanes] for c in work.cells]
    else:
        groups = [[(n, c) for c in work.cells] for n in lanes]
    for group in groups:
        _run_group(group, lanes, runs, work, order == "interleaved", waves, progress)
    return runs


def measure(lanes: Mapping[str, Lane] | Lane, work: Workload, order: str = "sequential", *, waves: int = 1,
            progress: Callable[[str], None] = _quiet) -> dict[str, Any]:
    """The evidence dict of one lane, or {name: evidence} of several (see the package docstring)."""
    if isinstance(lanes, Mapping):
        return {n: r.evidence() for n, r in measure_runs(lanes, work, order, waves=waves, progress=progress).items()}
    return measure_runs({lanes.name: lanes}, work, order, waves=waves, progress=progress)[lanes.name].evidence()


def run_lane(lane: Lane, work: Workload, *, progress: Callable[[str], None] = _quiet
             ) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """One lane's whole life for one gate test: load, measure sequentially, close.

    Returns (load record or None, evidence); a load that raises :class:`HarnessError` gives
    ``(None, failed(error))``, and an unclean end (``close()``'s answer) becomes the error of a lane that
    measured without one."""
    try:
        try:
            load = lane.load()
        except HarnessError as exc:
            return None, failed(str(exc))
        found = measure(lane, work, progress=progress)
    finally:
        end = lane.close()
    if end and not found["error"]:
        found["error"] = end
    return load, found
