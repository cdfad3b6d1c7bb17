"""The engine's JSON-lines event protocol: kinds, required fields and the profile values ``ready`` must carry."""

from __future__ import annotations

from dataclasses import dataclass

from harness.streaming.profile import (FRAMES_PER_TOKEN, INPUT_FORMAT, SAMPLE_RATE, SAMPLES_PER_TOKEN,
                                       TOKEN_PERIOD_MS, StreamProfile)

PROTOCOL_VERSION = 1
READY, WINDOW, BATCH, DELTA, COMPLETE, ERROR = "ready", "window", "batch", "text_delta", "complete", "error"
KINDS = (READY, WINDOW, BATCH, DELTA, COMPLETE)
PHASES = ("features", "encoder", "decoder", "logits", "emit")

WINDOW_INTS = ("index", "token_id", "text_position", "encoder_position", "absolute_text_position",
               "absolute_encoder_position", "processed_absolute_encoder_position", "rolling_dropped_tokens",
               "rolling_trim_count", "cache_logical_bytes")
BATCH_INTS = ("start_window", "end_window_exclusive", "cache_allocated_bytes", "decoder_cached_tokens",
              "rolling_trim_count", "retained_audio_capacity_samples")
BATCH_FLOATS = ("started_seconds", "finished_seconds", "work_seconds", "source_audio_ready_seconds",
                "relative_to_audio_clock_seconds")
COMPLETE_INTS = ("audio_samples", "emitted_tokens", "text_bytes", "visible_tokens", "skipped_tokens",
                 "peak_cache_allocated_bytes", "retained_audio_capacity_samples")
COMPLETE_FLOATS = ("audio_seconds", "elapsed_seconds", "input_eof_detected_seconds",
                   "completion_after_eof_detected_seconds", "completion_relative_to_audio_clock_seconds",
                   "input_wait_seconds", "input_convert_seconds", "input_seconds", "batch_work_seconds")


@dataclass(frozen=True)
class ModelIdentity:
    """What the validator knows about the model independently of the engine."""

    sha256: str
    vocab_size: int
    cache_bytes_per_token: int


def expected_ready(profile: StreamProfile, model: ModelIdentity) -> dict:
    """Every field ``ready`` must carry, with its exact value and type."""
    return {
        "protocol_version": PROTOCOL_VERSION, "input_format": INPUT_FORMAT, "sample_rate": SAMPLE_RATE,
        "token_period_ms": TOKEN_PERIOD_MS, "samples_per_token": SAMPLES_PER_TOKEN,
        "frames_per_token": FRAMES_PER_TOKEN, "startup_policy": profile.startup_policy,
        "startup_tokens": profile.startup_tokens, "delay_ms": profile.delay_ms,
        "delay_tokens": profile.delay_tokens, "left_pad_tokens": profile.left_pad_tokens,
        "eof_drain_tokens": profile.eof_drain_tokens, "right_pad_tokens": profile.right_pad_tokens,
        "rolling_context_tokens": profile.context_tokens, "rolling_trim_tokens": profile.trim_tokens,
        "rolling_stable_prefix_tokens": profile.stable_prefix_tokens, "batch_windows": profile.batch,
        "first_batch_windows": profile.first_batch, "model_sha256": model.sha256,
        "vocab_size": model.vocab_size, "cache_bytes_per_token": model.cache_bytes_per_token,
        "cache_allocated_bytes": model.cache_bytes_per_token * profile.context_tokens,
        "phase_names": list(PHASES),
    }
