"""Measuring one start of an A/B/A window with any :class:`harness.lanes.Lane` (thin I/O around the rule).

A start is one process launch: the caller opens and loads a fresh lane (a probe process on a graph with a
configuration), hands it here with the workload, and gets a :class:`Start` back: per cell and repeat, the
pooled decode tokens/s over the repeat's waves (excluding each wave's first token), the mean prefill ms and
the repeat's CPU seconds per wall second, plus the wave inputs and the machine fingerprint read at the
start. The generations run through :func:`harness.lanes.measure_runs` in ``"by-repeat"`` order (each
cell's warm-up first, then repeats outermost and cells inside, so slow drift lands on every cell alike),
the registration's repeats exactly (no extra repeats: the rule's statistic wants the registered count)
and ``waves_per_repeat`` generations pooled into each repeat.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from ..lanes import FIGURES, Lane, measure_runs
from ..workload import Workload
from .evidence import Start, WaveInput
from .registration import Registration


def measure_start(label: str, role: str, config: str, registration: Registration, lane: Lane, work: Workload,
                  fingerprint: Mapping[str, Any], commit: str | None) -> tuple[Start, list[dict[str, Any]]]:
    """One start on a loaded ``lane`` (the caller closes it); ``work`` gives the cells' prompt ids, the new
    tokens and the warm-up. Returns the Start and its raw per-wave records. A lane error makes the start
    incomplete."""
    cells = registration.cells
    work = replace(work, cells=tuple(work.cell(c) for c in cells), repeats=registration.repeats,
                   max_repeats=registration.repeats)
    run = measure_runs({lane.name: lane}, work, "by-repeat", waves=registration.waves_per_repeat)[lane.name]
    keys = [k for k in ("decode_tok_s", "prefill_ms", "cpu_per_wall") if k in {m.name for m in registration.metrics}]
    values = {c: {k: [float("nan") if r[k] is None else r[k] for r in (run.series[c].repeats if c in run.series else [])]
                  for k in keys} for c in cells}
    inputs = {c: [WaveInput(work.cell(c).sha256, c) for _ in range(registration.repeats * registration.waves_per_repeat)]
              for c in cells}
    raw = sorted(({"repeat": r["round"] - 1, "cell": c, "wave": r["wave"], **{k: r[k] for k in FIGURES}}
                  for c, s in run.series.items() for r in s.raw if not r["warmup"]),
                 key=lambda r: (r["repeat"], cells.index(r["cell"]), r["wave"]))
    why = None if run.exception is None else f"{type(run.exception).__name__}: {run.exception}"
    return Start(label, role, registration.key, config, values, inputs, dict(fingerprint), why is None, why, commit), raw
