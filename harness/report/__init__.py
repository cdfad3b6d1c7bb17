"""Gatehouse's report: report.json, report.md and report.html rebuilt from a run directory's receipts, alone.

``rebuild(run, review_file=None) -> {"json": Path, "md": Path, "html": Path}`` writes them (the plugin calls it at the
end of a session, ``python -m harness.report RUN_DIR`` and ``bin/gatehouse report`` from the shell);
``build(run)`` returns the record without writing; ``summary_line(json_path)`` is the terminal's line.

The package, in the order the data flows:

- :mod:`.collect`: the run directory read into read-only receipt views (staleness, reviews);
- :mod:`.qualify`: qualification, pure (the gate registry says which gates count);
- :mod:`.rank`: quality and speed ranks, the Pareto frontier, the goal ratios, pure;
- :mod:`.assemble`: the record, decided once;
- :mod:`.markdown` (general sections, then each gate's own ``section``), :mod:`.html` (report.md's sections as
  one self-contained page, a sortable variants table, inline SVG charts from :mod:`.svg`, links to every receipt),
  :mod:`.summary` (the terminal's and CI's summary), :mod:`.plot`, :mod:`.fmt` (the one number formatter);
- :mod:`.cli`: the command line.

Importing this package imports none of them: the gate modules render their sections with
:mod:`.fmt`, and the report reads the gate registry, so the entry points below load lazily.
"""

from __future__ import annotations

__all__ = ["build", "main", "rebuild", "summary_line"]


def __getattr__(name: str):
    if name in ("build", "rebuild", "summary_line"):
        from . import assemble

        return getattr(assemble, name)
    if name == "main":   # the gatehouse-report console script (pyproject.toml)
        from .cli import main

        return main
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
