"""The streaming profile's validation and the emission, deadline, batch and trim arithmetic."""

import pytest
from hypothesis import given, strategies as st

from harness.errors import HarnessError
from harness.streaming.profile import (SAMPLES_PER_TOKEN, ProfileError, StreamProfile, batch_bounds,
                                       emission_count, needs_eof, source_deadline_seconds, source_end_samples)
from harness.streaming.rolling import RollingState, crosses_trim, roll, window_clocks


def make(**kw):
    base = dict(name="p", startup="realtime", delay_ms=80, batch=1, context_tokens=64, trim_tokens=8)
    base.update(kw)
    return StreamProfile(**base)


@pytest.mark.parametrize("field,value,words", [
    ("startup", "eager", "startup"), ("delay_ms", 100, "delay_ms"), ("delay_ms", 160.0, "delay_ms"),
    ("batch", 3, "batch"), ("batch", True, "batch"), ("first_batch", 2, "first_batch"),
    ("trim_tokens", 0, "trim_tokens"), ("context_tokens", 30, "context_tokens"),
    ("stable_prefix_tokens", 40, "stable_prefix_tokens"), ("name", "", "name"),
])
def test_profile_refuses_bad_field(field, value, words):
    with pytest.raises(ProfileError, match=words):
        make(**{field: value})
    assert issubclass(ProfileError, HarnessError)


def test_profile_from_mapping_refuses_unknown_fields():
    with pytest.raises(ProfileError, match="unknown fields.*contex"):
        StreamProfile.from_mapping("x", {"startup": "hf", "delay_ms": 80, "batch": 1, "contex": 3},
                                   source="profiles.toml")


def test_startup_policies():
    rt, hf = make(delay_ms=240), make(startup="hf", delay_ms=240)
    assert (rt.delay_tokens, rt.startup_tokens, hf.startup_tokens) == (3, 17, 20)
    assert source_end_samples(0, rt) == SAMPLES_PER_TOKEN
    assert source_end_samples(0, hf) == 4 * SAMPLES_PER_TOKEN


@given(st.integers(1, 200_000), st.sampled_from(["realtime", "hf"]), st.sampled_from([80, 160, 240, 480]))
def test_emission_count_covers_audio_and_drain(samples, startup, delay):
    p = make(startup=startup, delay_ms=delay)
    n = emission_count(samples, p)
    slots = -(-samples // SAMPLES_PER_TOKEN)
    # The last emitted window sits on the last audio slot plus the delay plus the drain.
    assert p.startup_tokens + n - 1 == p.left_pad_tokens + slots + p.delay_tokens + p.eof_drain_tokens
    assert n == slots + p.eof_drain_tokens + (p.delay_tokens if startup == "realtime" else 0)
    # Every window that needs audio beyond the input is an EOF window; the first such comes after real audio.
    eof = [needs_eof(i, samples, p) for i in range(n)]
    assert eof == sorted(eof) and eof[-1]
    assert all(source_deadline_seconds(i, samples, p) <= samples / 16000 for i in range(n))


def test_batch_bounds():
    assert batch_bounds(10, make(batch=4)) == [(0, 1), (1, 5), (5, 9), (9, 10)]
    assert batch_bounds(1, make(batch=2)) == [(0, 1)]


@given(st.integers(20, 80), st.integers(1, 10), st.integers(1, 300))
def test_trim_arithmetic(context, trim, count):
    p = make(context_tokens=max(context, 17 + 16 + trim), trim_tokens=trim)
    clocks = window_clocks(count, p)
    trim_at = [c.index for c in clocks if c.dropped_now]
    for c in clocks:
        assert 0 < c.text_position <= p.context_tokens
        assert c.absolute_text_position == c.text_position + c.rolling_dropped_tokens
    for c in clocks:
        if c.dropped_now:
            assert c.text_position == p.context_tokens - p.trim_tokens + 1
    assert all(b - a == p.trim_tokens for a, b in zip(trim_at, trim_at[1:]))
    assert bool(trim_at) == crosses_trim(count, p)


def test_roll_drop_formula():
    state, drop = roll(RollingState(cached=64, dropped=0, trims=0), 1, context=64, trim=8)
    assert drop == 64 + 1 - 64 + 8 - 1 and state == RollingState(57, 8, 1)
