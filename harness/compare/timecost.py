"""The tool's own time, base against new: each side's test seconds in total and per gate (the report's
``time`` block, :mod:`harness.report.timebudget`), and how many artifacts each side built.

Pure.  A gate's seconds count only from :data:`~harness.compare.policy.TIME_FLOOR_S` on; a side that built
artifacts the other reused is named, since its time is mostly builds (compare warm runs with warm runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .policy import TIME_FLOOR_S

TOTAL = "(all tests)"
EXCLUSIVE = "(held the machine exclusively)"   # the timing tests' seconds: nothing ran beside them


@dataclass(frozen=True)
class TimeRow:
    gate: str
    base_seconds: float | None
    new_seconds: float | None
    change: float | None          # new / base - 1
    compared: bool                # both sides measured it and one side took at least TIME_FLOOR_S


def _seconds(rep: Mapping[str, Any]) -> tuple[float | None, float | None, dict[str, float]]:
    """(test seconds, exclusive test seconds (None: a run from before they were recorded), {gate: seconds})."""
    t = rep.get("time") or {}
    if not t.get("tests"):
        return None, None, {}
    return (t["test_seconds"], (t.get("phase") or {}).get("exclusive_seconds"),
            {g["gate"]: g["seconds"] for g in t["by_gate"]})


def time_rows(rep_b: Mapping[str, Any], rep_n: Mapping[str, Any]) -> list[TimeRow]:
    """The total first, then the exclusive tests' seconds (when either side recorded them), then every gate either
    side timed, the largest first."""
    tb, xb, gb = _seconds(rep_b)
    tn, xn, gn = _seconds(rep_n)
    if tb is None and tn is None:
        return []
    rows = []
    exclusive = [(EXCLUSIVE, xb, xn)] if xb is not None or xn is not None else []
    for gate, b, n in [(TOTAL, tb, tn), *exclusive, *((g, gb.get(g), gn.get(g)) for g in
                                                      sorted(set(gb) | set(gn),
                                                             key=lambda g: -max(gb.get(g, 0), gn.get(g, 0))))]:
        change = n / b - 1 if b and n is not None else None
        compared = change is not None and (gate == TOTAL or max(b, n) >= TIME_FLOOR_S)
        rows.append(TimeRow(gate, b, n, change, compared))
    return rows


def cold_builds(rep: Mapping[str, Any]) -> tuple[int, float]:
    """(artifacts built, their build seconds) of one side."""
    b = (rep.get("time") or {}).get("builds") or {}
    return b.get("cold", 0), b.get("cold_build_seconds", 0.0)
