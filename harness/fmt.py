"""Formatting shared (the one number formatter, :func:`figure`, and Markdown tables) by the report and the gates' own report sections.

Imports nothing of Gatehouse's: the gate modules (``harness/gates/*.py``) render their sections with
it, and the report reads the gate registry, so anything here that reached back into either would close
an import circle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")
_SCALED = {  # a unit whose figure is shown at a readable scale: (factor to the base unit, [(threshold, unit, divisor)])
    "s": (1.0, [(1.0, "s", 1.0), (1e-3, "ms", 1e-3), (0.0, "µs", 1e-6)]),
    "ms": (1e-3, [(1.0, "s", 1.0), (1e-3, "ms", 1e-3), (0.0, "µs", 1e-6)]),
    "B": (1.0, [(1e9, "GB", 1e9), (1e6, "MB", 1e6), (1e3, "kB", 1e3), (0.0, "B", 1.0)]),
}


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _significant(v: float, digits: int, sign: bool) -> str:
    """``v`` to ``digits`` significant figures: fixed point with thousands separators from 0.001 up,
    trailing zeros dropped; below 0.001 a power of ten (``4.29×10⁻⁶``)."""
    if v == 0:
        return "0"
    plus = "+" if sign and v > 0 else ""
    exp = math.floor(math.log10(abs(v)))
    rounded = float(f"{v:.{digits - 1}e}")           # rounding may carry into the next power (999.6 -> 1000)
    exp = math.floor(math.log10(abs(rounded)))
    if abs(rounded) < 1e-3:
        mantissa = f"{rounded / 10 ** exp:.{digits - 1}f}".rstrip("0").rstrip(".")
        return f"{plus}{mantissa}×10{str(exp).translate(_SUPERSCRIPT)}"
    decimals = max(0, digits - 1 - exp)
    body = f"{rounded:,.{decimals}f}"
    if decimals:
        body = body.rstrip("0").rstrip(".")
    return plus + body


def figure(value: Any, unit: str = "", *, sign: bool = False, digits: int = 3) -> str:
    """Every figure Gatehouse shows, in the terminal, Markdown and HTML alike: three significant figures,
    thousands separators, a readable unit.

    Integers print exactly (a count is never rounded: ``11,440``). ``unit="%"`` takes a fraction
    (``0.0061`` -> ``0.61 %``); ``"s"``, ``"ms"`` and ``"B"`` choose their scale (``0.0123 s`` -> ``12.3 ms``,
    ``1.44e8 B`` -> ``144 MB``); any other unit is appended (``tok/s``).  ``sign`` prints a plus on gains.
    None, a boolean, a non-number and a non-finite number are an em dash.
    """
    if not _finite(value):
        return "—"
    if unit == "%":
        return _significant(100.0 * value, digits, sign) + " %"
    if unit in _SCALED:
        factor, scales = _SCALED[unit]
        base = value * factor
        threshold, unit, divisor = next(s for s in scales if abs(base) >= s[0])
        if unit == "B" and isinstance(value, int):
            return (f"{value:+,}" if sign else f"{value:,}") + " B"
        return f"{_significant(base / divisor, digits, sign)} {unit}"
    body = (f"{value:+,}" if sign else f"{value:,}") if isinstance(value, int) else _significant(float(value), digits, sign)
    return f"{body} {unit}" if unit else body


def num(value: Any, unit: str = "") -> str:
    """A figure for a table cell (:func:`figure`), an em dash for missing or non-finite; text passes through."""
    if isinstance(value, str):
        return value
    return figure(value, unit)


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
    figs = ", ".join(f"{k} = {num(v)}" for k, v in sorted(measurements.items()))
    return f"- `{nodeid}` ({outcome}): {figs or 'no figures'}"


def receipt_lines(views: Iterable[Any]) -> list[str]:
    """Receipt views a section does not tabulate (skipped ones, say), so none goes unshown: a table of their
    figures (:func:`figures_table`), or one bullet each when none recorded a figure."""
    views = list(views)
    if any(v.measurements for v in views):
        return figures_table([(f"`{v.nodeid}`", v.outcome, v.measurements) for v in views])
    return [receipt_line(v.nodeid, v.outcome, v.measurements) for v in views]


WIDE = 8   # more figures than this and the table turns: one row per figure, one column per receipt


def figures_table(items: Sequence[tuple[str, str, Mapping[str, Any]]]) -> list[str]:
    """Receipts' figures as one table: ``items`` are (label, outcome, measurements).  Up to :data:`WIDE`
    distinct figures, one row per receipt; more, one row per figure and one column per receipt (a long run of
    ``key = value`` pairs is what nobody reads)."""
    names = sorted({k for _, _, m in items for k in m})
    if len(names) <= WIDE:
        lines = table(["test", "outcome", *names], "ll" + "r" * len(names))
        return lines + [row([label, outcome, *(num(m.get(k)) for k in names)]) for label, outcome, m in items]
    lines = table(["figure", *(f"{label} ({outcome})" for label, outcome, _ in items)], "l" + "r" * len(items))
    return lines + [row([k, *(num(m.get(k)) for _, _, m in items)]) for k in names]


def pct(value: Any, sign: bool = False) -> str:
    """A fraction as a percentage for a table cell (``0.0123`` -> ``1.23 %``), an em dash when missing."""
    return figure(value, "%", sign=sign)


# -- a report section as data ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Table:
    """A table of a section: its column headings, one alignment letter per column (l text, r figures) and its rows
    of formatted cells."""

    columns: tuple[str, ...]
    align: str
    rows: tuple[tuple[str, ...], ...]

    def __post_init__(self):
        if len(self.align) != len(self.columns):
            raise ValueError(f"table: {len(self.columns)} columns but alignment {self.align!r}")
        bad = [r for r in self.rows if len(r) != len(self.columns)]
        if bad:
            raise ValueError(f"table {self.columns!r}: a row of {len(bad[0])} cells")

    def markdown(self) -> list[str]:
        return [*table(self.columns, self.align), *(row(r) for r in self.rows)]


@dataclass(frozen=True)
class Section:
    """A gate's part of the report: a heading, then blocks in order (a Markdown line, or a :class:`Table`).  The
    report renders it (report.md as Markdown, report.html through the same converter) and reads its heading
    and tables as data."""

    heading: str
    blocks: tuple[str | Table, ...]

    def tables(self) -> list[Table]:
        return [b for b in self.blocks if isinstance(b, Table)]

    def markdown(self, suffix: str = "") -> list[str]:
        out = [f"## {self.heading}{suffix}", ""]
        for b in self.blocks:
            out += b.markdown() if isinstance(b, Table) else [b]
        return out


def table_of(columns: Sequence[str], align: str, rows: Iterable[Iterable[Any]]) -> Table:
    """A :class:`Table` whose cells are ``str()`` of the values given (format figures with :func:`num` first)."""
    return Table(tuple(columns), align, tuple(tuple(str(c) for c in r) for r in rows))


def markdown_of(sections: Iterable[Section], suffix: str = "") -> list[str]:
    """Sections as Markdown lines, a blank line between them (``suffix`` after each heading)."""
    out: list[str] = []
    for s in sections:
        out += ([""] if out else []) + s.markdown(suffix)
    return out
