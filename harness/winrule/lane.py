"""Measuring an A/B/A window with any :class:`harness.lanes.Lane` (thin I/O around the rule).

A start is one process launch: the caller opens and loads three fresh lanes (control, candidate, control:
a probe process each) and hands them to :func:`run_window` with the registered wave schedule. The window
runs in *blocks*: each block runs the three starts in A/B/A order, each start its repeats with the
machine sampled throughout (:class:`harness.sampler.Sampler`); after each block the rule decides, and while
the decision wants more (a TIE with no override, below ``max_repeats``) another block of ``step`` repeats
runs in the same three processes, in the same A/B/A order, so that linear drift still cancels.

Within a start: each cell's warm-up first (first block only), then repeats outermost and cells inside, so
slow drift lands on every cell alike; each repeat pools ``waves_per_repeat`` generations, wave w of a cell
fed the schedule's prompt w (distinct frozen prompts, pinned by SHA-256 in the registration). Every wave's
greedy ids are kept for the correctness prerequisite. A lane error makes the start incomplete.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

from ..errors import HarnessError
from ..hashing import sha256_bytes
from ..lanes import FIGURES, Lane, one_repeat
from ..progress import emit
from ..sampler import FIGURES as SAMPLED, Sampler
from .decision import Decision
from .evidence import ORDER, Start, WaveInput
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


@dataclass
class _Acc:
    """One start's record as it grows block by block."""

    label: str
    role: str
    config: str
    fingerprint: dict[str, Any]
    started_utc: str
    values: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    inputs: dict[str, list[WaveInput]] = field(default_factory=dict)
    outputs: dict[str, list[tuple[int, ...]]] = field(default_factory=dict)
    raw: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    def sampled(self) -> dict[str, Any]:
        """The worst of each sampled figure over the start's blocks (None when any block lacked it)."""
        out: dict[str, Any] = {}
        for key in SAMPLED:
            values = [s.get(key) for s in self.samples]
            if key == "cpu_mhz_min":
                out[key] = None if not values or None in values else min(values)
            else:
                out[key] = None if not values or None in values else max(values)
        out["sampled_seconds"] = round(sum(s.get("duration_s") or 0.0 for s in self.samples), 3)
        out["samples"] = sum(s.get("samples") or 0 for s in self.samples)
        out["cpu_mhz_source"] = next((s.get("cpu_mhz_source") for s in self.samples), None)
        return out

    def start(self, registration: Registration, commit: str | None) -> Start:
        return Start(self.label, self.role, registration.key, self.config, self.values, self.inputs,
                     self.fingerprint, self.error is None, self.error, commit, self.outputs, self.sampled())


def _measure_block(acc: _Acc, lane: Lane, registration: Registration, schedule: Schedule, new_tokens: int,
                   warmup: int, first: int, end: int, sample_interval_s: float) -> None:
    cells = registration.cells
    with Sampler(sample_interval_s) as sampler:
        try:
            if first == 0:
                for cell in cells:
                    for _ in range(warmup):
                        lane.generate(list(schedule.prompts[cell][0]), new_tokens)
            for r in range(first, end):
                for cell in cells:
                    base = r * registration.waves_per_repeat
                    prompts = schedule.prompts[cell][base:base + registration.waves_per_repeat]

                    def keep(k: int, g, figures, r: int = r, cell: str = cell, prompts=prompts, base: int = base):
                        acc.inputs.setdefault(cell, []).append(
                            WaveInput(prompt_sha256(prompts[k]), "heldout", None, None))
                        acc.outputs.setdefault(cell, []).append(tuple(g.ids))
                        acc.raw.append({"repeat": r, "cell": cell, "wave": base + k, "cpu_per_wall": g.cpu_per_wall,
                                        **{k2: figures[k2] for k2 in FIGURES}})

                    pooled = one_repeat(lane, prompts, new_tokens, keep)
                    for metric in (m for m in METRICS if m in {x.name for x in registration.metrics}):
                        value = pooled.get(metric)
                        acc.values.setdefault(cell, {}).setdefault(metric, []).append(
                            float("nan") if value is None else float(value))
        except HarnessError as exc:
            acc.error = f"{type(exc).__name__}: {exc}"
    acc.samples.append(sampler.summary or {})


def run_window(registration: Registration, lanes: Sequence[Lane], configs: Sequence[str], labels: Sequence[str],
               schedule: Schedule, *, new_tokens: int, warmup: int, fingerprint: Callable[[], Mapping[str, Any]],
               commit: str | None, decide: Callable[[list[Start]], Decision],
               sample_interval_s: float = 0.5) -> tuple[Decision, list[Start], dict[str, list[dict[str, Any]]]]:
    """Run the window's blocks on three loaded ``lanes`` (control, candidate, control) until the rule stops.

    ``decide`` is the rule with its policy bound (``lambda starts: winrule.decide(starts, registration,
    drift, archive)``). Returns the final decision, the three starts and each start's raw per-wave records.
    """
    if len(lanes) != 3 or len(configs) != 3 or len(labels) != 3:
        raise HarnessError("run_window needs three lanes, configs and labels (control, candidate, control)")
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    accs = [_Acc(label, role, config, {}, now) for label, role, config in zip(labels, ORDER, configs)]
    first = 0
    for n in registration.looks:
        for acc, lane in zip(accs, lanes):
            if first == 0:
                acc.fingerprint = dict(fingerprint())
                acc.started_utc = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            if acc.error is None:
                emit(f"win rule {registration.name}: start {acc.label} ({acc.role}), repeats {first + 1}-{n}")
                _measure_block(acc, lane, registration, schedule, new_tokens, warmup, first, n, sample_interval_s)
        starts = [acc.start(registration, commit) for acc in accs]
        decision = decide(starts)
        emit(f"win rule {registration.name}: {decision.verdict} after {n} repeats"
             + (", more repeats due" if decision.wants_more else ""))
        first = n
        if not decision.wants_more:
            break
    return decision, starts, {acc.label: acc.raw for acc in accs}


def registered(registration: Registration, schedule: Schedule) -> Registration:
    """``registration`` with the schedule's prompt hashes frozen into it (checked against every start)."""
    waves = registration.looks[-1] * registration.waves_per_repeat
    return replace(registration, prompts={c: shas[:waves] for c, shas in schedule.shas().items()})


__all__ = ["METRICS", "Schedule", "prompt_sha256", "registered", "run_window"]
