"""Small validators every campaign and policy parser shares, so each error names file, field and value.

A ``Where`` is a position in one file (``policy.winrule.repeats`` in ``campaigns/default.toml``);
each check returns the value it accepted or raises :class:`~harness.errors.CampaignError` saying
where, what was expected and what was found.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import MISSING, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

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


# --- a dataclass is its own parser ---------------------------------------------------------------------------------
#
# A policy (or any frozen dataclass a campaign table fills) declares each key as a field; the field's type says how
# its value is read and ``knob(...)`` metadata adds bounds, choices and the rare custom reader.  ``parse_fields``
# reads a table into the dataclass: unknown keys refused, required keys demanded, every error naming file, field and
# value.

_KNOB = "gatehouse.knob"
_DEFAULT_LOW = object()   # "the type's usual lower bound": 0.0 for numbers, none for integers


@dataclass(frozen=True)
class Knob:
    lo: Any = _DEFAULT_LOW
    hi: Any = None
    choices: tuple[str, ...] | None = None       # a string's (or each listed string's, or each table value's) choices
    keys: Callable[[str], bool] | None = None      # a table field: which keys are allowed (the message says ``keys_doc``)
    keys_doc: str = ""
    nonempty: bool = True                          # a list field: must it name at least one entry
    required: bool = False                         # the table must have this key
    read: Callable[[Where, Any], Any] | None = None  # a reader of its own, for a shape the type cannot say
    internal: bool = False                         # not a campaign key: set by the parser (``finish``) or the code
    refers: str | None = None                      # names something of the campaign (a table's keys, a list's entries,
                                                   # a string): "model", "cell"; resolved when the campaign loads


def knob(default: Any = MISSING, *, default_factory: Any = MISSING, **kw: Any) -> Any:
    """A dataclass field with its campaign reading rules (see :class:`Knob`)."""
    return field(default=default, default_factory=default_factory, metadata={_KNOB: Knob(**kw)})


def _knob(f) -> Knob:
    return f.metadata.get(_KNOB) or Knob()


def _low(k: Knob, usual):
    return usual if k.lo is _DEFAULT_LOW else k.lo


def read_value(where: Where, value: Any, hint: Any, k: Knob) -> Any:
    """One value by its type hint: bool, int, float, str, ``X | None``, ``tuple[str|int, ...]``, ``dict[str, V]``
    and nested dataclasses."""
    if k.read is not None:
        return k.read(where, value)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return read_value(where, value, inner[0], k)
        raise TypeError(f"{where}: cannot read a field of type {hint!r} without a reader")
    if hint is bool:
        return boolean(where, value)
    if hint is int:
        return integer(where, value, _low(k, None), k.hi)
    if hint is float:
        return number(where, value, _low(k, 0.0), k.hi)
    if hint is str:
        return text(where, value, k.choices)
    if origin is tuple and args and args[-1] is Ellipsis:
        if args[0] is str:
            return strings(where, value, k.choices, nonempty=k.nonempty)
        if not isinstance(value, list) or (k.nonempty and not value):
            raise where.fail(f"expected a {'non-empty ' if k.nonempty else ''}list, got {value!r}")
        return tuple(read_value(where.child(i), v, args[0], Knob(k.lo, k.hi, k.choices)) for i, v in enumerate(value))
    if origin is dict and args and args[0] is str:
        out = {}
        for key, v in table(where, value).items():
            if k.keys is not None and not k.keys(key):
                raise where.child(key).fail(f"{k.keys_doc or 'unexpected key'}, got {key!r}")
            out[key] = read_value(where.child(key), v, args[1], Knob(k.lo, k.hi, k.choices))
        return out
    if dataclasses.is_dataclass(hint):
        return parse_fields(hint, value, where)
    raise TypeError(f"{where}: cannot read a field of type {hint!r} without a reader")


def references(obj: Any, where: Where) -> list[tuple[Where, str, str]]:
    """Every campaign name a parsed dataclass refers to, as (where, kind, name): each ``knob(refers=kind)``
    field's table keys, list entries or string.  The campaign resolves them once all its tables are read."""
    out = []
    for f in dataclasses.fields(obj):
        kind, value = _knob(f).refers, getattr(obj, f.name)
        if kind is None or value is None:
            continue
        at = where.child(f.name)
        if isinstance(value, (dict, tuple, list)):
            out += [(at.child(k), kind, k) for k in value] if isinstance(value, dict) else \
                   [(at.child(i), kind, v) for i, v in enumerate(value)]
        else:
            out.append((at, kind, value))
    return out


def parse_fields(cls: type, raw: Any, where: Where) -> Any:
    """A dataclass from a table: each campaign key a field of ``cls``, read by its type and :func:`knob` rules;
    ``cls.finish(values, where)`` (when defined) checks across fields and may set internal ones."""
    hints = typing.get_type_hints(cls)
    fs = [f for f in dataclasses.fields(cls) if f.init and not _knob(f).internal]
    required = [f.name for f in fs if _knob(f).required or (f.default is MISSING and f.default_factory is MISSING)]
    table(where, raw, [f.name for f in fs], required)
    values = {f.name: read_value(where.child(f.name), raw[f.name], hints[f.name], _knob(f)) for f in fs if f.name in raw}
    finish = getattr(cls, "finish", None)
    if finish is not None:
        values = finish(values, where)
    return cls(**values)
