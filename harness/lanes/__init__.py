"""One lane interface and one measuring loop for every engine Gatehouse times.

A *lane* is one engine that generates greedy tokens for a prompt: the native probe process, Python
onnxruntime (``harness.runtime.OrtDecoder``), ORT-GenAI's own generator loop, llama.cpp, a bench page in
headless Chromium (onnxruntime-web or transformers.js), and the win rule's starts (a probe process per
start). Every lane speaks :class:`Lane`:

- ``load() -> dict``: start the engine (a process, a session, a page) and return its *load record*: the
  engine's own facts, as the receipts have always carried them (``load_ms`` and ``threads`` where known;
  the probe's JSON load receipt, the page's ``env``/``num_threads_effective``). It stays a plain dict
  because it is whatever the engine reports: the rules read named keys from it and the receipts note it
  whole, so a typed wrapper would only be converted back.
- ``generate(prompt_ids, n) -> Generation``: one greedy generation of ``n`` tokens, ignoring EOS, as a
  frozen :class:`Generation`: the ids, one stamp per token (ms from the request's start), and the wall and
  CPU seconds the call took (CPU of the engine's own process: the probe's, the browser's process tree, or
  this process for in-process runtimes; ``None`` when unknown). Prefill ms, decode tokens/s and CPU per
  wall second are derived from those, never stored twice.
- ``close() -> str | None``: end the engine; returns what went wrong at the end (a probe that exited
  with a non-zero status) or ``None``. ``with lane:`` closes; it does not load, because the load record and
  a load failure are evidence the caller records.

:class:`BaseLane` is the convenience base: it times ``generate`` around the adapter's ``_generate`` with
the lane's CPU clock. The adapters live beside the engines they drive (they need that subsystem's I/O):
``harness.throughput.lanes`` (``ProbeLane``, ``PythonOrtLane``, ``OrtGenAILane``, ``LlamaCppLane``) and
``harness.browser.lane.PageLane``; the win rule's starts are ``ProbeLane``\\ s measured by
``harness.winrule.lane.measure_start``. This package sits apart from all of them so that the browser and
the win rule need not import the native lanes, and it imports only the pure statistics
(``harness.throughput.stats``).

:func:`measure` is the one measuring loop (``loop.py``). Per (lane, cell) *series*: ``workload.warmup``
untimed generations, then repeats until :func:`harness.throughput.stats.needs_more` says enough (at least
``repeats``; more while the CV of the per-repeat decode rates is above ``cv_limit``, up to
``max_repeats``). Series run in *groups*; a group does all its warm-ups, then rounds in which every live
series takes one repeat, until no series in it needs more. ``order`` chooses the groups:

- ``"sequential"``: each series alone, lane after lane, cell after cell (one lane's gate test);
- ``"interleaved"``: per cell, all lanes, the order rotated each round, so that drift in the machine's load
  falls on every lane alike (the goal ratios; ``round`` in the raw records pairs them);
- ``"by-repeat"``: per lane, all its cells in their fixed order each round (the win rule: repeats
  outermost, cells inside, so slow drift lands on every cell alike).

A repeat pools ``waves`` generations (1 for throughput; the win rule's ``waves_per_repeat``): decode
tokens over decode seconds, the mean prefill, CPU seconds over wall seconds. A :class:`HarnessError` from a
lane (a refused generation, a dead process, a page that threw) stops that lane only: it is recorded as
the lane's ``error`` and the lane is dropped from later rounds, cells and groups; the other lanes go on.
Cells the lane finished before the error keep their summaries. Any other exception is a bug and
propagates.

The evidence per lane is the dict every throughput rule reads: ``cells`` ({cell: summary}: the keys of
:func:`harness.throughput.stats.summarize` plus ``cpu_per_wall``), ``ids`` (the last measured
generation's ids per cell), ``raw`` (per cell, one record per generation, warm-ups included: ``warmup``,
``round``, ``wave``, the generation's figures, ``cpu_per_wall``, ``ids``, ``token_ms`` and the lane's own
per-generation detail), ``error`` and ``ids_stable``. :func:`failed` is that shape for a lane that never
started. :func:`measure_runs` returns the typed :class:`LaneRun` (per-repeat records, the exception) for
callers that need more than the dict (the win rule's per-repeat values, the browser's re-raise).

The browser lane shares all of it: the page's ``generate`` job is one generation (the page stamps each
token on its own clock, the only part that must run in JS); Python drives warm-up, repeats, extra repeats
and the summary through this loop like every other lane, and the page's per-step detail (``run_ms``,
``feed_ms``, ...) rides in each raw record for the breakdown.
"""

from .loop import FIGURES, ORDERS, LaneRun, Series, failed, measure, measure_runs, one_repeat, pool, run_lane
from .protocol import BaseLane, Generation, Lane

__all__ = ["BaseLane", "FIGURES", "Generation", "Lane", "LaneRun", "ORDERS", "Series", "failed", "measure", "measure_runs", "one_repeat", "pool",
           "run_lane"]
