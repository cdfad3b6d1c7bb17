"""The report's outcome in a few lines: the terminal summary at the end of a session and the Markdown that
CI appends to ``$GITHUB_STEP_SUMMARY``.

Both render the report record (``report.json``) that the files render, through the same cells as
report.md's variants table (:mod:`harness.report.markdown`) and the one number formatter, so a figure reads
the same in the terminal, the step summary, report.md and report.html.  Nothing here decides.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from .. import fmt
from .markdown import not_passed, to_qualify, variant_cells, variant_rows

HEADER = ("rank", "variant", "status", "quality /100", "graph", "decode tok/s", "loss increase", "gates")
REASON_CHARS = 160
NODEID = re.compile(r"^\S+\.py::\S+: ")   # a reason's leading node id: the line already names the gate   # one reason per failing gate, cut to this many characters in the terminal


def failing(rep: Mapping[str, Any], skipped: bool = False) -> list[tuple[str, str, str, str]]:
    """(variant, gate, outcome, first reason) for every gate that did not pass (``skipped``: that did not run
    instead; a skipped gate is never counted as failing), run-level gates included (:func:`markdown.not_passed`)."""
    return [(label, gate, v["outcome"], NODEID.sub("", (v.get("reasons") or ["(no reason recorded)"])[0], count=1))
            for label, gate, v in not_passed(rep, skipped, variant_rows(rep))]


def _short(text: str, limit: int = REASON_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def aligned(header: Sequence[str], rows: Sequence[Sequence[str]], right: str) -> list[str]:
    """A plain-text table: columns padded to their widest cell; ``right`` has one letter per column
    (``r`` right-aligned figures, ``l`` text)."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]

    def line(cells):
        return "  ".join(str(c).rjust(w) if a == "r" else str(c).ljust(w)
                         for c, w, a in zip(cells, widths, right)).rstrip()

    return [line(header), "  ".join("-" * w for w in widths), *(line(r) for r in rows)]


def to_qualify_lines(rep: Mapping[str, Any], run_dir=None, code=lambda c: c) -> list[str]:
    """Each variant that passed every gate but is not qualified, with what stands between it and qualified
    (``code`` wraps a command: Markdown's backticks); variants with the same steps share a line."""
    grouped: dict[tuple, list[str]] = {}
    for name, steps in to_qualify(rep, run_dir):
        grouped.setdefault(tuple(steps), []).append(name)
    return [", ".join(names) + ": " + "; ".join(what + (f": {code(cmd)}" if cmd else "") for what, cmd in steps)
            for steps, names in grouped.items()]


def terminal_lines(rep: Mapping[str, Any], run_dir=None) -> list[str]:
    """The variants table, each failing gate with its first reason, and what stands between each variant that
    passed every gate and qualified (``run_dir``: the run directory the commands name), as plain text."""
    rows = [variant_cells(r) for r in variant_rows(rep)]
    lines = [f"{rep['label']}: {len(rows)} variant(s), {sum(r['qualified'] for r in rep['variants'])} qualified"
             + (" — SCREENING, never qualification" if rep["label"] == "screening" else "")]
    if rows:
        lines += aligned(HEADER, rows, "rllrrrrl")
    bad = failing(rep)
    if bad:
        lines += ["", "failing gates (first reason each; all of them in the report):"]
        lines += [f"  {variant} / {gate} ({outcome}): {_short(reason)}" for variant, gate, outcome, reason in bad]
    skipped = failing(rep, skipped=True)
    if skipped:
        lines += ["", "skipped gates (not run; why):"]
        lines += [f"  {variant} / {gate}: {_short(reason)}" for variant, gate, _, reason in skipped]
    left = to_qualify_lines(rep, run_dir)
    if left:
        lines += ["", "passed every gate, not qualified yet (what stands between each and qualified):"]
        lines += [f"  {line}" for line in left]
    return lines


def markdown_summary(rep: Mapping[str, Any], report_paths: Mapping[str, Any] | None = None) -> str:
    """The same summary as Markdown, for ``$GITHUB_STEP_SUMMARY``."""
    lines = [f"## Gatehouse — {rep['run']['campaign']['name']} ({rep['label']})", ""]
    if rep["label"] == "screening":
        lines += ["> **SCREENING RUN**: never reported as qualification.", ""]
    lines += [*fmt.table(list(HEADER), "rllrrrrl"), *(fmt.row(variant_cells(r)) for r in variant_rows(rep))]
    bad = failing(rep)
    if bad:
        lines += ["", "### Failing gates", ""]
        lines += [f"- **{variant} / {gate}** ({outcome}): {_short(reason, 400)}" for variant, gate, outcome, reason in bad]
    left = to_qualify_lines(rep, Path(report_paths["json"]).parent if report_paths and report_paths.get("json") else None,
                            lambda c: f"`{c}`")
    if left:
        lines += ["", "### Passed every gate, not qualified yet", "", *(f"- {line}" for line in left)]
    if report_paths:
        lines += ["", *(f"- {kind}: `{path}`" for kind, path in report_paths.items())]
    return "\n".join(lines) + "\n"
