"""The rolling KV cache's trim arithmetic: how many positions are cached, dropped and trimmed per window."""

from __future__ import annotations

from dataclasses import dataclass

from harness.streaming.profile import FRAMES_PER_TOKEN, StreamProfile


@dataclass(frozen=True)
class RollingState:
    """The cache after one window: positions held, positions ever dropped, trims so far."""

    cached: int = 0
    dropped: int = 0
    trims: int = 0


def roll(state: RollingState, incoming: int, context: int, trim: int) -> tuple[RollingState, int]:
    """Admit ``incoming`` positions; when they would overflow ``context``, first drop
    ``cached + incoming - context + trim - 1`` positions after the stable prefix.

    Returns the new state and the number dropped this step (0 when no trim happened).
    After a trim the cache holds ``context - trim + 1`` positions, so the next trim
    comes ``trim`` windows later.
    """
    cached, dropped, trims, drop = state.cached, state.dropped, state.trims, 0
    if cached + incoming > context:
        drop = cached + incoming - context + trim - 1
        cached -= drop
        dropped += drop
        trims += 1
    return RollingState(cached + incoming, dropped, trims), drop


@dataclass(frozen=True)
class WindowClock:
    """The positions window ``index`` must report."""

    index: int
    text_position: int
    encoder_position: int
    absolute_text_position: int
    absolute_encoder_position: int
    rolling_dropped_tokens: int
    rolling_trim_count: int
    dropped_now: int


def window_clocks(count: int, profile: StreamProfile) -> list[WindowClock]:
    """Expected clocks for ``count`` windows: startup prefill first, then one position each."""
    state, out = RollingState(), []
    for i in range(count):
        incoming = profile.startup_tokens if i == 0 else 1
        state, drop = roll(state, incoming, profile.context_tokens, profile.trim_tokens)
        absolute = profile.startup_tokens + i
        out.append(WindowClock(i, state.cached, state.cached * FRAMES_PER_TOKEN, absolute,
                               absolute * FRAMES_PER_TOKEN, state.dropped, state.trims, drop))
    return out


def crosses_trim(count: int, profile: StreamProfile) -> bool:
    """Whether ``count`` windows overflow the context, so at least one trim must happen."""
    return profile.startup_tokens + count - 1 > profile.context_tokens
