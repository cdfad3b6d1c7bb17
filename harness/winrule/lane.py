"""Measuring an A/B/A window with any :class:`harness.lanes.Lane` (thin I/O around the rule).

A start is one process launch: the caller opens and loads three fresh lanes (control, candidate, control:
a probe process each) and hands them to :func:`run_window` with the registered wave schedule. The window
runs in *blocks*: each block runs the three starts in A/B/A order, each start its repeats with the
machine sampled throughout (:class:`harness.sampler.Sampler`); after each block the rule decides, and while
the decision wants more (a TIE with no override, below ``max_repeats``) another block of ``step`` repeats
runs in the same three processes, in the same A/B/A order, so that linear drift still cancels.

Within a start: each cell's warm-up first (its first measured block only), then repeats outermost and cells inside, so
slow drift lands on every cell alike; each repeat pools ``waves_per_repeat`` generations, wave w of a cell
fed the schedule's prompt w (distinct frozen prompts, pinned by SHA-256 in the registration). Every wave's
greedy ids are kept for the correctness prerequisite. A lane error makes the start incomplete.

Each finished block goes to the window's journal as it ends (:mod:`harness.winrule.journal`), so a killed
window keeps its finished blocks; a resumed window takes the recorded blocks in their places (a fresh process
warms up before its first measured block, whatever its repeats).
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

from ..errors import HarnessError
from ..hashing import sha256_bytes
from ..lanes import FIGURES, Lane, one_repeat
from ..progress import emit, ticker
from ..sampler import Sampler
from .decision import Decision
from .evidence import ORDER, Start, WaveInput
from .journal import DECIDED, Growing, block_record
from .registration import Registration

METRICS = ("decode_tok_s", "prefill_ms", "cpu_per_wall")


def prompt_sha256(ids: Sequence[int]) -> str:
    """The identity of a prompt: the same hash :class:`harness.workload.Cell` uses."""
    return sha256_bytes(",".join(map(str, ids)).encode())


@dataclass(frozen=True)
class Schedule:
    """The registered wave schedule: per cell, one frozen prompt (token ids) per wave, all distinct.

    Wave w of cell c is the held-out corpus's ids at offset ``w * stride`` (``stride`` = the cell's prompt
    length while the corpus lasts, then as large as it allows), so every wave of a cell has its own text
    of the cell's length. ``sha256`` pins the whole schedule.
    """

    prompts: Mapping[str, tuple[tuple[int, ...], ...]]

    @classmethod
    def build(cls, corpus_ids: Sequence[int], lengths: Mapping[str, int], waves: int) -> "Schedule":
        out = {}
        for cell, n in lengths.items():
            room = len(corpus_ids) - n
            if room < waves - 1:
                raise HarnessError(f"wave schedule: cell {cell!r} needs {waves} distinct prompts of {n} tokens; the "
                                   f"held-out corpus has {len(corpus_ids)} tokens")
            stride = n if room >= n * (waves - 1) else room // max(1, waves - 1)
            out[cell] = tuple(tuple(int(t) for t in corpus_ids[w * stride: w * stride + n]) for w in range(waves))
            shas = [prompt_sha256(p) for p in out[cell]]
            if len(set(shas)) != len(shas):
                raise HarnessError(f"wave schedule: cell {cell!r}: the held-out corpus repeats itself at stride "
                                   f"{stride}, so its {waves} prompts are not distinct")
        return cls(out)

    def shas(self) -> dict[str, tuple[str, ...]]:
        return {c: tuple(prompt_sha256(p) for p in ps) for c, ps in self.prompts.items()}

    @property
    def sha256(self) -> str:
        return sha256_bytes(repr(sorted(self.shas().items())).encode())


def _measure_block(lane: Lane, registration: Registration, schedule: Schedule, new_tokens: int, warmup: int,
                   first: int, end: int, sample_interval_s: float,
                   tick: Callable[[int], None] | None = None) -> dict[str, Any]:
    """One block of one start (repeats ``first`` to ``end``, ``warmup`` generations per cell first): what it
    measured, as the journal's block fields (``values``, ``inputs``, ``outputs``, ``raw``, ``sampled``, ``error``).
    ``tick(done)`` after each repeat (a progress ticker: a block of SmolLM2 takes about 25 s)."""
    block: dict[str, Any] = {"values": {}, "inputs": {}, "outputs": {}, "raw": [], "sampled": {}, "error": None}
    with Sampler(sample_interval_s) as sampler:
        try:
            for cell in registration.cells:
                for _ in range(warmup):
                    lane.generate(list(schedule.prompts[cell][0]), new_tokens)
            for r in range(first, end):
                for cell in registration.cells:
                    base = r * registration.waves_per_repeat
                    prompts = schedule.prompts[cell][base:base + registration.waves_per_repeat]

                    def keep(k: int, g, figures, r: int = r, cell: str = cell, prompts=prompts, base: int = base):
                        block["inputs"].setdefault(cell, []).append(
                            WaveInput(prompt_sha256(prompts[k]), "heldout", None, None))
                        block["outputs"].setdefault(cell, []).append(tuple(g.ids))
                        block["raw"].append({"repeat": r, "cell": cell, "wave": base + k, "cpu_per_wall": g.cpu_per_wall,
                                             **{k2: figures[k2] for k2 in FIGURES}})

                    pooled = one_repeat(lane, prompts, new_tokens, keep)
                    for metric in (m for m in METRICS if m in {x.name for x in registration.metrics}):
                        value = pooled.get(metric)
                        block["values"].setdefault(cell, {}).setdefault(metric, []).append(
                            float("nan") if value is None else float(value))
                if tick is not None:
                    tick(r - first + 1)
        except HarnessError as exc:
            block["error"] = f"{type(exc).__name__}: {exc}"
    block["sampled"] = sampler.summary or {}
    return block


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_window(registration: Registration, lanes: Sequence[Lane], configs: Sequence[str], labels: Sequence[str],
               schedule: Schedule, *, new_tokens: int, warmup: int, fingerprint: Callable[[], Mapping[str, Any]],
               commit: str | None, decide: Callable[[list[Start]], Decision], sample_interval_s: float = 0.5,
               recorded: Sequence[Mapping[str, Any]] = (),
               journal: Callable[[Mapping[str, Any]], None] | None = None,
               ) -> tuple[Decision, list[Start], dict[str, list[dict[str, Any]]]]:
    """Run the window's blocks on three loaded ``lanes`` (control, candidate, control) until the rule stops.

    ``decide`` is the rule with its policy bound (``lambda starts: winrule.decide(starts, registration,
    drift, archive)``).  ``journal`` receives every block as it finishes, then the decided line
    (:mod:`harness.winrule.journal`); ``recorded`` are blocks an earlier attempt recorded
    (:func:`harness.winrule.journal.reusable`): each is taken in its place instead of being measured (and passed
    to ``journal`` again), and a lane's first measured block starts with the warm-up whatever its repeats.
    Returns the final decision, the three starts and each start's raw per-wave records.
    """
    if len(lanes) != 3 or len(configs) != 3 or len(labels) != 3:
        raise HarnessError("run_window needs three lanes, configs and labels (control, candidate, control)")
    accs = [Growing(label, role, config) for label, role, config in zip(labels, ORDER, configs)]
    reuse = {(b["label"], b["first"], b["end"]): b for b in recorded}
    fresh = [True] * 3
    first = 0
    for n in registration.looks:
        for i, (acc, lane) in enumerate(zip(accs, lanes)):
            if acc.error is not None:
                continue
            block = reuse.get((acc.label, first, n))
            if block is not None:
                emit(f"win rule {registration.name}: start {acc.label} ({acc.role}), repeats {first + 1}-{n} "
                     f"recorded earlier, reused")
            else:
                if not acc.samples:   # the start's first block: the machine as it begins
                    acc.fingerprint, acc.started_utc = dict(fingerprint()), _now()
                emit(f"win rule {registration.name}: start {acc.label} ({acc.role}), repeats {first + 1}-{n}")
                began = time.monotonic()
                tick = ticker(f"win rule {registration.name}: start {acc.label}, repeats", n - first, every_s=10.0,
                              ends=False)
                measured = _measure_block(lane, registration, schedule, new_tokens, warmup if fresh[i] else 0,
                                          first, n, sample_interval_s, tick)
                fresh[i] = False
                block = block_record(acc, first, n, measured, time.monotonic() - began)
            acc.add(block)
            if journal is not None:
                journal(block)
        starts = [acc.start(registration.key, commit) for acc in accs]
        decision = decide(starts)
        emit(f"win rule {registration.name}: {decision.verdict} after {n} repeats"
             + (", more repeats due" if decision.wants_more else ""))
        first = n
        if not decision.wants_more:
            break
    if journal is not None:
        journal({"kind": DECIDED, "verdict": decision.verdict, "looks": [x.repeats for x in decision.looks],
                 "decided_utc": _now()})
    return decision, starts, {acc.label: acc.raw for acc in accs}


def time_waves(lanes: Sequence[Lane], schedule: Schedule, cells: Sequence[str], new_tokens: int,
               clock: Callable[[], float] = time.perf_counter) -> list[dict[str, float | None]]:
    """Wall seconds of one generation per cell (the cell's first registered prompt) on each loaded lane: the
    measured per-wave cost the window's time estimate rests on (:mod:`harness.winrule.budget`), taken before the
    window starts.  A lane that fails here gives ``None`` and is left to fail in its start, as before."""
    out: list[dict[str, float | None]] = []
    for lane in lanes:
        per: dict[str, float | None] = {}
        for cell in cells:
            began = clock()
            try:
                lane.generate(list(schedule.prompts[cell][0]), new_tokens)
            except HarnessError:
                per[cell] = None
                continue
            per[cell] = clock() - began
        out.append(per)
    return out


def registered(registration: Registration, schedule: Schedule) -> Registration:
    """``registration`` with the schedule's prompt hashes frozen into it (checked against every start)."""
    waves = registration.looks[-1] * registration.waves_per_repeat
    return replace(registration, prompts={c: shas[:waves] for c, shas in schedule.shas().items()})


__all__ = ["METRICS", "Schedule", "prompt_sha256", "registered", "run_window", "time_waves"]
