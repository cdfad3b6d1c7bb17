"""The report record: collect a run directory, qualify its variants, rank them, and write the report.

``report.json`` is decided here once, from the receipts alone; ``report.md`` and the chart render it.
Its keys are those of report version 1 (the report before it became a package), so one run gives the
same verdicts and figures whichever harness rebuilds it; a provenance blocker is the only new verdict.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from .. import atomic, review
from ..errors import ReceiptError
from ..gates import throughput_goal
from ..rundir import RunDir
from . import qualify, rank
from .collect import Collected, ReceiptView, collect
from .html import html
from .markdown import markdown
from .plot import plot

REPORT_VERSION = 1


def _run_level_row(v: ReceiptView) -> dict[str, Any]:
    return {"gate": v.gate, "nodeid": v.nodeid, "outcome": v.outcome, "reasons": v.reasons, "model": v.model,
            "dtype": v.dtype, "measurements": v.measurements, "winrule": v.winrule,
            "profile": v.profile, "evidence": v.evidence}


def _build_phase(builds) -> dict[str, Any]:
    """What acquiring artifacts cost the run: how many were built and how many reused, and the seconds."""
    return {"acquisitions": len(builds), "built": sum(not b["hit"] for b in builds),
            "reused": sum(bool(b["hit"]) for b in builds), "seconds": round(sum(b["seconds"] for b in builds), 3),
            "build_seconds_of_built": round(sum(b["build_seconds"] or 0 for b in builds if not b["hit"]), 3),
            "by_artifact": list(builds)}


def decide(c: Collected) -> tuple[dict[str, Any], list[ReceiptView]]:
    """The report record, and the receipt views annotated with their variant's qualification (what the
    gates' sections render)."""
    screening = qualify.is_screening(c.record, c.views)
    rows = qualify.variants(c.views, screening)
    lanes = [v.lane for v in c.views if v.lane is not None]
    for r in rows:
        r["speed"] = rank.speed(lanes, r["model"], r["dtype"])
    quality, fast = rank.quality_ranks(rows), rank.speed_ranks(rows)
    dims, front = rank.frontier(rows)
    for r in rows:
        key = (r["model"], r["dtype"])
        r.update(rank=quality.get(key), quality_rank=quality.get(key), speed_rank=fast.get(key), frontier=key in front)
    passed = qualify.passing(rows)
    views = [v if qualify.is_run_level(v) else dataclasses.replace(v, variant_passed=passed[(v.model, v.dtype)])
             for v in c.views]
    rep = {
        "schema_version": REPORT_VERSION, "kind": "gatehouse.report", "run": dict(c.record),
        "label": "screening" if screening else "qualification",
        "receipts": len(c.views), "invalid_receipts": list(c.invalid),
        "stale_receipts": [{"nodeid": v.nodeid, "reasons": list(v.stale)} for v in c.views if v.stale],
        "invalid_reviews": list(c.invalid_reviews),
        "invalid_build_lines": list(c.invalid_builds),
        "variants": rows,
        "ranking": rank.RANKING,
        "speed_ranking": rank.SPEED_RANKING,
        "frontier_dimensions": dims,
        "lanes": lanes,
        "ratios": rank.ratios(views, throughput_goal.SPEC.name),
        "run_level": [_run_level_row(v) for v in c.views if qualify.is_run_level(v)],
        "build_phase": _build_phase(c.builds),
    }
    return rep, views


def build(run: RunDir | Path | str) -> dict[str, Any]:
    """The report record of a run directory (nothing written)."""
    return decide(collect(run))[0]


def rebuild(run: RunDir | Path | str, review_file: Path | str | None = None) -> dict[str, Path]:
    """Store ``review_file`` (if given) in the run, then write report.json, report.md, the chart and
    report.html (the same report as one page that opens from disk)."""
    run_dir = RunDir.of(run)
    if review_file is not None:
        review.store(run_dir, review_file)
    rep, views = decide(collect(run_dir))
    if plot(rep, run_dir.plot):
        rep["plot"] = run_dir.plot.name
    atomic.write_json(run_dir.report_json, rep)
    atomic.write_text(run_dir.report_md, markdown(rep, views))
    atomic.write_text(run_dir.report_html, html(rep, views, run_dir))
    return {"json": run_dir.report_json, "md": run_dir.report_md, "html": run_dir.report_html}


def summary_line(json_path: Path | str) -> str:
    """One line for the terminal: how many variants, how many qualified, failing gates, bad receipts."""
    try:
        rep = json.loads(Path(json_path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ReceiptError(f"{json_path}: cannot read the report: {exc}") from exc
    n = len(rep["variants"])
    qualified = sum(r["qualified"] for r in rep["variants"])
    failing = sum(v["outcome"] != "pass" for r in rep["variants"] for v in r["gates"].values())
    refused = refused_count(rep)
    return (f"{rep['label']}: {n} variants, {qualified} qualified, {failing} failing gate(s), "
            f"{len(rep['stale_receipts'])} stale and {len(rep['invalid_receipts'])} invalid receipt(s)"
            + (f"; {refused} file(s) or line(s) refused, listed in the report" if refused else ""))


def refused_count(rep: dict[str, Any]) -> int:
    """Receipts, review records and build-log lines the report could not read (each listed in it)."""
    return sum(len(rep.get(k, [])) for k in ("invalid_receipts", "invalid_reviews", "invalid_build_lines"))
