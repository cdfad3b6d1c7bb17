"""A valid event log built from the protocol's own arithmetic: the validator's and the metrics' test input."""

from __future__ import annotations

from harness.streaming import protocol as P
from harness.streaming.profile import SAMPLE_RATE, StreamProfile, batch_bounds, emission_count, needs_eof
from harness.streaming.profile import source_deadline_seconds
from harness.streaming.rolling import window_clocks
from harness.streaming.tokens import TokenTable, ids_digest, oracle


def event_log(profile: StreamProfile, samples: int, ids, model: P.ModelIdentity, table: TokenTable, *,
              work_per_window: float = 0.001, queue: float = 0.0005, capacity: int = 8192) -> list[dict]:
    """The events a correct engine emits for ``ids`` (one per window) and ``samples`` of input."""
    count = emission_count(samples, profile)
    ids = list(ids)
    if len(ids) != count:
        raise ValueError(f"{len(ids)} ids for {count} windows")
    ready = {"kind": P.READY, **P.expected_ready(profile, model), "engine": "synthetic",
             "retained_audio_capacity_samples": capacity, "seconds": 0.0}
    events, clocks = [ready], window_clocks(count, profile)
    per_token, allocated = model.cache_bytes_per_token, model.cache_bytes_per_token * profile.context_tokens
    words = oracle(ids, table)
    delta_at = dict(words.deltas)
    finish, total_work = 0.0, 0.0
    for start, end in batch_bounds(count, profile):
        deadline = source_deadline_seconds(end - 1, samples, profile)
        t0 = max(finish, deadline) + queue
        t = t0
        for i in range(start, end):
            c = clocks[i]
            t = t + work_per_window
            events.append({
                "kind": P.WINDOW, "index": i, "token_id": ids[i], "text_position": c.text_position,
                "encoder_position": c.encoder_position, "absolute_text_position": c.absolute_text_position,
                "absolute_encoder_position": c.absolute_encoder_position,
                "processed_absolute_encoder_position": (profile.startup_tokens + end - 1) * 4,
                "rolling_dropped_tokens": c.rolling_dropped_tokens, "rolling_trim_count": c.rolling_trim_count,
                "cache_logical_bytes": c.text_position * per_token, "logit_margin": 1.5,
                "phase_seconds": [work_per_window / 5] * 5, "seconds": t})
            if i in delta_at:
                events.append({"kind": P.DELTA, "index": i, "text": delta_at[i], "seconds": t})
        finish = t
        total_work += finish - t0
        last = clocks[end - 1]
        events.append({
            "kind": P.BATCH, "start_window": start, "end_window_exclusive": end, "started_seconds": t0,
            "finished_seconds": finish, "work_seconds": finish - t0, "cache_allocated_bytes": allocated,
            "decoder_cached_tokens": last.text_position, "rolling_trim_count": last.rolling_trim_count,
            "retained_audio_capacity_samples": capacity, "input_eof": needs_eof(end - 1, samples, profile),
            "source_audio_ready_seconds": deadline, "relative_to_audio_clock_seconds": t0 - deadline})
    audio_seconds = samples / SAMPLE_RATE
    eof_at = max(audio_seconds + 0.001, 0.0)
    elapsed = max(finish, eof_at) + 0.001
    wait = max(elapsed - total_work - 0.002, 0.0)
    visible = [e for e in events if e["kind"] == P.DELTA]
    events.append({
        "kind": P.COMPLETE, "status": "complete", "all_source_audio_observed": True, "audio_samples": samples,
        "audio_seconds": audio_seconds, "emitted_tokens": count, "generated_ids_sha256": ids_digest(ids),
        "text_bytes": len(words.text.encode()), "visible_tokens": words.visible_tokens,
        "skipped_tokens": words.skipped_tokens,
        "first_text_seconds": visible[0]["seconds"] if visible else None,
        "last_text_seconds": visible[-1]["seconds"] if visible else None,
        "elapsed_seconds": elapsed, "input_eof_detected_seconds": eof_at,
        "completion_after_eof_detected_seconds": elapsed - eof_at,
        "completion_relative_to_audio_clock_seconds": elapsed - audio_seconds,
        "input_wait_seconds": wait, "input_convert_seconds": 0.0005, "input_seconds": wait + 0.0005,
        "batch_work_seconds": total_work, "peak_cache_allocated_bytes": allocated,
        "retained_audio_capacity_samples": capacity})
    return events
