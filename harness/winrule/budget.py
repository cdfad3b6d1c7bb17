"""A window's time estimate before it starts, and the campaign's budget for it (pure).

The estimate multiplies what the registration fixes (three starts; in each, the warm-up generations of every
cell, then up to ``max_repeats`` repeats of ``waves_per_repeat`` waves of every cell) by a measured per-wave
cost: one generation per cell timed on each loaded probe just before the window
(:func:`harness.winrule.lane.time_waves`).  Repeats a resumed window reuses from its journal are not counted.
A window may stop at its first look; the budget (``[policy.winrule].max_window_seconds``) is held against the
most it can take, to ``max_repeats``, and the refusal states both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from .. import fmt
from ..errors import CampaignError
from ..fields import Where
from .registration import Registration


@dataclass(frozen=True)
class Budget:
    """The most seconds a campaign gives one window, and where it says so (file and field, for the refusal)."""

    seconds: float
    where: Where


@dataclass(frozen=True)
class Estimate:
    """Seconds a window will take: if it stops at its first look, and at most (to ``max_repeats``)."""

    first_look_s: float
    most_s: float
    waves: int          # measured generations at most, over the three starts
    warmups: int        # warm-up generations
    basis: str

    def render(self) -> str:
        return (f"{fmt.figure(self.most_s, 's')} at most ({fmt.figure(self.waves)} waves and "
                f"{fmt.figure(self.warmups)} warm-up generations over the three starts, to max_repeats; "
                f"{fmt.figure(self.first_look_s, 's')} if it stops at its first look); basis: {self.basis}")


def _per_wave(wave_s: Sequence[Mapping[str, float | None]], cells: Sequence[str]) -> list[dict[str, float]]:
    """Each lane's seconds per wave per cell; a lane that could not be timed takes the slowest timed lane's."""
    slowest = {c: max((w.get(c) for w in wave_s if w.get(c) is not None), default=0.0) for c in cells}
    return [{c: (w.get(c) if w.get(c) is not None else slowest[c]) for c in cells} for w in wave_s]


def _basis(wave_s: Sequence[Mapping[str, float | None]], cells: Sequence[str], done: Sequence[int]) -> str:
    spans = []
    for c in cells:
        timed = [w[c] for w in wave_s if w.get(c) is not None]
        span = "untimed" if not timed else fmt.figure(min(timed), "s") if min(timed) == max(timed) else \
            f"{fmt.figure(min(timed), 's')}-{fmt.figure(max(timed), 's')}"
        spans.append(f"{c} {span}")
    text = (f"one generation per cell timed on each of the {len(wave_s)} loaded probes just before the window "
            f"({', '.join(spans)} a wave)")
    if any(done):
        text += f"; {sum(done)} repeats recorded by an earlier attempt and reused are not counted"
    return text


def estimate(registration: Registration, wave_s: Sequence[Mapping[str, float | None]], warmup: int,
             done: Sequence[int] = ()) -> Estimate:
    """The window's estimate: ``wave_s[i][cell]`` is start i's timed generation of ``cell`` (None: untimed),
    ``done[i]`` the repeats start i already has from a journal (its process is new, so it warms up again)."""
    cells = registration.cells
    per = _per_wave(wave_s, cells)
    done = list(done) or [0] * len(per)

    def upto(look: int) -> tuple[float, int, int]:
        seconds, waves, warm = 0.0, 0, 0
        for lane, have in zip(per, done):
            todo = max(0, look - have) * registration.waves_per_repeat
            cold = warmup if todo else 0
            seconds += sum(lane[c] * (todo + cold) for c in cells)
            waves += todo * len(cells)
            warm += cold * len(cells)
        return seconds, waves, warm

    first, _, _ = upto(registration.looks[0])
    most, waves, warm = upto(registration.looks[-1])
    return Estimate(first, most, waves, warm, _basis(wave_s, cells, done))


def refusal(est: Estimate, budget_s: float | None, where: Where, window: str) -> CampaignError | None:
    """The error refusing a window whose estimate exceeds the budget (``where``: the budget's file and field),
    or None (no budget, or within it)."""
    if budget_s is None or est.most_s <= budget_s:
        return None
    return where.fail(f"the window {window!r} would take {est.render()}, over the budget of "
                      f"{fmt.figure(budget_s, 's')} ({where.field.rsplit('.', 1)[-1]} = {budget_s:g}); the window "
                      f"was not started: raise the budget, or lower repeats, max_repeats, waves_per_repeat or the cells")


__all__ = ["Budget", "Estimate", "estimate", "refusal"]
