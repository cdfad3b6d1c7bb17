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

from .. import atomic, gates, review
from ..errors import ReceiptError
from ..gates import goal_ratios, throughput_goal
from ..rundir import RunDir
from . import qualify, rank
from .timebudget import time_budget
from ..view import ReceiptView
from .collect import Collected, collect
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


def machines(views) -> list[dict[str, Any]]:
    """The machines the run's receipts were measured on, by hardware fingerprint (harness.fingerprint), with
    the hosts that carried each and how many receipts (a merged run of shards or remote hosts has several)."""
    out: dict[str, dict[str, Any]] = {}
    for v in views:
        fp = v.machine
        if fp is None:
            continue
        before = v.provenance.get("machine_before") or {}
        m = out.setdefault(fp, {"fingerprint": fp, "cpu_model": before.get("cpu_model"),
                                "logical_cpus": before.get("logical_cpus"),
                                "memory_total_bytes": before.get("memory_total_bytes"),
                                "isa_flags": before.get("isa_flags"), "hosts": [], "receipts": 0})
        m["receipts"] += 1
        if before.get("hostname") and before["hostname"] not in m["hosts"]:
            m["hosts"].append(before["hostname"])
    return [out[k] for k in sorted(out)]


def decide(c: Collected) -> tuple[dict[str, Any], list[ReceiptView]]:
    """The report record, and the receipt views annotated with their variant's qualification (what the
    gates' sections render).

    Timings are compared only within one machine fingerprint: with one machine every speed, rank and ratio is
    as ever; with several, each row's ``speed_by_machine`` and ``speed_rank_by_machine`` hold them per machine,
    the run-wide ``speed`` and ``speed_rank`` stay empty, and each goal ratio names its machine."""
    screening = qualify.is_screening(c.record, c.views)
    rows = qualify.variants(c.views, screening)
    lanes = [v.lane for v in c.views if v.lane is not None]
    fleet = machines(c.views)
    timed = sorted({l.machine for l in lanes if l.machine})
    for r in rows:
        r["speed"] = rank.speed(lanes, r["model"], r["dtype"]) if len(timed) <= 1 else None
    quality, fast = rank.quality_ranks(rows), rank.speed_ranks(rows)
    dims, front = rank.frontier(rows)
    for r in rows:
        key = (r["model"], r["dtype"])
        r.update(rank=quality.get(key), quality_rank=quality.get(key), speed_rank=fast.get(key), frontier=key in front)
    if len(timed) > 1:
        for fp in timed:
            mine = [l for l in lanes if l.machine == fp]
            per = [{**r, "speed": rank.speed(mine, r["model"], r["dtype"])} for r in rows]
            ranks = rank.speed_ranks(per)
            for r, p in zip(rows, per):
                r.setdefault("speed_by_machine", {})[fp] = p["speed"]
                r.setdefault("speed_rank_by_machine", {})[fp] = ranks.get((r["model"], r["dtype"]))
    passed = qualify.passing(rows)
    views = [dataclasses.replace(v, run_dir=str(c.run_dir.path)) if qualify.is_run_level(v)
             else dataclasses.replace(v, variant_passed=passed[(v.model, v.dtype)], run_dir=str(c.run_dir.path))
             for v in c.views]
    if len(timed) > 1:
        ratios = [{**row, "machine": fp} for fp in timed
                  for row in goal_ratios.ratios(views, throughput_goal.SPEC.name, machine=fp)]
    else:
        ratios = goal_ratios.ratios(views, throughput_goal.SPEC.name)
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
        "lanes": [l.as_dict() for l in lanes],
        "ratios": ratios,
        "machines": fleet,
        "run_level": [_run_level_row(v) for v in c.views if qualify.is_run_level(v)],
        "build_phase": _build_phase(c.builds),
        "time": time_budget(c.durations, c.builds, c.views),
    }
    return rep, views


def build(run: RunDir | Path | str) -> dict[str, Any]:
    """The report record of a run directory (nothing written)."""
    return decide(collect(run, gates.table_figures()))[0]


def rebuild(run: RunDir | Path | str, review_file: Path | str | None = None) -> dict[str, Path]:
    """Store ``review_file`` (if given) in the run, then write report.json, report.md, the chart and
    report.html (the same report as one page that opens from disk)."""
    run_dir = RunDir.of(run)
    if review_file is not None:
        review.store(run_dir, review_file)
    rep, views = decide(collect(run_dir, gates.table_figures()))
    if plot(rep, run_dir.plot):
        rep["plot"] = run_dir.plot.name
    atomic.write_json(run_dir.report_json, rep)
    atomic.write_text(run_dir.report_md, markdown(rep, views, run_dir.path))
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
    outcomes = [v["outcome"] for r in rep["variants"] for v in r["gates"].values()] + \
        [r["outcome"] for r in rep.get("run_level", [])]   # run-level gates count as pytest counts them
    failing = sum(o not in ("pass", "skip") for o in outcomes)
    skipped = sum(o == "skip" for o in outcomes)
    refused = refused_count(rep)
    return (f"{rep['label']}: {n} variants, {qualified} qualified, {failing} failing gate(s), "
            + (f"{skipped} skipped, " if skipped else "")
            + f"{len(rep['stale_receipts'])} stale and {len(rep['invalid_receipts'])} invalid receipt(s)"
            + (f"; {refused} file(s) or line(s) refused, listed in the report" if refused else ""))


def refused_count(rep: dict[str, Any]) -> int:
    """Receipts, review records and build-log lines the report could not read (each listed in it)."""
    return sum(len(rep.get(k, [])) for k in ("invalid_receipts", "invalid_reviews", "invalid_build_lines"))
