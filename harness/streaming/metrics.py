"""Pure streaming metrics over a validated event log, the feeder's records and the memory samples."""

from __future__ import annotations

import math
import statistics

from harness.streaming import protocol as P
from harness.streaming.profile import TOKEN_PERIOD_SECONDS, StreamProfile, source_deadline_seconds
from harness.verdict import Measurement


def nearest_rank(values, q: float):
    """The ``q`` quantile by the nearest-rank method (no interpolation); None for no values."""
    values = sorted(values)
    if not values:
        return None
    return values[max(math.ceil(q * len(values)) - 1, 0)]


def word_errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """Word-level Levenshtein distance and the reference length (substitutions, insertions, deletions)."""
    ref, hyp = reference.split(), hypothesis.split()
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[len(hyp)], len(ref)


def word_error_rate(pairs) -> tuple[float | None, int]:
    """Corpus WER over ``(reference, hypothesis)`` pairs: total edits over total reference words."""
    edits = words = 0
    for ref, hyp in pairs:
        e, n = word_errors(ref, hyp)
        edits, words = edits + e, words + n
    return (edits / words if words else None), words


def _active(batches, profile: StreamProfile):
    """Steady-state batches: after startup, full-sized, before EOF."""
    return [b for b in batches if b["start_window"] > 0 and not b["input_eof"]
            and b["end_window_exclusive"] - b["start_window"] == profile.batch]


def stream_figures(events, profile: StreamProfile, samples: int) -> dict[str, Measurement]:
    """Work, queue, first-text and EOF-drain figures from a validated event log."""
    batches = [e for e in events if e.get("kind") == P.BATCH]
    deltas = [e for e in events if e.get("kind") == P.DELTA]
    final = next(e for e in events if e.get("kind") == P.COMPLETE)
    audio_seconds = samples / 16_000
    active = _active(batches, profile)
    work = [b["work_seconds"] / profile.batch for b in active]
    queue = [max(0.0, b["relative_to_audio_clock_seconds"]) for b in active]
    s, n = "seconds", len(work)
    out = {
        "rtf": Measurement(final["batch_work_seconds"] / audio_seconds, "ratio"),
        "elapsed_rtf": Measurement(final["elapsed_seconds"] / audio_seconds, "ratio"),
        "audio_seconds": Measurement(audio_seconds, s),
        "startup_work_seconds": Measurement(batches[0]["work_seconds"], s),
        "work_seconds_per_window_p95": Measurement(nearest_rank(work, 0.95), s, n),
        "work_seconds_per_window_median": Measurement(statistics.median(work) if work else None, s, n),
        "work_seconds_per_window_max": Measurement(max(work, default=None), s, n),
        "windows_over_token_period": Measurement(sum(w > TOKEN_PERIOD_SECONDS for w in work), "count", n),
        "token_period_seconds": Measurement(TOKEN_PERIOD_SECONDS, s),
        "batch_buffering_seconds": Measurement((profile.batch - 1) * TOKEN_PERIOD_SECONDS, s),
        "queue_seconds_first8_mean": Measurement(statistics.mean(queue[:8]) if queue else None, s, min(n, 8)),
        "queue_seconds_last8_mean": Measurement(statistics.mean(queue[-8:]) if queue else None, s, min(n, 8)),
        "queue_seconds_max": Measurement(max(queue, default=None), s, n),
        "eof_drain_batches": Measurement(sum(b["input_eof"] for b in batches), "count"),
        "eof_drain_work_seconds": Measurement(sum(b["work_seconds"] for b in batches if b["input_eof"]), s),
        "completion_after_eof_seconds": Measurement(final["completion_after_eof_detected_seconds"], s),
        "completion_after_audio_seconds": Measurement(final["completion_relative_to_audio_clock_seconds"], s),
        "rolling_trims": Measurement(max((b["rolling_trim_count"] for b in batches), default=0), "count"),
    }
    first = next((d for d in deltas if d["text"]), None)
    readable = next((d for d in deltas if any(not c.isspace() for c in d["text"])), None)
    for label, d in (("first_text", first), ("first_readable_text", readable)):
        t = d["seconds"] if d else None
        dep = source_deadline_seconds(d["index"], samples, profile) if d else None
        out[f"{label}_audio_clock_seconds"] = Measurement(t, s)
        out[f"{label}_after_source_seconds"] = Measurement(t - dep if d else None, s)
    return out


def feeder_figures(records) -> dict[str, Measurement]:
    """Lateness of each chunk's completed write past its wall-clock deadline (never negative when paced);
    the issue lateness is when the write started, before the kernel and the woken engine took their share."""
    late = [r["after_seconds"] - r["deadline_seconds"] for r in records]
    start_late = [r["before_seconds"] - r["deadline_seconds"] for r in records]
    n, s = len(late), "seconds"
    return {
        "feeder_chunks": Measurement(n, "count"),
        "feeder_lateness_seconds_p50": Measurement(nearest_rank(late, 0.50), s, n),
        "feeder_lateness_seconds_p99": Measurement(nearest_rank(late, 0.99), s, n),
        "feeder_lateness_seconds_max": Measurement(max(late, default=None), s, n),
        "feeder_issue_lateness_seconds_p99": Measurement(nearest_rank(start_late, 0.99), s, n),
        "feeder_early_chunks": Measurement(sum(x < 0 for x in start_late), "count", n),
    }


def memory_figures(peak_rss_kib: int | None, rss_samples) -> dict[str, Measurement]:
    """Peak RSS from GNU time, and RSS growth between the first and last quarter of the sampled run."""
    rss = [kib for _, kib in rss_samples]
    q = max(len(rss) // 4, 1)
    growth = (max(rss[-q:]) - max(rss[:q])) if len(rss) >= 4 else None
    return {
        "peak_rss_kib": Measurement(peak_rss_kib, "KiB"),
        "rss_growth_kib": Measurement(growth, "KiB", len(rss)),
        "rss_samples": Measurement(len(rss), "count"),
    }
