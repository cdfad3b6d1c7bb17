"""The control archive: JSON lines of control measurements with their definition, appended and never rewritten.

Each row is one control value (one start, cell, metric and repeat) with the
full *definition* it was measured under: registration key, cell, metric,
control config, commit, machine id, and (schema 2) the workload's SHA-256,
the graph's SHA-256 and the clock source, read from the control start's
fingerprint (``workload_sha256``, ``graph_sha256``, ``clock_source``).
Schema-1 rows are still read, with those three as ``"unrecorded"``: a
definition of their own.  Dates are UTC.  The day-to-day
spread of a definition is computed only from rows with that exact definition,
so a new commit, a new machine or a new registration version starts a new
history instead of silently widening an old one.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from .. import atomic
from ..errors import EvidenceError
from ..hashing import canonical_json, sha256_json
from .evidence import CONTROL, Start
from .registration import Registration

SCHEMA_VERSION = 2
UNRECORDED = "unrecorded"
CONTEXT_KEYS = {"workload": "workload_sha256", "graph": "graph_sha256", "clock": "clock_source"}
_DATE = re.compile(r"^\d{4}-\d\d-\d\d$")


class ArchiveError(EvidenceError):
    """An archive file or row is malformed, or an append would corrupt the file."""


def machine_id(fingerprint: Mapping[str, Any], keys: Iterable[str]) -> str:
    """A short digest of the fingerprint keys that must not change (a drift policy's ``equal`` keys).

    Readings that legitimately move (frequency, temperature, load) are left
    out, so the same machine keeps one id from day to day.
    """
    stable = {k: fingerprint[k] for k in sorted(set(keys)) if fingerprint.get(k) is not None}
    return sha256_json(stable)[:16]


@dataclass(frozen=True)
class Definition:
    """What makes two control values comparable; the archive never mixes two definitions."""

    registration: str
    cell: str
    metric: str
    config: str
    commit: str
    machine: str
    workload: str = UNRECORDED
    graph: str = UNRECORDED
    clock: str = UNRECORDED

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ArchiveRow:
    """One archived control value with its definition and provenance."""

    definition: Definition
    unit: str
    date: str
    window: str
    start: str
    repeat: int
    value: float

    def __post_init__(self):
        if not isinstance(self.definition, Definition):
            raise ArchiveError(f"archive row: definition must be a Definition, got {self.definition!r}")
        for name, value in asdict(self.definition).items():
            if not isinstance(value, str) or not value:
                raise ArchiveError(f"archive row: definition {name} must be a non-empty string, got {value!r}")
        for name in ("unit", "window", "start"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ArchiveError(f"archive row: {name} must be a non-empty string, got {getattr(self, name)!r}")
        if not isinstance(self.date, str) or not _DATE.match(self.date):
            raise ArchiveError(f"archive row: date must be YYYY-MM-DD (UTC), got {self.date!r}")
        if isinstance(self.repeat, bool) or not isinstance(self.repeat, int) or self.repeat < 0:
            raise ArchiveError(f"archive row: repeat must be an integer >= 0, got {self.repeat!r}")
        if (isinstance(self.value, bool) or not isinstance(self.value, (int, float)) or not math.isfinite(self.value)
                or self.value <= 0):
            raise ArchiveError(f"archive row: value must be a finite positive number, got {self.value!r}")

    def as_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, **self.definition.as_dict(), "unit": self.unit,
                "date": self.date, "window": self.window, "start": self.start, "repeat": self.repeat,
                "value": float(self.value)}

    @classmethod
    def from_dict(cls, data: Any) -> "ArchiveRow":
        if not isinstance(data, dict):
            raise ArchiveError(f"archive row must be an object, got {type(data).__name__}")
        version = data.get("schema_version")
        if version not in (1, SCHEMA_VERSION):
            raise ArchiveError(f"archive row schema_version {version!r} is not 1 or {SCHEMA_VERSION}")
        try:
            context = [data[f] if version == SCHEMA_VERSION else UNRECORDED for f in CONTEXT_KEYS]
            definition = Definition(*(data[f] for f in ("registration", "cell", "metric", "config", "commit",
                                                         "machine")), *context)
            return cls(definition, data["unit"], data["date"], data["window"], data["start"], data["repeat"],
                       data["value"])
        except KeyError as missing:
            raise ArchiveError(f"archive row lacks field {missing.args[0]!r}") from None


def context_of(fingerprint: Mapping[str, Any]) -> tuple[str, str, str]:
    """The workload, graph and clock source a start recorded in its fingerprint (``"unrecorded"`` if not)."""
    return tuple(str(fingerprint.get(key) or UNRECORDED) for key in CONTEXT_KEYS.values())  # type: ignore[return-value]


def control_rows(starts: Sequence[Start], registration: Registration, *, window: str, date: str,
                 machine_keys: Iterable[str]) -> list[ArchiveRow]:
    """Archive rows for every complete control start of ``registration`` (the candidate is never archived).

    Pure: the caller appends them with :func:`append`.  ``machine_keys``
    should be the drift policy's ``equal`` keys, which is what
    :func:`harness.winrule.rule.decide` uses to find a window's definition.  Values that are not
    finite and positive are left out (they could not be a control figure);
    the rule reports them.  A start without a commit is archived under
    commit ``"unknown"``, its own definition.
    """
    keys = tuple(machine_keys)
    rows: list[ArchiveRow] = []
    for start in starts:
        if start.role != CONTROL or not start.complete or start.registration != registration.key:
            continue
        machine = machine_id(start.fingerprint, keys)
        for cell in registration.cells:
            for metric in registration.metrics:
                for repeat, value in enumerate(start.series(cell, metric.name) or ()):
                    if not (math.isfinite(value) and value > 0):
                        continue
                    definition = Definition(registration.key, cell, metric.name, start.config,
                                            start.commit or "unknown", machine, *context_of(start.fingerprint))
                    rows.append(ArchiveRow(definition, metric.unit, date, window, start.label, repeat, value))
    return rows


def append(path: Path | str, rows: Sequence[ArchiveRow]) -> int:
    """Append ``rows`` as JSON lines in one write; returns how many were written.

    Everything is serialized before the file is opened, and a file whose last
    line is unterminated (a torn earlier write) is refused rather than
    extended, so an append can never merge two rows into one corrupt line.
    """
    for row in rows:
        if not isinstance(row, ArchiveRow):
            raise ArchiveError(f"append: {row!r} is not an ArchiveRow")
    if not rows:
        return 0
    data = "".join(canonical_json(row.as_dict()) + "\n" for row in rows).encode("utf-8")
    if not atomic.append_lines(path, data):
        raise ArchiveError(f"{path}: last line is unterminated; refusing to append to a torn archive")
    return len(rows)


def read(path: Path | str) -> tuple[ArchiveRow, ...]:
    """Every row of the archive at ``path`` (none when it does not exist); a bad line is an error naming it."""
    path = Path(path)
    if not path.exists():
        return ()
    rows: list[ArchiveRow] = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            if not line.endswith("\n"):
                raise ArchiveError(f"{path}:{number}: unterminated last line (a torn write)")
            try:
                rows.append(ArchiveRow.from_dict(json.loads(line)))
            except (json.JSONDecodeError, ArchiveError) as bad:
                raise ArchiveError(f"{path}:{number}: {bad}") from None
    return tuple(rows)


@dataclass(frozen=True)
class Spread:
    """The day-to-day spread of one definition: best daily mean over worst, minus one.

    ``spread`` is ``None`` with fewer than two days: one day says nothing
    about the next.  ``exceeds_required_effect`` says whether day-to-day
    variation alone is larger than the effect the rule is asked to detect.
    """

    definition: Definition
    rows: int
    days: int
    daily_means: tuple[tuple[str, float], ...]
    spread: float | None
    required_effect: float

    @property
    def exceeds_required_effect(self) -> bool | None:
        return None if self.spread is None else self.spread > self.required_effect

    def as_dict(self) -> dict[str, Any]:
        return {"definition": self.definition.as_dict(), "rows": self.rows, "days": self.days,
                "daily_means": [{"date": d, "mean": m} for d, m in self.daily_means],
                "spread_fraction": self.spread, "required_effect_fraction": self.required_effect,
                "exceeds_required_effect": self.exceeds_required_effect}


def day_to_day_spread(rows: Iterable[ArchiveRow], definition: Definition, required_effect: float) -> Spread:
    """Spread of the daily means of the rows whose definition is exactly ``definition``."""
    by_day: dict[str, list[float]] = defaultdict(list)
    count = 0
    for row in rows:
        if row.definition == definition:
            by_day[row.date].append(row.value)
            count += 1
    means = tuple((day, math.fsum(v) / len(v)) for day, v in sorted(by_day.items()))
    spread = None
    if len(means) >= 2:
        values = [m for _, m in means]
        spread = max(values) / min(values) - 1
    return Spread(definition, count, len(means), means, spread, required_effect)


def spreads(rows: Iterable[ArchiveRow], required_effect: float) -> list[Spread]:
    """The spread of every definition in ``rows``, one each, sorted by definition."""
    rows = list(rows)
    definitions = sorted({r.definition for r in rows}, key=lambda d: tuple(asdict(d).values()))
    return [day_to_day_spread(rows, d, required_effect) for d in definitions]
