"""The engine's timings checked against the host's: an engine's account of its own work is not evidence
until the host can vouch for it.

Two checks, pure functions of what the capture recorded:

- *Clock skew.* For every batch line the host noted when it received the line
  (``since_feeder_start_seconds``, the feeder's clock) and the engine claims when it finished the batch
  (``finished_seconds``, its own clock).  The two clocks may differ by a constant; their difference may
  not wander by more than ``max_offset_spread_seconds`` over the run (measured here: at most 2.4 ms on
  the CI tier's twelve runs).  An engine whose clock runs slow, or that reports a batch finished before
  it really did, drifts.
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
    max_offset_spread_seconds: float = 0.05
    max_cpu_over_claimed_work: float = 3.0
    min_cpu_seconds: float = 0.05


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
        low, high = min(offsets), max(offsets)
        spread = high[0] - low[0]
        figures["host_clock_offset_spread_seconds"] = Measurement(spread, "s", len(offsets))
        if spread > bounds.max_offset_spread_seconds:
            reasons.append(f"host clock: the engine's claimed batch finish times and the host's receive times drift "
                           f"apart by {spread:.4f} s over the run (bound {bounds.max_offset_spread_seconds:g} s; "
                           f"offset {low[0]:+.4f} s at the batch from window {low[1]}, {high[0]:+.4f} s at the batch "
                           f"from window {high[1]}): the engine's clock does not keep the host's time")
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
