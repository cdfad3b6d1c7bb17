"""The registration of an A/B/A measurement: what is measured, how often, and what counts as an effect."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

from ..errors import EvidenceError

_NAME = re.compile(r"^[a-z0-9][a-z0-9_.\-]*$")
SEED_POLICIES = ("matched", "fresh", "greedy")


class RegistrationError(EvidenceError):
    """A registration (or a metric in it) is malformed; nothing can be decided under it."""


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise RegistrationError(f"{what} must be a lower-case name such as 'short-decode', got {value!r}")
    return value


def _fraction(value: Any, what: str, *, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 < value < 1:
        raise RegistrationError(f"{what} must be a fraction strictly between 0 and 1, got {value!r}")
    return float(value)


def _count(value: Any, what: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise RegistrationError(f"{what} must be an integer >= {minimum}, got {value!r}")
    return value


@dataclass(frozen=True)
class Metric:
    """One measured quantity with the direction that counts as better.

    ``required_effect`` overrides the registration's effect for this metric only
    (a guard may be allowed to move less, or more, than the primary before it
    counts as a loss); ``None`` uses the registration's.
    """

    name: str
    unit: str
    higher_is_better: bool
    required_effect: float | None = None

    def __post_init__(self):
        _name(self.name, "metric name")
        if not isinstance(self.unit, str) or not self.unit:
            raise RegistrationError(f"metric {self.name!r}: unit must be a non-empty string, got {self.unit!r}")
        if not isinstance(self.higher_is_better, bool):
            raise RegistrationError(
                f"metric {self.name!r}: higher_is_better must be a bool, got {self.higher_is_better!r}")
        _fraction(self.required_effect, f"metric {self.name!r}: required_effect", allow_none=True)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "unit": self.unit, "higher_is_better": self.higher_is_better,
                "required_effect_fraction": self.required_effect}

    @classmethod
    def from_dict(cls, data: Any) -> "Metric":
        if not isinstance(data, dict):
            raise RegistrationError(f"a metric must be an object, got {data!r}")
        try:
            return cls(data["name"], data["unit"], data["higher_is_better"], data.get("required_effect_fraction"))
        except KeyError as missing:
            raise RegistrationError(f"metric {data.get('name')!r} lacks field {missing.args[0]!r}") from None


@dataclass(frozen=True)
class Registration:
    """Everything fixed before the first start runs, so that nothing can be chosen after seeing the data.

    A registration names the decision ``cells`` (workloads such as short-prompt
    and long-prompt decode), ``repeats`` per start and ``waves_per_repeat``
    (request waves pooled into one repeat value), the ``primary`` metric that
    decides, ``guards`` that can only veto (a guard LOSS blocks a WIN, a guard
    WIN adds nothing), ``reported`` metrics that never decide, the
    ``required_effect`` (fraction, 0.02 = 2 %), the one-sided ``alpha`` of the
    paired statistic, and the ``seeds`` policy: ``"matched"`` means wave w uses
    the same seed in all three starts (and distinct seeds across the waves of a
    cell), ``"fresh"`` means no seed may ever repeat, ``"greedy"`` means the
    lane decodes greedily and no wave may record a seed (a seed there would be
    a claim about sampling that did not happen).  Cache salts are always
    fresh: a repeated salt could let one start read another's cache.

    Adaptive repeats: ``max_repeats`` (default ``repeats``: no extra repeats)
    and ``step``: when a window is a TIE with no override, ``step`` more
    repeats are run in the same three starts (A, B, A again, so linear drift
    still cancels) and the window is decided again, up to ``max_repeats``.
    The looks are at ``repeats, repeats + step, ...``; each is decided at
    ``alpha / looks`` (:attr:`look_alpha`), so that stopping at the first
    decided look cannot raise the false-WIN rate above ``alpha``.

    ``numerics_changing`` declares a candidate that is *meant* to compute
    different tokens (a quantized graph against its float control): its
    greedy ids may then differ from the controls' only when the behavior
    gate's passing verdict for that candidate is attached to the decision.

    ``prompts`` is the registered wave schedule: per cell, the SHA-256 of the
    frozen prompt of every wave up to ``max_repeats`` (distinct within a
    cell); a start fed anything else is not evidence for this registration.
    ``None`` registers no schedule (only matched inputs are checked).

    ``max_off_off`` is the ceiling on the OFF/OFF spread of the primary (the
    last control's mean over the first's): beyond it the machine changed too
    much during the window to decide anything, whatever the verdict.  Below
    it, the spread voids a WIN or LOSS only when it could explain the effect
    (:func:`harness.winrule.rule.drift_could_explain`).

    ``(name, version)`` is the identity: a start recorded under another key is
    not evidence for this one, and the archive never mixes the two.
    """

    name: str
    version: int
    cells: tuple[str, ...]
    repeats: int
    waves_per_repeat: int
    primary: Metric
    guards: tuple[Metric, ...] = ()
    reported: tuple[Metric, ...] = ()
    required_effect: float = 0.02
    alpha: float = 0.05
    seeds: str = "matched"
    max_repeats: int | None = None
    step: int | None = None
    numerics_changing: bool = False
    prompts: Mapping[str, tuple[str, ...]] | None = None
    max_off_off: float = 0.15

    def __post_init__(self):
        _name(self.name, "registration name")
        _count(self.version, f"registration {self.name!r}: version", 1)
        object.__setattr__(self, "cells", tuple(self.cells))
        object.__setattr__(self, "guards", tuple(self.guards))
        object.__setattr__(self, "reported", tuple(self.reported))
        if not self.cells:
            raise RegistrationError(f"registration {self.name!r}: at least one decision cell is required")
        for cell in self.cells:
            _name(cell, f"registration {self.name!r}: cell")
        if len(set(self.cells)) != len(self.cells):
            raise RegistrationError(f"registration {self.name!r}: cells repeat: {list(self.cells)}")
        # Two repeats are the fewest that give the paired statistic a variance (one degree of freedom).
        _count(self.repeats, f"registration {self.name!r}: repeats", 2)
        _count(self.waves_per_repeat, f"registration {self.name!r}: waves_per_repeat", 1)
        for metric in self.metrics:
            if not isinstance(metric, Metric):
                raise RegistrationError(f"registration {self.name!r}: {metric!r} is not a Metric")
        names = [m.name for m in self.metrics]
        if len(set(names)) != len(names):
            raise RegistrationError(f"registration {self.name!r}: metric names repeat: {names}")
        _fraction(self.required_effect, f"registration {self.name!r}: required_effect")
        if not isinstance(self.alpha, float) or not 0 < self.alpha <= 0.25:
            raise RegistrationError(
                f"registration {self.name!r}: alpha must be a float in (0, 0.25], got {self.alpha!r}")
        _fraction(self.max_off_off, f"registration {self.name!r}: max_off_off")
        if self.max_repeats is not None:
            _count(self.max_repeats, f"registration {self.name!r}: max_repeats", self.repeats)
        if self.step is not None:
            _count(self.step, f"registration {self.name!r}: step", 1)
        if not isinstance(self.numerics_changing, bool):
            raise RegistrationError(
                f"registration {self.name!r}: numerics_changing must be a bool, got {self.numerics_changing!r}")
        if self.prompts is not None:
            if not isinstance(self.prompts, Mapping) or set(self.prompts) != set(self.cells):
                raise RegistrationError(f"registration {self.name!r}: prompts must map every cell "
                                        f"{list(self.cells)} to its waves' prompt SHA-256s, got {self.prompts!r}")
            frozen = {}
            for cell in self.cells:
                shas = tuple(self.prompts[cell])
                need = self.looks[-1] * self.waves_per_repeat
                if len(shas) != need or not all(isinstance(h, str) and re.fullmatch(r"[0-9a-f]{64}", h) for h in shas):
                    raise RegistrationError(f"registration {self.name!r}: prompts[{cell!r}] must list {need} SHA-256s "
                                            f"(max_repeats x waves_per_repeat), got {list(shas)[:3]}...")
                if len(set(shas)) != len(shas):
                    raise RegistrationError(f"registration {self.name!r}: prompts[{cell!r}] repeat a prompt: every "
                                            f"wave needs a distinct frozen prompt")
                frozen[cell] = shas
            object.__setattr__(self, "prompts", MappingProxyType(frozen))
        if self.seeds not in SEED_POLICIES:
            raise RegistrationError(
                f"registration {self.name!r}: seeds must be one of {SEED_POLICIES}, got {self.seeds!r}")

    @property
    def key(self) -> str:
        """The identity a start must carry: ``name@version``."""
        return f"{self.name}@{self.version}"

    @property
    def metrics(self) -> tuple[Metric, ...]:
        """Primary first, then guards, then reported metrics."""
        return (self.primary, *self.guards, *self.reported)

    @property
    def waves(self) -> int:
        return self.repeats * self.waves_per_repeat

    @property
    def looks(self) -> tuple[int, ...]:
        """The repeat counts at which the window is decided: ``repeats``, then ``step`` more, up to ``max_repeats``."""
        cap = self.repeats if self.max_repeats is None else self.max_repeats
        step = self.repeats if self.step is None else self.step
        out = [self.repeats]
        while out[-1] + step <= cap:
            out.append(out[-1] + step)
        return tuple(out)

    @property
    def look_alpha(self) -> float:
        """The one-sided alpha of each look: ``alpha / len(looks)`` (Bonferroni over the registered looks)."""
        return self.alpha / len(self.looks)

    def metric(self, name: str) -> Metric:
        for metric in self.metrics:
            if metric.name == name:
                return metric
        raise RegistrationError(f"registration {self.key!r} has no metric {name!r}")

    def role(self, name: str) -> str:
        """``primary``, ``guard`` or ``reported``."""
        if name == self.primary.name:
            return "primary"
        if any(m.name == name for m in self.guards):
            return "guard"
        self.metric(name)
        return "reported"

    def effect(self, metric: Metric) -> float:
        return self.required_effect if metric.required_effect is None else metric.required_effect

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "version": self.version, "key": self.key, "cells": list(self.cells),
            "repeats": self.repeats, "waves_per_repeat": self.waves_per_repeat,
            "primary": self.primary.as_dict(), "guards": [m.as_dict() for m in self.guards],
            "reported": [m.as_dict() for m in self.reported],
            "required_effect_fraction": self.required_effect, "alpha": self.alpha, "seeds": self.seeds,
            "max_repeats": self.max_repeats, "step": self.step, "looks": list(self.looks),
            "look_alpha": self.look_alpha, "numerics_changing": self.numerics_changing,
            "prompts": None if self.prompts is None else {c: list(v) for c, v in self.prompts.items()},
            "max_off_off_fraction": self.max_off_off,
        }

    @classmethod
    def from_dict(cls, data: Any) -> "Registration":
        """Rebuild from :meth:`as_dict` output (or a campaign file holding the same fields)."""
        if not isinstance(data, dict):
            raise RegistrationError(f"a registration must be an object, got {data!r}")
        try:
            return cls(
                name=data["name"], version=data["version"], cells=tuple(data["cells"]),
                repeats=data["repeats"], waves_per_repeat=data["waves_per_repeat"],
                primary=Metric.from_dict(data["primary"]),
                guards=tuple(Metric.from_dict(m) for m in data.get("guards", ())),
                reported=tuple(Metric.from_dict(m) for m in data.get("reported", ())),
                required_effect=data.get("required_effect_fraction", 0.02),
                alpha=data.get("alpha", 0.05), seeds=data.get("seeds", "matched"),
                max_repeats=data.get("max_repeats"), step=data.get("step"),
                numerics_changing=data.get("numerics_changing", False), prompts=data.get("prompts"),
                max_off_off=data.get("max_off_off_fraction", 0.15))
        except KeyError as missing:
            raise RegistrationError(f"registration {data.get('name')!r} lacks field {missing.args[0]!r}") from None
        except TypeError as bad:
            raise RegistrationError(f"registration {data.get('name')!r}: {bad}") from None
