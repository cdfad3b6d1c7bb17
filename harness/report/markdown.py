"""report.md: the report record rendered for people, with each gate's own section from its spec.

The general sections (the run, the variants with their ranks, what stands between each variant that passed
every gate and "qualified", failing gates, blockers, stale and invalid receipts) render the report record;
each gate whose :class:`~harness.gates.spec.GateSpec` has a ``section`` renders its part from the receipt
views, in the registry's order, and so do the tables of the behavior evaluations' invalid outputs and of
the machine during each timing (:mod:`harness.report.integrity`), after them.  Nothing here decides.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from .. import gates, review
from .. import fmt
from . import integrity, qualify, rank
from ..view import ReceiptView


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
                    f"- build phase: {b['built']} built, {b['reused']} reused, {fmt.figure(b['seconds'], 's')} in artifact "
                    f"acquisition ({fmt.figure(b['build_seconds_of_built'], 's')} building)"]


def gates_cell(gates_of: Mapping[str, Mapping[str, Any]]) -> str:
    """A variant's gates in one short cell: how many passed (of those that ran), then each gate that did not with
    its outcome; skipped gates are counted apart, never among those that failed."""
    ran = {g: v for g, v in gates_of.items() if v["outcome"] != "skip"}
    bad = [f"{g} ({v['outcome']})" for g, v in sorted(ran.items()) if v["outcome"] != "pass"]
    skipped = sorted(set(gates_of) - set(ran))
    return (f"{len(ran) - len(bad)}/{len(ran)} pass" + (": " + ", ".join(bad) if bad else "")
            + (f"; skipped: {', '.join(skipped)}" if skipped else ""))


def speed_cell(speed: Mapping[str, Any] | None) -> str:
    """Decode tokens/s with its IQR over repeats (the speed rank's figure), an em dash when unmeasured."""
    if not speed:
        return "—"
    iqr, foreign = speed.get("decode_tok_s_iqr"), speed.get("foreign_cpu_share")
    loaded = foreign is not None and foreign >= rank.FOREIGN_LOAD_MARK
    return (fmt.num(speed["decode_tok_s"]) + (f" (IQR {fmt.num(iqr)})" if iqr is not None else "")
            + (f" ‡ under {fmt.pct(foreign)} other load" if loaded else ""))


def variant_rows(rep: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The variants in report order (ranked first, then model and dtype)."""
    return sorted(rep["variants"], key=lambda r: (r["rank"] is None, r["rank"] or 0, r["model"], r["dtype"]))


def _variants(rep: Mapping[str, Any]) -> list[str]:
    lines = ["## Variants", "",
             f"Quality rank: {rep['ranking']}. Speed rank: {rep['speed_ranking']}. Frontier (★): Pareto over "
             f"{', '.join(rep['frontier_dimensions'])} among variants that passed every gate. Failing gates and "
             f"their reasons are under \"Failing gates\"; the cache error under the cache gate's section.", "",
             *fmt.table(["rank (quality / speed)", "variant", "status", "quality /100", "graph", "decode tok/s",
                         "loss increase", "mean KLD", "top-1", "gates"], "rllrrrrrrl")]
    for r in variant_rows(rep):
        *head, gates_ = variant_cells(r)
        lines.append(fmt.row([*head, fmt.num(r["figures"].get("kld_mean")), fmt.pct(r["figures"].get("top1_agreement")),
                              gates_]))
    if any("‡" in speed_cell(r.get("speed")) for r in rep["variants"]):
        lines += ["", f"‡ timed while other processes used at least {fmt.pct(rank.FOREIGN_LOAD_MARK)} of the CPU (the "
                      f"sampler's foreign CPU share during the timing): the figure is slower than this machine's own "
                      f"and its rank uncertain; rerun the throughput gates on a quiet machine."]
    return lines


def variant_cells(r: Mapping[str, Any]) -> list[str]:
    """A variant's cells that every summary shows (report.md, the terminal, the CI step summary): rank
    (quality / speed), variant, status with ★ on the frontier, quality, graph size, decode tok/s with IQR,
    loss increase, gates."""
    f = r["figures"]
    rank = "—" if r["quality_rank"] is None and r.get("speed_rank") is None else \
        f"{fmt.num(r['quality_rank'])} / {fmt.num(r.get('speed_rank'))}"
    return [rank, f"{r['model']}-{r['dtype']}", r["status"] + (" ★" if r.get("frontier") else ""),
            fmt.num(f.get("quality_index")), fmt.figure(r["graph_bytes"], "B"), speed_cell(r.get("speed")),
            fmt.pct(f.get("relative_increase"), sign=True), gates_cell(r["gates"])]


def to_qualify(rep: Mapping[str, Any], run_dir: Path | str | None = None) -> list[tuple[str, list[tuple[str, str | None]]]]:
    """For each variant that passed every gate but is not qualified, in report order: (its name, the steps
    between it and "qualified", each (what, command or None)), from the blockers qualification computed.
    A screening run or a CI-tier model is the whole answer (nothing else in this run can qualify it); a missing
    transcript review names the command that records one (``run_dir``: the run directory, else RUN_DIR)."""
    out = []
    run = os.path.abspath(run_dir) if run_dir is not None else "RUN_DIR"
    for r in variant_rows(rep):
        left = qualify.to_qualify(r)
        if not left:
            continue
        final = [b for kind, b in left if kind in ("ci", "screening")]
        if final:
            out.append((f"{r['model']}-{r['dtype']}", [(
                "CI-tier model: screening only, never qualified" if b == qualify.CI_TIER else
                "screening campaign (`screening = true`): a screening run never qualifies; run a non-screening "
                "campaign", None) for b in final]))
            continue
        steps: list[tuple[str, str | None]] = []
        for kind, b in left:
            if kind == "provenance":
                steps.append((f"{b} — rerun its gates with one harness source, package set and instruction set", None))
            elif kind == "session":
                steps.append((f"{b} — rerun the gates that differ with the campaign's settings (threads, optimization "
                               f"level)", None))
            elif kind == "review":
                why = ((r.get("behavior") or {}).get("review") or {}).get("why") or b[len(qualify.REVIEW):]
                cmd = review.command(run, f"{r['model']}/{r['dtype']}")
                if why.startswith(review.REJECTED):
                    steps.append((f"{why}: a rejection stands for this behavior report; only a new evaluation "
                                  f"(rerun of the behavior gate) can be reviewed again", None))
                elif why == review.NO_APPROVAL:
                    steps.append(("needs a transcript review", cmd))
                else:
                    steps.append((f"transcript review does not count ({why}); rerun the behavior gate, then review "
                                  f"the new transcripts", cmd))
            else:
                steps.append((b, None))
        out.append((f"{r['model']}-{r['dtype']}", steps))
    return out


def _to_qualify(rep: Mapping[str, Any], run_dir: Path | str | None) -> list[str]:
    rows = to_qualify(rep, run_dir)
    if not rows:
        return []
    lines = ["## What stands between a variant and qualified", "",
             "Variants that passed every gate but are not qualified, and what each still needs (every blocker is "
             "under \"Not qualified (screening), with blockers\").", ""]
    for name, steps in rows:
        lines += [f"- **{name}**: " + "; ".join(what + (f": `{cmd}`" if cmd else "") for what, cmd in steps)]
    return lines


def _recipe_cell(recipe: Mapping[str, Any]) -> str:
    sym = "sym" if recipe.get("symmetric") else "asym"
    if recipe.get("delivery") == "packed":
        return (f"{recipe.get('method')}, packed: {recipe.get('bits')}-bit b{recipe.get('block_size')} codes and an "
                f"8-bit embedding expanded at load, fp32 compute")
    head = recipe.get("head")
    return (f"{recipe.get('method')}, {recipe.get('bits')}-bit b{recipe.get('block_size')} {sym}, "
            f"level {recipe.get('accuracy_level')}, head {head}"
            + (", bias-corrected" if recipe.get("bias_correction") else ""))


def _first_failure(r: Mapping[str, Any]) -> str:
    """The first gate that did not pass, with its first reason (the evidence of how much it missed by); an early
    stop's skipped timing says so."""
    bad = [(g, v) for g, v in sorted(r["gates"].items()) if v["outcome"] in ("fail", "error")]
    if not bad:
        skipped = [g for g, v in sorted(r["gates"].items()) if v["outcome"] == "skip"]
        return f"not timed: {', '.join(skipped)} skipped" if skipped else "—"
    gate, v = bad[0]
    reason = (v.get("reasons") or [""])[0]
    head, sep, rest = reason.partition(": ")
    if sep and "::" in head:   # the gate row's reasons name the receipt's node id first
        reason = rest
    return f"**{gate}**: {reason}"[:240]


def _recipes(rep: Mapping[str, Any]) -> list[str]:
    """The recipe search: each recipe of the campaign ([[recipes]]) with its parameters, figures and the first
    gate it failed, ordered by the speed rank (qualified first), then by quality."""
    rows = [r for r in rep["variants"] if r.get("recipe")]
    if not rows:
        return []
    stopped = sum(1 for r in rows for v in r["gates"].values()
                  if v["outcome"] == "skip" and any("early stop" in x for x in v.get("reasons", [])))
    lines = ["## Recipe search", "",
             "Each quantization recipe of the campaign (`[[recipes]]`) is a variant held to the policy of its bits "
             "(q4 or q8) and judged by every gate; the ranks and the frontier above are over the recipes and the fixed "
             "dtypes that passed them all. A recipe that failed a screening gate (`[search]`) is not timed: "
             f"{stopped} timed test(s) were skipped this way in this run.", "",
             *fmt.table(["variant", "recipe", "status", "graph", "browser download", "decode tok/s", "loss increase",
                         "mean KLD", "first failing gate (first reason)"], "lllrrrrrl")]
    order = sorted(rows, key=lambda r: (not r["passed_all_gates"], r.get("speed_rank") or 10**6,
                                        r["model"], r["dtype"]))
    for r in order:
        f = r["figures"]
        lines.append(fmt.row([f"{r['model']}-{r['dtype']}", _recipe_cell(r["recipe"]),
                              r["status"] + (" ★" if r.get("frontier") else ""), fmt.figure(r["graph_bytes"], "B"),
                              fmt.figure(f.get("download_bytes"), "B"),
                              speed_cell(r.get("speed")), fmt.pct(f.get("relative_increase"), sign=True),
                              fmt.num(f.get("kld_mean")), _first_failure(r).replace("|", "\\|")]))
    return lines


def _run_level(rep: Mapping[str, Any]) -> list[str]:
    """Run-level receipts no gate section shows (gates without a section, or no longer registered)."""
    shown = {s.name for s in gates.GATES.values() if s.section is not None and s.level == "run"}
    others = [r for r in rep.get("run_level", []) if r["gate"] not in shown]
    if not others:
        return []
    lines = ["## Run-level results"]
    for gate in sorted({r["gate"] for r in others}):
        mine = [r for r in others if r["gate"] == gate]
        lines += ["", f"### {gate}", "", *fmt.figures_table(
            [(f"`{_test_name(r['nodeid'])}`", r["outcome"], r["measurements"]) for r in mine])]
    return lines


def _test_name(nodeid: str) -> str:
    """A node id without its file (``suites/test_x.py::test_y[p]`` -> ``test_y[p]``): the section names the gate."""
    return nodeid.split("::", 1)[-1]


def run_level_label(row: Mapping[str, Any]) -> str:
    """What a run-level receipt is about: its test's parameter id (``smollm2-q4-aa``), else its model and dtype."""
    found = re.search(r"\[([^\]]+)\]$", row.get("nodeid") or "")
    if found:
        return found[1]
    return "-".join(str(x) for x in (row.get("model"), row.get("dtype")) if x) or "run"


def not_passed(rep: Mapping[str, Any], skipped: bool, rows: Sequence[Mapping[str, Any]] | None = None
               ) -> list[tuple[str, str, Mapping[str, Any]]]:
    """(label, gate, verdict with ``outcome`` and ``reasons``) for each gate that failed (``skipped``: that did not
    run) of each variant row (``rows``, default the report's order), then of the run-level receipts (an A/A
    window, the calibration): pytest counts them, so does the report. A skipped gate is never failing."""
    def keep(outcome: str) -> bool:
        return (outcome == "skip") if skipped else (outcome not in ("pass", "skip"))

    found = [(f"{r['model']}-{r['dtype']}", g, v) for r in (rep["variants"] if rows is None else rows)
             for g, v in sorted(r["gates"].items()) if keep(v["outcome"])]
    return found + [(run_level_label(r), r["gate"], r) for r in rep.get("run_level", []) if keep(r["outcome"])]


def _failing(rep: Mapping[str, Any]) -> list[str]:
    """The gates that did not pass, then those that did not run (skipped, with their reasons), apart."""
    lines = []
    for title, skipped in (("Failing gates", False), ("Skipped gates", True)):
        found = not_passed(rep, skipped)
        if found:
            lines += ([""] if lines else []) + [f"## {title}", ""]
        for label, g, v in found:
            lines.append(f"- **{label} / {g}: {v['outcome']}**")
            lines += [f"  - {reason}" for reason in v["reasons"][:12]]
    return lines


def _listed(title: str, items: Sequence[str]) -> list[str]:
    return ["## " + title, "", *items] if items else []


def _machines(rep: Mapping[str, Any]) -> list[str]:
    """A run measured on several machines (a merged run): each machine, and each variant's speed and speed rank
    on each (never a speed compared across machines)."""
    fleet = rep.get("machines") or []
    if len(fleet) <= 1:
        return []
    lines = ["## Machines (timings are compared only within one)", "",
             "A merged run of several machines: each gate section below is drawn once per machine, from that machine's "
             "receipts; quality verdicts stand together when the machines' instruction sets match.", "",
             *fmt.table(["machine", "CPU", "logical CPUs", "instruction-set flags", "hosts", "receipts"], "lllllr")]
    for m in fleet:
        lines.append(fmt.row([f"`{m['fingerprint']}`", m["cpu_model"] or "—", fmt.num(m["logical_cpus"]),
                              m["isa_flags"] or "—", ", ".join(m["hosts"]) or "—", fmt.num(m["receipts"])]))
    speeds = [(r, fp, sp, r.get("speed_rank_by_machine", {}).get(fp)) for r in rep["variants"]
              for fp, sp in sorted((r.get("speed_by_machine") or {}).items()) if sp]
    if speeds:
        lines += ["", *fmt.table(["model", "dtype", "machine", "lane", "decode tok/s (short)", "speed rank there"],
                                 "llllrr")]
        for r, fp, sp, rk in speeds:
            lines.append(fmt.row([r["model"], r["dtype"], f"`{fp}`", sp["lane"], fmt.num(sp["decode_tok_s"]),
                                  fmt.num(rk)]))
    return lines


def _per_machine(spec, views: Sequence[ReceiptView]) -> list[str]:
    """A gate's sections as Markdown; on a run of several machines, once per machine from its own receipts, each
    heading naming the machine."""
    fps = sorted({v.machine for v in views if v.machine})
    runs = [(spec.section(views), "")] if len(fps) <= 1 else \
        [(spec.section([v for v in views if v.machine in (fp, None)]), f" — machine `{fp}`") for fp in fps]
    out: list[str] = []
    for sections, suffix in runs:
        lines = fmt.markdown_of(sections, suffix)
        out += ([""] if out and lines else []) + lines
    return out


def phase_lines(p: Mapping[str, Any] | None) -> list[str]:
    """The test phase's shape (harness.report.timebudget.phase): what held the machine exclusively, and the least
    wall time the tests allow against the wall time they took."""
    if not p or p.get("exclusive_tests") is None:
        return []
    n = p["exclusive_tests"]
    held = (f"{n} test{'s' if n != 1 else ''} held the machine exclusively (timing tests, nothing beside them): "
            f"{fmt.num(p['exclusive_seconds'])} s.")
    if p.get("wall_seconds") is None:
        return [held, ""]
    gaps = p["wall_seconds"] - p["even_split_seconds"]
    return [f"{held} The tests ran on {p['workers']} worker{'s' if p['workers'] != 1 else ''} for "
            f"{fmt.num(p['wall_seconds'])} s of wall time; those alone one after another and the rest spread evenly "
            f"over the workers would take {fmt.num(p['even_split_seconds'])} s, so {fmt.num(max(gaps, 0.0))} s went to "
            f"gaps between tests (a worker waiting for the machine lock before a test, or idle at the end). Less wall "
            f"time beyond that takes less test time, or less of it exclusive.", ""]


def time_lines(t: Mapping[str, Any] | None) -> list[str]:
    """Where the run's own time went (harness.report.timebudget): by gate, then the largest builds."""
    if not t or not t["tests"]:
        return []
    b = t["builds"]
    lines = ["## Where the run's time went", "",
             f"{t['tests']} tests, {fmt.figure(t['test_seconds'], 's')} of test time (setup, call and teardown, summed "
             f"over workers; a test's setup includes the builds its fixtures waited for). Artifacts: {b['cold']} built "
             f"({fmt.num(b['cold_build_seconds'])} s), {b['reused']} reused.", "",
             *phase_lines(t.get("phase")),
             *fmt.table(["gate", "tests", "seconds", "share"], "lrrr")]
    lines += [fmt.row([g["gate"], g["tests"], fmt.num(g["seconds"]), fmt.pct(g["share"])]) for g in t["by_gate"]]
    lines += ["", "Test files taking the most time:", "", *fmt.table(["file", "tests", "seconds"], "lrr")]
    lines += [fmt.row([f"`{f['file']}`", f["tests"], fmt.num(f["seconds"])]) for f in t["by_file"]]
    if b["largest"]:
        lines += ["", "Largest builds in this run:", "", *fmt.table(["kind", "artifact", "build seconds"], "llr")]
        lines += [fmt.row([x["kind"], x["label"], fmt.num(x["build_seconds"])]) for x in b["largest"]]
    if b.get("reused_entries"):
        lines += ["", f"On an empty artifact store this run would also have built the {b['reused_entries']} entries it "
                      f"reused: {fmt.num(b['reused_build_seconds'])} s as recorded when each was built (by kind below; "
                      f"`bin/gatehouse cache export` carries them to another machine).", "",
                  *fmt.table(["kind", "entries", "build seconds"], "lrr")]
        lines += [fmt.row([k["kind"], k["entries"], fmt.num(k["build_seconds"])]) for k in b["reused_by_kind"]]
    return lines


def markdown(rep: Mapping[str, Any], views: Sequence[ReceiptView], run_dir: Path | str | None = None) -> str:
    """The whole report.md: ``rep`` is the report record, ``views`` the run's receipts after qualification,
    ``run_dir`` the run directory (the commands it names; RUN_DIR when None)."""
    sections = [_header(rep), _machines(rep), _variants(rep), _to_qualify(rep, run_dir), _recipes(rep)]
    sections += [_per_machine(spec, views) for spec in gates.GATES.values() if spec.section is not None]
    sections += [
        integrity.invalid_output_lines(views), integrity.machine_during_lines(views),
        _run_level(rep), _failing(rep), time_lines(rep.get("time")),
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
