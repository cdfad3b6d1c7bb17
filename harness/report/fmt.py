"""Markdown formatting shared by the report and the gates' own report sections.

Imports nothing of Gatehouse's: the gate modules (``harness/gates/*.py``) render their sections with
it, and the report reads the gate registry, so anything here that reached back into either would close
an import circle.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence


def num(value: Any, digits: int = 4) -> str:
    """A figure for a table cell: ``digits`` significant digits, an em dash for missing or non-finite."""
    if value is None:
        return "—"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "—"
        return f"{value:.{digits}g}"
    return str(value)


def counts(c: Mapping[str, int] | None) -> str:
    """A rate as its counts, ``numerator/denominator`` (never a bare rate: the denominator matters)."""
    return "—" if not c else f"{c['numerator']}/{c['denominator']}"


def table(header: Sequence[str], align: str) -> list[str]:
    """A table's header row and separator; ``align`` has one letter per column, l (text) or r (figures)."""
    if len(align) != len(header):
        raise ValueError(f"table: {len(header)} columns but alignment {align!r}")
    return ["| " + " | ".join(header) + " |", "|" + "".join("---|" if a == "l" else "---:|" for a in align)]


def row(cells: Iterable[Any]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def receipt_line(nodeid: str, outcome: str, measurements: Mapping[str, Any]) -> str:
    """One receipt as a bullet: node id, outcome and every figure it recorded."""
    figs = ", ".join(f"{k} = {num(v, 4)}" for k, v in sorted(measurements.items()))
    return f"- `{nodeid}` ({outcome}): {figs or 'no figures'}"


def receipt_lines(views: Iterable[Any]) -> list[str]:
    """Bullets for receipt views a section does not tabulate (skipped ones, say), so none goes unshown."""
    return [receipt_line(v.nodeid, v.outcome, v.measurements) for v in views]


def pct(value: Any, digits: int = 1) -> str:
    """A fraction as a percentage for a table cell (``0.0123`` -> ``1.2 %``), an em dash when missing."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "—"
    return f"{100 * value:.{digits}f} %"
