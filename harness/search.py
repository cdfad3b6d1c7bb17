"""The recipe search's early stop (``[search]``): a recipe that fails a cheap gate is not timed.

Olive and Intel Neural Compressor search recipes goals first, then speed among the models that meet
them; Gatehouse's gates are the goals. The plugin runs every recipe's screening gates (held-out loss, the
cache check, behavior parity with its greedy agreement) before any timing, in the recipes' expected-cost
order, and skips a recipe's timed tests (every ``exclusive`` gate test: the lanes, step latency) once one
of its screening gates has failed or errored. The skip is a receipt (outcome ``skip``, the screening
gate and its first reason); the failed screening receipt is the evidence. The campaign's fixed dtypes are
always timed (they are the baseline the recipes are compared with), and so is everything under
``--no-early-stop`` (to measure the campaign's wall time without the stop).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

from . import fields
from .fields import Where

DEFAULT_SCREEN = ("quantization", "cache", "behavior")


@dataclass(frozen=True)
class SearchPolicy:
    early_stop: bool = True
    screen: tuple[str, ...] = DEFAULT_SCREEN

    @classmethod
    def parse(cls, raw: Any, where: Where) -> "SearchPolicy":
        if raw is None:
            return cls()
        from . import gates

        fields.table(where, raw, {"early_stop", "screen"})
        screen = raw.get("screen", list(DEFAULT_SCREEN))
        screen = fields.strings(where.child("screen"), screen, tuple(gates.GATES), nonempty=False)
        for name in screen:
            spec = gates.GATES[name]
            if spec.level != "variant" or "recipe" not in spec.applies_to:
                raise where.child("screen").fail(f"{name!r} does not judge recipes (a variant-level gate whose "
                                                  f"applies_to names \"recipe\" screens them)")
        return cls(early_stop=fields.boolean(where.child("early_stop"), raw.get("early_stop", True)),
                   screen=tuple(screen))

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "screen": list(self.screen)}


def stop_reason(outcomes: Mapping[str, tuple[str, str]], policy: SearchPolicy) -> str | None:
    """Why a recipe is not timed: ``outcomes`` maps each of its screening gates already decided this run to
    (outcome, first reason); the first failed or errored one in the policy's order, or None."""
    if not policy.early_stop:
        return None
    for gate in policy.screen:
        outcome, reason = outcomes.get(gate, (None, ""))
        if outcome in ("fail", "error"):
            said = {"fail": "failed", "error": "errored"}[outcome]
            return f"early stop: {gate} {said}" + (f" ({reason})" if reason else "")
    return None


def order(items: list, key_of) -> list:
    """Items in run order: every recipe's screening test first (stable), then everything else as collected.
    ``key_of(item)`` is True for a recipe's screening test."""
    first = [i for i in items if key_of(i)]
    return first + [i for i in items if not key_of(i)]
