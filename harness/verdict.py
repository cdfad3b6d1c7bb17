"""The Verdict every gate's pure rule returns: decided once, rendered to JSON and the terminal."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

PASS, FAIL, ERROR, SKIP = "pass", "fail", "error", "skip"
OUTCOMES = (PASS, FAIL, ERROR, SKIP)


@dataclass(frozen=True)
class Measurement:
    """One figure with its unit and, where it is a statistic, the count it rests on."""

    value: float | int | bool | str | None
    unit: str
    count: int | None = None

    def as_dict(self) -> dict[str, Any]:
        value = self.value
        if isinstance(value, float) and not math.isfinite(value):
            value = None  # JSON has no NaN; unknown is null
        return {"value": value, "unit": self.unit, "count": self.count}


@dataclass(frozen=True)
class Verdict:
    """A gate's decision: passed or not, every reason, and the figures it rests on.

    ``reasons`` lists each failed condition in words a user can act on; a passing
    verdict has none.  ``figures`` maps snake_case names with units in them to
    :class:`Measurement` objects.
    """

    passed: bool
    reasons: tuple[str, ...] = ()
    figures: dict[str, Measurement] = field(default_factory=dict)

    def __post_init__(self):
        if self.passed and self.reasons:
            raise ValueError("a passing verdict cannot carry failure reasons")
        if not self.passed and not self.reasons:
            raise ValueError("a failing verdict must say why")

    @classmethod
    def from_checks(cls, reasons, figures=None) -> "Verdict":
        reasons = tuple(reasons)
        return cls(passed=not reasons, reasons=reasons, figures=dict(figures or {}))

    def render(self) -> str:
        head = "PASS" if self.passed else "FAIL"
        lines = [head] + [f"  - {r}" for r in self.reasons]
        return "\n".join(lines)
