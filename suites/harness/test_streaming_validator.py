"""The streaming validator accepts a valid log and rejects every mutation of it, each with its reason."""

import copy
import math

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from harness.streaming.profile import StreamProfile, emission_count
from harness.streaming.protocol import ModelIdentity
from harness.streaming.synthetic import event_log
from harness.streaming.tokens import TokenTable
from harness.streaming.validate import validate

TABLE = TokenTable.from_words(["zero", "one", "two", "three", "stop", "go"])
MODEL = ModelIdentity(sha256="ab" * 32, vocab_size=TABLE.size, cache_bytes_per_token=2 * 2 * 64 * 4)
PROFILES = [
    StreamProfile("rt80b1", "realtime", 80, 1, 48, 6),
    StreamProfile("hf160b2", "hf", 160, 2, 48, 4),
    StreamProfile("rt480b4", "realtime", 480, 4, 64, 8),
]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def logs(draw, min_samples=400, max_samples=60_000):
    profile = draw(st.sampled_from(PROFILES))
    samples = draw(st.integers(min_samples, max_samples))
    n = emission_count(samples, profile)
    ids = draw(st.lists(st.integers(0, TABLE.size - 1), min_size=n, max_size=n))
    return profile, samples, event_log(profile, samples, ids, MODEL, TABLE)


def check(events, profile, samples, **kw):
    return validate(events, profile, samples=samples, model=MODEL, table=TABLE, **kw)


@SETTINGS
@given(logs())
def test_valid_log_passes(case):
    profile, samples, events = case
    verdict = check(events, profile, samples)
    assert verdict.passed, verdict.render()


def test_long_log_must_cross_trim():
    p = PROFILES[0]
    short = 16_000
    ids = [0] * emission_count(short, p)
    verdict = check(event_log(p, short, ids, MODEL, TABLE), p, short, require_trim=True)
    assert not verdict.passed and any("cross a rolling trim" in r for r in verdict.reasons)
    long = 16_000 * 8
    ids = [1] * emission_count(long, p)
    assert check(event_log(p, long, ids, MODEL, TABLE), p, long, require_trim=True).passed


def rejected(events, profile, samples, what):
    verdict = check(events, profile, samples)
    assert not verdict.passed, f"mutation not rejected: {what}"
    assert all(isinstance(r, str) and r for r in verdict.reasons)
    return verdict


@SETTINGS
@given(logs(), st.data())
def test_dropping_any_event_is_rejected(case, data):
    profile, samples, events = case
    i = data.draw(st.integers(0, len(events) - 1))
    rejected(events[:i] + events[i + 1:], profile, samples, f"drop #{i} {events[i]['kind']}")


@SETTINGS
@given(logs(), st.data())
def test_duplicating_any_event_is_rejected(case, data):
    profile, samples, events = case
    i = data.draw(st.integers(0, len(events) - 1))
    j = data.draw(st.integers(0, len(events)))
    mutated = events[:j] + [copy.deepcopy(events[i])] + events[j:]
    rejected(mutated, profile, samples, f"duplicate #{i} at {j}")


@SETTINGS
@given(logs(), st.data())
def test_reordering_events_is_rejected(case, data):
    profile, samples, events = case
    i = data.draw(st.integers(0, len(events) - 2))
    j = data.draw(st.integers(i + 1, len(events) - 1))
    mutated = list(events)
    mutated[i], mutated[j] = mutated[j], mutated[i]
    rejected(mutated, profile, samples, f"swap #{i} {events[i]['kind']} and #{j} {events[j]['kind']}")


# Fields whose values follow exactly from the profile, the input and the ids: any change is detectable.
EXACT = {
    "ready": ["startup_tokens", "delay_ms", "rolling_context_tokens", "rolling_trim_tokens", "batch_windows",
              "rolling_stable_prefix_tokens", "cache_allocated_bytes", "vocab_size", "retained_audio_capacity_samples"],
    "window": ["text_position", "encoder_position", "absolute_text_position", "absolute_encoder_position",
               "processed_absolute_encoder_position", "rolling_dropped_tokens", "rolling_trim_count",
               "cache_logical_bytes"],
    "batch": ["start_window", "end_window_exclusive", "decoder_cached_tokens", "rolling_trim_count",
              "cache_allocated_bytes", "retained_audio_capacity_samples"],
    "complete": ["audio_samples", "emitted_tokens", "text_bytes", "visible_tokens", "skipped_tokens",
                 "peak_cache_allocated_bytes", "retained_audio_capacity_samples"],
}
# Clocks in seconds that the validator recomputes from other fields.
SECONDS = {
    "batch": ["started_seconds", "finished_seconds", "work_seconds", "source_audio_ready_seconds",
              "relative_to_audio_clock_seconds"],
    "complete": ["elapsed_seconds", "input_eof_detected_seconds", "completion_after_eof_detected_seconds",
                 "completion_relative_to_audio_clock_seconds", "batch_work_seconds", "input_seconds",
                 "audio_seconds"],
    "text_delta": ["seconds"],
}


