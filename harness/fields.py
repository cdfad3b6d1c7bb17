"""Small validators every campaign and policy parser shares, so each error names file, field and value.

A ``Where`` is a position in one file (``policy.winrule.repeats`` in ``campaigns/default.toml``);
each check returns the value it accepted or raises :class:`~harness.errors.CampaignError` saying
where, what was expected and what was found.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from .errors import CampaignError


@dataclass(frozen=True)
class Where:
    path: Path | str
    field: str

    def __str__(self) -> str:
        return f"{self.path}: {self.field}"

    def child(self, key: str | int) -> "Where":
        return Where(self.path, f"{self.field}[{key}]" if isinstance(key, int) else f"{self.field}.{key}")

    def fail(self, problem: str) -> CampaignError:
        return CampaignError(f"{self.path}: {self.field}: {problem}")


def table(where: Where, value: Any, allowed: Iterable[str] | None = None, required: Iterable[str] = ()) -> dict:
    """A TOML table with only ``allowed`` keys (when given) and every ``required`` key."""
    if not isinstance(value, dict):
        raise where.fail(f"expected a table, got {value!r}")
    if allowed is not None:
        allowed = set(allowed)
        unknown = sorted(set(value) - allowed)
        if unknown:
            raise where.fail(f"unknown key(s) {', '.join(unknown)} (allowed: {', '.join(sorted(allowed))})")
    for key in required:
        if key not in value:
            raise where.fail(f"missing required key {key!r}")
    return value


def integer(where: Where, value: Any, minimum: int | None = None, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise where.fail(f"expected an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise where.fail(f"must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise where.fail(f"must be <= {maximum}, got {value}")
    return value


def number(where: Where, value: Any, minimum: float | None = 0.0, maximum: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise where.fail(f"expected a finite number, got {value!r}")
    if minimum is not None and value < minimum:
        raise where.fail(f"must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise where.fail(f"must be <= {maximum}, got {value}")
    return float(value)


def text(where: Where, value: Any, choices: Iterable[str] | None = None) -> str:
    if not isinstance(value, str) or not value:
        raise where.fail(f"expected a non-empty string, got {value!r}")
    if choices is not None and value not in tuple(choices):
        raise where.fail(f"expected one of {', '.join(choices)}, got {value!r}")
    return value


def boolean(where: Where, value: Any) -> bool:
    if not isinstance(value, bool):
        raise where.fail(f"expected true or false, got {value!r}")
    return value


def sha256(where: Where, value: Any) -> str:
    if not isinstance(value, str) or len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise where.fail(f"expected a lowercase hex SHA-256, got {value!r}")
    return value


def strings(where: Where, value: Any, choices: Iterable[str] | None = None, nonempty: bool = True) -> tuple[str, ...]:
    if not isinstance(value, list) or (nonempty and not value):
        raise where.fail(f"expected a {'non-empty ' if nonempty else ''}list of strings, got {value!r}")
    out = tuple(text(where.child(i), v, choices) for i, v in enumerate(value))
    if len(set(out)) != len(out):
        raise where.fail(f"duplicated entry in {value!r}")
    return out
