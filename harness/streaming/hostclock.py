"""The engine's timings checked against the host's: an engine's account of its own work is not evidence
until the host can vouch for it.

Two checks, pure functions of what the capture recorded:

- *Clock drift.* For every batch line the host noted when it received the line
  (``since_feeder_start_seconds``, the feeder's clock) and the engine claims when it finished the batch
  (``finished_seconds``, its own clock).  The offset host − claimed is the clocks' constant difference plus the
  line's delivery delay, which is never negative.  So the lowest offset in a stretch of the run is that stretch's
  clock difference, and it may not move by more than ``max_drift_seconds`` between the run's first, middle and last
  thirds (of its batches; halves for four or five batches, every batch alone for fewer).  An engine whose clock
  runs slow, or that reports its batches finished earlier and earlier than they really did, drifts: its offsets
  grow over the whole run, every third's lowest with them.  A host whose reader is late for a moment delays a few
  lines only and moves no third's lowest.  (The rule before judged the spread of all offsets: at most 2.4 ms on
  twelve quiet CI runs, but one CI run under load measured 0.38 s, highest at the batch from window 61, and the
  same case passed alone.)  That spread is still recorded
  (``host_clock_offset_spread_seconds``).
- *Claimed work against CPU.* GNU time's user + system seconds of the engine process are the host's
  count of the work it did; the engine claims ``work_seconds`` per batch.  An engine that under-reports
  its work uses far more CPU than it claims (honest runs here: 0.4-1.5x, the difference being start-up,
  input handling and a second thread); above ``max_cpu_over_claimed_work`` it fails, judged once the
  engine used at least ``min_cpu_seconds`` (below that, start-up dominates and the figure is recorded only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from harness.streaming.protocol import BATCH
from harness.verdict import Measurement


@dataclass(frozen=True)
class ClockBounds:
    max_drift_seconds: float = 0.05
    max_cpu_over_claimed_work: float = 3.0
    min_cpu_seconds: float = 0.05


def thirds_lowest(offsets: Sequence[tuple[float, Any]]) -> list[tuple[float, Any]]:
    """The lowest (offset, window) of each consecutive stretch of ``offsets`` (in run order): thirds, each of at
    least two batches; halves for a run of four or five batches; one stretch per batch below that (every offset
    judged, as the spread rule did: too few batches to tell a late line from a drifting clock)."""
    n = len(offsets)
    parts = 3 if n >= 6 else 2 if n >= 4 else n
    cuts = [n * k // parts for k in range(parts + 1)] if parts else [0]
    return [min(offsets[a:b], key=lambda o: o[0]) for a, b in zip(cuts, cuts[1:])]


def check(events: Sequence[Mapping[str, Any]], observations: Sequence[Mapping[str, Any]],
          engine_cpu_seconds: float | None, bounds: ClockBounds = ClockBounds()) -> tuple[list[str], dict]:
    """(reasons, figures): the host's view of the engine's clock and claimed work."""
    reasons: list[str] = []
    figures: dict[str, Measurement] = {}
    received = {o.get("event_index"): o.get("since_feeder_start_seconds") for o in observations}
    offsets = []
    for i, e in enumerate(events):
        host = received.get(i)
        if e.get("kind") == BATCH and isinstance(host, (int, float)) and isinstance(e.get("finished_seconds"), (int, float)):
            offsets.append((host - e["finished_seconds"], e.get("start_window")))
    if not offsets and any(e.get("kind") == BATCH for e in events):
        reasons.append("host clock: no batch line has a host receive time; the engine's timings cannot be vouched for")
    if offsets:
        low, high = min(offsets, key=lambda o: o[0]), max(offsets, key=lambda o: o[0])
        figures["host_clock_offset_spread_seconds"] = Measurement(high[0] - low[0], "s", len(offsets))
        lows = thirds_lowest(offsets)
        lowest, highest = min(lows, key=lambda o: o[0]), max(lows, key=lambda o: o[0])
        drift = highest[0] - lowest[0]
        figures["host_clock_drift_seconds"] = Measurement(drift, "s", len(offsets))
        if drift > bounds.max_drift_seconds:
            reasons.append(f"host clock: the engine's claimed batch finish times drift from the host's receive times "
                           f"by {drift:.4f} s over the run (bound {bounds.max_drift_seconds:g} s; the lowest offset of "
                           f"each of {len(lows)} stretches of its {len(offsets)} batches: {lowest[0]:+.4f} s at the "
                           f"batch from window {lowest[1]}, {highest[0]:+.4f} s at the batch from window "
                           f"{highest[1]}): the engine's clock does not keep the host's time")
    claimed = sum(e["work_seconds"] for e in events
                  if e.get("kind") == BATCH and isinstance(e.get("work_seconds"), (int, float)))
    figures["claimed_batch_work_seconds"] = Measurement(claimed, "s")
    figures["engine_cpu_seconds"] = Measurement(engine_cpu_seconds, "s")
    if engine_cpu_seconds is not None and claimed > 0:
        ratio = engine_cpu_seconds / claimed
        figures["engine_cpu_over_claimed_work"] = Measurement(ratio, "ratio")
        if engine_cpu_seconds >= bounds.min_cpu_seconds and ratio > bounds.max_cpu_over_claimed_work:
            reasons.append(f"host clock: the engine used {engine_cpu_seconds:.3f} s of CPU (GNU time) but claims "
                           f"{claimed:.3f} s of batch work, {ratio:.1f}x (bound {bounds.max_cpu_over_claimed_work:g}x): "
                           f"it under-reports its work")
    return reasons, figures
