"""The comparison's policy: alpha, the minimum samples per side, and the regression thresholds that fail it.

Read from a campaign's optional ``[compare]`` table (``harness.campaign``) and overridden on the command
line (``--alpha``, ``--min-samples``, ``--fail-on``)::

    [compare]
    alpha = 0.01                          # family-wise, after Holm's correction
    min_samples = 5                       # per-repeat samples per side below which no test is made
    fail_on = ["verdict", "decode:5%"]    # the thresholds whose crossing makes `compare` exit 1
    max_foreign_cpu = 0.10                # a timing during which other processes took more CPU is not tested
    session_spread = 0.30                 # one run per side: a change smaller than this is never a regression

The ``fail_on`` grammar (the CLI takes the same, comma-separated or repeated; ``none`` alone for nothing):

- ``verdict``: a gate flipped from pass to fail (or error), or a gate's receipt disappeared;
- ``decode:N%``: a decode throughput drop significant after Holm's correction *and* larger than N %;
- ``loss:N%``: the held-out relative loss increase grew by more than N percentage points;
- ``quality:N``: the behavior quality index fell by more than N points (of 100);
- ``time:N%``: the run's own test time grew by more than N %, in total or for one gate taking at least a minute
  (the tool's time: compare warm runs with warm runs; each side's cold builds are listed beside it).

Imports nothing of Gatehouse's but :mod:`harness.fields`, so the campaign loader can parse the table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from .. import fields
from ..fields import Where

TIME_FLOOR_S = 60.0   # a gate's time is compared only from this many seconds on (shorter ones are noise)
KINDS = ("verdict", "decode", "loss", "quality", "time")
GRAMMAR = ("verdict, decode:N% (a significant decode drop larger than N %), loss:N% (the held-out relative loss "
           "increase grew by more than N percentage points), quality:N (the quality index fell by more than N points), "
           "time:N% (the run's own test time grew by more than N %), or none")
_PERCENT = re.compile(r"^(decode|loss|time):([0-9]+(?:\.[0-9]*)?|\.[0-9]+)%$")
_POINTS = re.compile(r"^quality:([0-9]+(?:\.[0-9]*)?|\.[0-9]+)$")


@dataclass(frozen=True)
class Threshold:
    """One regression threshold: ``kind`` (one of :data:`KINDS`) and its limit: for ``decode`` and ``loss`` a
    fraction (``decode:5%`` is 0.05; ``loss:1%`` is one percentage point, 0.01), for ``quality`` points of
    100, for ``verdict`` None.  ``str()`` spells it as the grammar does."""

    kind: str
    limit: float | None = None

    def __str__(self) -> str:
        if self.kind == "verdict":
            return "verdict"
        body = f"{self.limit * 100:g}%" if self.kind in ("decode", "loss", "time") else f"{self.limit:g}"
        return f"{self.kind}:{body}"

    def describe(self) -> str:
        """What crossing it means, in words (the report's list of thresholds)."""
        if self.kind == "verdict":
            return "a gate flipped pass → fail (or error), or a gate's receipt disappeared"
        if self.kind == "decode":
            return f"a decode throughput drop significant after Holm's correction and larger than {self.limit * 100:g} %"
        if self.kind == "time":
            return (f"the run's own test time grew by more than {self.limit * 100:g} %, in total or for a gate taking "
                    f"at least {TIME_FLOOR_S:g} s")
        if self.kind == "loss":
            return f"the held-out relative loss increase grew by more than {self.limit * 100:g} percentage points"
        return f"the behavior quality index fell by more than {self.limit:g} points"


def parse_threshold(where: Where, text: Any) -> Threshold:
    """One threshold spec (``verdict``, ``decode:5%``, ``loss:1%``, ``quality:5``); errors name where and
    the value and spell the grammar."""
    if not isinstance(text, str):
        raise where.fail(f"expected a threshold like 'decode:5%', got {text!r}")
    spec = text.strip()
    if spec == "verdict":
        return Threshold("verdict")
    m = _PERCENT.match(spec)
    if m:
        limit = float(m.group(2)) / 100
        if m.group(1) == "decode" and not 0 < limit < 1:
            raise where.fail(f"{text!r}: a decode drop must be above 0 % and below 100 %")
        return Threshold(m.group(1), limit)
    m = _POINTS.match(spec)
    if m:
        points = float(m.group(1))
        if points > 100:
            raise where.fail(f"{text!r}: the quality index has 100 points; a fall of more than {points:g} cannot happen")
        return Threshold("quality", points)
    kind = spec.split(":", 1)[0]
    if kind in ("decode", "loss", "time"):
        raise where.fail(f"{text!r}: {kind} takes a percentage, e.g. {kind}:5%")
    if kind == "quality":
        raise where.fail(f"{text!r}: quality takes points of the quality index without a % sign, e.g. quality:5")
    if kind == "verdict":
        raise where.fail(f"{text!r}: verdict takes no value")
    raise where.fail(f"{text!r} is not a threshold; expected {GRAMMAR}")


def parse_fail_on(where: Where, specs: Iterable[Any]) -> tuple[Threshold, ...]:
    """Thresholds from specs that may each hold several, comma-separated (``--fail-on verdict,decode:5%``
    and repeated options alike); ``none`` alone means none.  A kind given twice is refused."""
    parts: list[Any] = []
    for s in specs:
        parts += [p.strip() for p in s.split(",")] if isinstance(s, str) else [s]
    if any(p == "" for p in parts):
        raise where.fail(f"an empty threshold in {', '.join(map(str, specs))!r}; expected {GRAMMAR}")
    if "none" in parts:
        if len(parts) > 1:
            raise where.fail(f"'none' cannot be combined with other thresholds, got {', '.join(map(str, parts))!r}")
        return ()
    out = tuple(parse_threshold(where, p) for p in parts)
    kinds = [t.kind for t in out]
    twice = sorted({k for k in kinds if kinds.count(k) > 1})
    if twice:
        raise where.fail(f"{', '.join(twice)} given more than once in {', '.join(map(str, parts))!r}")
    return out


DEFAULT_FAIL_ON = (Threshold("verdict"), Threshold("decode", 0.05))


@dataclass(frozen=True)
class ComparePolicy:
    """How two runs are compared: ``alpha`` (family-wise, after Holm's correction across the throughput tests
    of one comparison), ``min_samples`` (per-repeat samples per side below which no rank test is made),
    ``fail_on`` (the thresholds whose crossing is a regression) and ``max_foreign_cpu`` (the share of the
    machine's CPU time other processes may have taken during a lane's timing, as the receipt's
    ``machine_during`` recorded it, for the lane to be tested: the win rule's sampled bound, 10 %, by default;
    a lane timed beside another session's work measures that work as much as its own) and ``session_spread``
    (the largest drop of one lane cell's median between two sessions of the same code on this machine: repeats
    within a session do not sample it, so a decode change must exceed it to be called; two or more runs on a
    side raise it when their own medians lie further apart).  The default, 30 %, is this VM's: six sessions of
    the same commit put one lane cell's median up to 26.7 % below another's (DEVELOPERS.md, "Comparing runs")."""

    alpha: float = 0.01
    min_samples: int = 5
    fail_on: tuple[Threshold, ...] = field(default=DEFAULT_FAIL_ON)
    max_foreign_cpu: float = 0.10
    session_spread: float = 0.30

    KEYS = ("alpha", "min_samples", "fail_on", "max_foreign_cpu", "session_spread")

    @classmethod
    def parse(cls, raw: Any, where: Where) -> "ComparePolicy":
        """The ``[compare]`` table (None: the defaults); unknown keys and bad values name file, field, value."""
        if raw is None:
            return cls()
        fields.table(where, raw, cls.KEYS)
        out: dict[str, Any] = {}
        if "alpha" in raw:
            out["alpha"] = alpha(where.child("alpha"), raw["alpha"])
        if "min_samples" in raw:
            out["min_samples"] = min_samples(where.child("min_samples"), raw["min_samples"])
        if "fail_on" in raw:
            fw = where.child("fail_on")
            if not isinstance(raw["fail_on"], list):
                raise fw.fail(f"expected a list of thresholds like [\"verdict\", \"decode:5%\"], got {raw['fail_on']!r}")
            out["fail_on"] = parse_fail_on(fw, raw["fail_on"]) if raw["fail_on"] else ()
        if "max_foreign_cpu" in raw:
            out["max_foreign_cpu"] = fields.number(where.child("max_foreign_cpu"), raw["max_foreign_cpu"], 0.0, 1.0)
        if "session_spread" in raw:
            out["session_spread"] = fields.number(where.child("session_spread"), raw["session_spread"], 0.0, 10.0)
        return cls(**out)

    def override(self, **values: Any) -> "ComparePolicy":
        """This policy with the command line's values (already parsed; None: keep) in place of the campaign's."""
        import dataclasses

        unknown = sorted(set(values) - set(self.KEYS))
        if unknown:
            raise TypeError(f"ComparePolicy has no field(s) {', '.join(unknown)}")
        return dataclasses.replace(self, **{k: v for k, v in values.items() if v is not None})

    def threshold(self, kind: str) -> Threshold | None:
        return next((t for t in self.fail_on if t.kind == kind), None)

    def as_dict(self) -> dict[str, Any]:
        return {"alpha": self.alpha, "min_samples": self.min_samples, "fail_on": [str(t) for t in self.fail_on],
                "max_foreign_cpu": self.max_foreign_cpu, "session_spread": self.session_spread}


def alpha(where: Where, value: Any) -> float:
    """A significance level: a number strictly between 0 and 0.5."""
    a = fields.number(where, value, minimum=0.0, maximum=0.5)
    if a <= 0:
        raise where.fail(f"must be above 0, got {value!r}")
    return a


def min_samples(where: Where, value: Any) -> int:
    """Samples per side: at least 2 (one repeat has no spread to rank against)."""
    return fields.integer(where, value, minimum=2)
