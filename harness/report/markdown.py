"""report.md: the report record rendered for people, with each gate's own section from its spec.

The general sections (the run, the variants with their ranks, failing gates, blockers, stale and
invalid receipts) render the report record; each gate whose :class:`~harness.gates.spec.GateSpec` has a
``section`` renders its part from the receipt views, in the registry's order, and so do the tables of
the behavior evaluations' invalid outputs and of the machine during each timing
(:mod:`harness.report.integrity`), after them.  Nothing here decides.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from .. import gates
from . import fmt, integrity
from .collect import ReceiptView


def _header(rep: Mapping[str, Any]) -> list[str]:
    run = rep["run"]
    lines = [f"# Gatehouse report — {run['campaign']['name']}", ""]
    if rep["label"] == "screening":
        lines += ["> **SCREENING RUN** — these figures are screening measurements and are never reported as "
                  "qualification.", ""]
    b = rep["build_phase"]
    return lines + [f"- run: `{run['run_id']}` (created {run['created_at']})",
                    f"- campaign: `{run['campaign']['path']}` sha256 `{run['campaign']['sha256'][:16]}…`",
                    f"- receipts: {rep['receipts']} valid, {len(rep['invalid_receipts'])} invalid, "
                    f"{len(rep['stale_receipts'])} stale",
                    f"- build phase: {b['built']} built, {b['reused']} reused, {b['seconds']:.1f} s in artifact "
                    f"acquisition ({b['build_seconds_of_built']:.1f} s building)"]


def _variants(rep: Mapping[str, Any]) -> list[str]:
    lines = ["## Variants", "",
             f"Quality rank: {rep['ranking']}. Speed rank: {rep['speed_ranking']}. Frontier: Pareto over "
             f"{', '.join(rep['frontier_dimensions'])} among variants that passed every gate.", "",
             *fmt.table(["quality rank", "speed rank", "model", "dtype", "status", "quality /100", "graph MB",
                         "decode tok/s", "loss increase", "mean KLD", "top-1", "cache max abs err", "frontier", "gates"],
                        "rrlllrrrrrrrll")]
    for r in sorted(rep["variants"], key=lambda r: (r["rank"] is None, r["rank"] or 0, r["model"], r["dtype"])):
        f = r["figures"]
        inc = f.get("relative_increase")
        speed = r.get("speed")
        lines.append(fmt.row([
            fmt.num(r["quality_rank"]), fmt.num(r.get("speed_rank")), r["model"], r["dtype"], r["status"],
            fmt.num(f.get("quality_index"), 3), fmt.num(r["graph_bytes"] / 1e6 if r["graph_bytes"] else None, 4),
            fmt.num(speed["decode_tok_s"] if speed else None, 4), "—" if inc is None else f"{inc:+.2%}",
            fmt.num(f.get("kld_mean")), fmt.num(f.get("top1_agreement")),
            fmt.num(f.get("incremental_vs_full_max_abs_error")), "yes" if r.get("frontier") else "",
            ", ".join(f"{g}:{v['outcome']}" for g, v in sorted(r["gates"].items()))]))
    return lines


def _run_level(rep: Mapping[str, Any]) -> list[str]:
    """Run-level receipts no gate section shows (gates without a section, or no longer registered)."""
    shown = {s.name for s in gates.GATES.values() if s.section is not None and s.level == "run"}
    others = [r for r in rep.get("run_level", []) if r["gate"] not in shown]
    if not others:
        return []
    return ["## Run-level results", "", *(fmt.receipt_line(r["nodeid"], r["outcome"], r["measurements"]) for r in others)]


def _failing(rep: Mapping[str, Any]) -> list[str]:
    failing = [(r, g, v) for r in rep["variants"] for g, v in sorted(r["gates"].items()) if v["outcome"] != "pass"]
    if not failing:
        return []
    lines = ["## Failing gates", ""]
    for r, g, v in failing:
        lines.append(f"- **{r['model']}-{r['dtype']} / {g}: {v['outcome']}**")
        lines += [f"  - {reason}" for reason in v["reasons"][:12]]
    return lines


def _listed(title: str, items: Sequence[str]) -> list[str]:
    return ["## " + title, "", *items] if items else []


def markdown(rep: Mapping[str, Any], views: Sequence[ReceiptView]) -> str:
    """The whole report.md: ``rep`` is the report record, ``views`` the run's receipts after qualification."""
    sections = [_header(rep), _variants(rep)]
    sections += [spec.section(views) for spec in gates.GATES.values() if spec.section is not None]
    sections += [
        integrity.invalid_output_lines(views), integrity.machine_during_lines(views),
        _run_level(rep), _failing(rep),
        _listed("Not qualified (screening), with blockers",
                [f"- {r['model']}-{r['dtype']}: " + "; ".join(r["blockers"]) for r in rep["variants"] if not r["qualified"]]),
        _listed("Stale receipts (artifacts changed since measured)",
                [f"- `{s['nodeid']}`: " + "; ".join(s["reasons"]) for s in rep["stale_receipts"]]),
        _listed("Invalid receipts", [f"- `{b['path']}`: {b['error']}" for b in rep["invalid_receipts"]]),
        _listed("Invalid review records", [f"- `{b['path']}`: {b['error']}" for b in rep.get("invalid_reviews", [])]),
        _listed("Unreadable build log lines", [f"- `{b['path']}`: {b['error']}" for b in rep.get("invalid_build_lines", [])]),
        [f"![quality vs size]({rep['plot']})"] if rep.get("plot") else [],
    ]
    lines: list[str] = []
    for s in sections:
        if s:
            lines += ([""] if lines else []) + s
    return "\n".join(lines) + "\n"