def _targets(events, table):
    return [(n, f) for n, e in enumerate(events) for f in table.get(e["kind"], [])]


@SETTINGS
@given(logs(), st.data(), st.integers(1, 5), st.booleans())
def test_changing_a_count_or_cache_size_is_rejected(case, data, k, negative):
    profile, samples, events = case
    n, field = data.draw(st.sampled_from(_targets(events, EXACT)))
    mutated = copy.deepcopy(events)
    mutated[n][field] += -k if negative else k
    rejected(mutated, profile, samples, f"{field} of #{n} {events[n]['kind']} by {'-' if negative else '+'}{k}")


@SETTINGS
@given(logs(), st.data(), st.floats(1e-3, 5.0), st.booleans())
def test_shifting_a_clock_is_rejected(case, data, delta, negative):
    profile, samples, events = case
    n, field = data.draw(st.sampled_from(_targets(events, SECONDS)))
    mutated = copy.deepcopy(events)
    mutated[n][field] += -delta if negative else delta
    rejected(mutated, profile, samples, f"{field} of #{n} {events[n]['kind']} by {delta}")


@SETTINGS
@given(logs(), st.data(), st.booleans())
def test_moving_a_window_out_of_its_batch_is_rejected(case, data, negative):
    profile, samples, events = case
    n = data.draw(st.sampled_from([n for n, e in enumerate(events) if e["kind"] == "window"]))
    mutated = copy.deepcopy(events)
    elapsed = events[-1]["elapsed_seconds"]
    mutated[n]["seconds"] += -(elapsed + 1) if negative else elapsed + 1
    rejected(mutated, profile, samples, f"window #{n} seconds shifted")


@SETTINGS
@given(logs(min_samples=16_000))
def test_changing_a_token_or_its_text_is_rejected(case):
    profile, samples, events = case
    w = next(n for n, e in enumerate(events) if e["kind"] == "window")
    mutated = copy.deepcopy(events)
    mutated[w]["token_id"] = (mutated[w]["token_id"] + 1) % TABLE.size
    rejected(mutated, profile, samples, "token id changed")
    deltas = [n for n, e in enumerate(events) if e["kind"] == "text_delta"]
    if deltas:
        mutated = copy.deepcopy(events)
        mutated[deltas[0]]["text"] += "x"
        verdict = rejected(mutated, profile, samples, "delta text changed")
        assert any(r.startswith("text deltas") for r in verdict.reasons)


def test_each_violation_has_its_own_reason():
    p, samples = PROFILES[1], 20_000
    ids = [2] * emission_count(samples, p)
    events = event_log(p, samples, ids, MODEL, TABLE)
    events[0]["delay_ms"] = 240
    for e in events:
        if e["kind"] == "batch":
            e["cache_allocated_bytes"] += 4
    events[-1]["generated_ids_sha256"] = "0" * 64
    verdict = check(events, p, samples)
    text = verdict.render()
    assert "ready profile: ready delay_ms=240" in text
    assert "cache allocation:" in text and "id digest:" in text
    assert len(verdict.reasons) == len(set(r.split(":")[0] for r in verdict.reasons))


def test_malformed_input_is_a_reason_not_a_crash():
    p = PROFILES[0]
    assert "no events" in check([], p, 1000).render()
    verdict = check([{"kind": "ready"}, "junk", {"kind": "window", "index": "0"}, {"kind": "mystery"}], p, 1000)
    assert not verdict.passed
    text = verdict.render()
    assert "event kind" in text and "malformed field" in text and "complete coverage" in text


def test_nan_clock_is_rejected():
    p, samples = PROFILES[0], 5000
    events = event_log(p, samples, [0] * emission_count(samples, p), MODEL, TABLE)
    next(e for e in events if e["kind"] == "batch")["work_seconds"] = math.nan
    assert "not a finite number" in check(events, p, samples).render()
