"""A :class:`~harness.compare.rule.Comparison` for people: Markdown, the same as an HTML page, and the
terminal's summary.  Nothing here decides; every figure goes through :mod:`harness.fmt`.
"""

from __future__ import annotations

from typing import Sequence

from .. import fmt
from .rule import Comparison, Figure, QualityRow, VerdictRow
from .sides import RunSide
from .throughput import INTERLEAVING, SESSION_CAVEAT, ThroughputRow
from .stats import TEST_NAME

CHANGE_ORDER = {"regression": 0, "disappeared": 1, "changed": 2, "appeared": 3, "fixed": 4}
RESULT_ORDER = {"regression": 0, "slower": 1, "faster": 2, "unchanged": 3, "not tested": 4, "not compared": 5}


def _cell(text: object) -> str:
    """Text safe in a pipe-table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _harness(side: RunSide) -> str:
    if not side.harness:
        return "—"
    return "; ".join(f"`{str(sha)[:12]}…`" + (f" (git `{commit[:7]}`)" if commit else "") for sha, commit in side.harness)


def _campaign(side: RunSide) -> str:
    return f"{side.campaign_name or '—'} (`{str(side.campaign_sha256)[:12]}…`)"


def _machines(side: RunSide) -> str:
    return "; ".join(f"`{m.digest}` {m.label[len(m.digest) + 1:]}" for m in side.machines) or "—"


def _header(c: Comparison) -> list[str]:
    b, n = c.base, c.new
    crossed = c.crossed
    result = ("**Result: regression.** Crossed: " + ", ".join(f"`{x.threshold}` ({len(x.items)})" for x in crossed)
              if crossed else "**Result: no fail-on threshold crossed.**")
    lines = [f"# Gatehouse compare: {_sides(c)}", "", result, "",
             *fmt.table(["", "base", "new"], "lll")]
    if len(c.runs[0]) > 1 or len(c.runs[1]) > 1:
        lines.append(fmt.row(["runs (every session)", ", ".join(f"`{r}`" for r in c.runs[0]),
                              ", ".join(f"`{r}`" for r in c.runs[1])]))
    for label, fb, fn in (("run", f"`{b.run_id}`", f"`{n.run_id}`"), ("path", f"`{b.path}`", f"`{n.path}`"),
                          ("created", b.created_at or "—", n.created_at or "—"),
                          ("campaign", _campaign(b), _campaign(n)),
                          ("harness source SHA-256", _harness(b), _harness(n)),
                          ("machine fingerprint", _machines(b), _machines(n)),
                          ("receipts", f"{fmt.figure(b.receipts)} valid, {fmt.figure(b.invalid)} invalid, "
                                       f"{fmt.figure(b.stale)} stale",
                           f"{fmt.figure(n.receipts)} valid, {fmt.figure(n.invalid)} invalid, {fmt.figure(n.stale)} stale")):
        lines.append(fmt.row([label, _cell(fb), _cell(fn)]))
    p = c.policy
    machine = ("one machine fingerprint in both runs" if c.same_machine
               else "the runs do not share one machine fingerprint: only lane cells whose two receipts do are compared")
    lines += ["", "## How this comparison decides", "",
              f"- Throughput test: **{TEST_NAME}** of each lane cell's per-repeat decode tok/s, the new run's repeats "
              f"against the base run's; the exact distribution when no value is tied, else the normal approximation "
              f"with tie and continuity corrections.",
              f"- α = {fmt.figure(p.alpha)}, family-wise: Holm's correction across the {fmt.figure(c.tests)} throughput "
              f"test(s) of this comparison, so comparing many lanes × cells × variants does not inflate false alarms.",
              f"- Minimum samples: {fmt.figure(p.min_samples)} per side; a lane cell with fewer is not tested.",
              f"- Busy machine: a lane cell whose timing had other processes take more than "
              f"{fmt.pct(p.max_foreign_cpu)} of the CPU (its receipt's machine_during) in either run is not tested.",
              f"- Machine: throughput is compared only between receipts of one machine fingerprint; {machine}.",
              f"- Design: {INTERLEAVING}.",
              f"- Caveat: {SESSION_CAVEAT}.",
              f"- Session guard: a decode regression must also exceed how far sessions of the same code land apart on "
              f"this machine: the registered session_spread {fmt.pct(p.session_spread)}, or the largest drop between two "
              f"runs of one side (--base/--new repeated) when that is larger.",
              "- Fail-on thresholds" + (":" if c.thresholds else ": none (the comparison never fails)")]
    for x in c.thresholds:
        state = f"**crossed** by {fmt.figure(len(x.items))}" if x.items else "not crossed"
        lines.append(f"  - `{x.threshold}` ({x.description}): {state}")
        lines += [f"    - {item}" for item in x.items]
    if c.notes:
        lines += ["", "Notes:", "", *(f"- {note}" for note in c.notes)]
    return lines


def _verdicts(rows: Sequence[VerdictRow]) -> list[str]:
    changed = sorted((r for r in rows if r.change != "unchanged"),
                     key=lambda r: (CHANGE_ORDER.get(r.change, 9), str(r.model), str(r.dtype), r.gate, str(r.nodeid)))
    lines = ["## Verdicts", "",
             f"{fmt.figure(len(rows))} gate verdict(s) compared (each variant's gates, and each run-level receipt by node "
             f"id): {fmt.figure(len(rows) - len(changed))} unchanged, {fmt.figure(len(changed))} changed. The outcome is "
             f"the one recorded; a stale receipt (artifacts changed on disk since) is marked, not counted as a change."]
    if not changed:
        return lines

    def outcome(o, stale):
        return "no receipt" if o is None else o + (" (stale)" if stale else "")

    lines += ["", *fmt.table(["change", "model", "dtype", "gate", "receipt", "base", "new"], "lllllll")]
    for r in changed:
        lines.append(fmt.row([f"**{r.change}**" if r.change in ("regression", "disappeared") else r.change,
                              r.model or "—", r.dtype or "—", r.gate, f"`{r.nodeid}`" if r.scope == "run" else "—",
                              outcome(r.base, r.base_stale), outcome(r.new, r.new_stale)]))
    why = [r for r in changed if r.reasons and r.change in ("regression", "changed", "appeared")]
    if why:
        lines += ["", "Reasons the new run recorded:", ""]
        for r in why:
            lines.append(f"- {r.model or r.nodeid}{'-' + r.dtype if r.model and r.dtype else ''} / {r.gate}:")
            lines += [f"  - {reason}" for reason in r.reasons[:8]]
            if len(r.reasons) > 8:
                lines.append(f"  - … and {fmt.figure(len(r.reasons) - 8)} more")
    return lines


def _value(f: Figure | None, unit: str) -> str:
    if f is None:
        return "no figure"
    if f.counts is not None:
        return f"{fmt.counts({'numerator': f.counts[0], 'denominator': f.counts[1]})} ({fmt.pct(f.value)})"
    shown = fmt.pct(f.value) if unit == "%" else fmt.figure(f.value, unit)
    if f.stderr is not None:
        shown += " ± " + (fmt.pct(f.stderr) if unit == "%" else fmt.figure(f.stderr, unit))
    return shown


def _delta(r: QualityRow) -> str:
    if r.delta is None:
        return "—"
    if r.unit == "%":      # a difference of fractions: percentage points
        shown = fmt.figure(100 * r.delta, "pp", sign=True)
        return shown + (f" ± {fmt.figure(100 * r.delta_stderr, 'pp')}" if r.delta_stderr is not None else "")
    shown = fmt.figure(r.delta, r.unit, sign=True)
    return shown + (f" ± {fmt.figure(r.delta_stderr, r.unit)}" if r.delta_stderr is not None else "")


def _quality(rows: Sequence[QualityRow]) -> list[str]:
    lines = ["## Quality", ""]
    if not rows:
        return lines + ["Neither run recorded a quality figure (quantization or behavior receipts)."]
    lines += ["Per variant, base against new: the held-out relative loss increase, mean KL divergence and top-1 agreement "
              "(quantization gate; ± one standard error as recorded), the behavior quality index (/100) and greedy "
              "category rates as k/n (behavior gate). Δ is new − base, in percentage points (pp) for rates; its ± "
              "combines both standard errors as if the runs were independent.", "",
              *fmt.table(["model", "dtype", "figure", "base", "new", "Δ", "threshold"], "lllrrrl")]
    for r in rows:
        lines.append(fmt.row([r.model, r.dtype, r.figure, _value(r.base, r.unit), _value(r.new, r.unit), _delta(r),
                              ", ".join(f"**crossed {t}**" for t in r.crossed) or ""]))
    return lines


def _result(r: ThroughputRow) -> str:
    head = f"**{r.result}**" if r.result in ("regression", "slower") else r.result
    return _cell(f"{head}: {r.why}")


def _throughput(rows: Sequence[ThroughputRow]) -> list[str]:
    lines = ["## Throughput (decode tokens/s)", ""]
    if not rows:
        return lines + ["Neither run recorded a throughput lane."]
    tested = [r for r in rows if r.test is not None]
    counts = {k: sum(r.result == k for r in rows) for k in RESULT_ORDER}
    lines += [f"{fmt.figure(len(rows))} lane cell(s): {fmt.figure(len(tested))} tested "
              + "(" + ", ".join(f"{fmt.figure(v)} {k}" for k, v in counts.items() if v) + "). "
              "Median of the per-repeat rates where both runs recorded them (else the receipts' pooled rates, shown and "
              "not tested); change is new / base − 1; U counts the (new, base) repeat pairs where the new one was "
              "faster (ties one half; n_new × n_base / 2 when neither tends to be faster); p is two-sided, Holm p "
              "adjusted across this comparison's tests. Foreign CPU: other processes' share of the machine during "
              "each timing.", "",
              *fmt.table(["model", "dtype", "lane", "cell", "statistic", "base", "new", "change", "n base/new", "U", "p",
                          "Holm p", "session guard", "foreign CPU base/new", "result"], "lllllrrrrrrrrrl")]
    for r in sorted(rows, key=lambda r: (RESULT_ORDER.get(r.result, 9), str(r.model), str(r.dtype), r.lane, r.cell)):
        n_b = len(r.base.samples) if r.base is not None and r.base.samples is not None else None
        n_n = len(r.new.samples) if r.new is not None and r.new.samples is not None else None
        lines.append(fmt.row([
            r.model or "—", r.dtype or "—", r.lane, r.cell, r.statistic, fmt.num(r.base_value), fmt.num(r.new_value),
            fmt.pct(r.change, sign=True), f"{fmt.num(n_b)}/{fmt.num(n_n)}",
            fmt.num(r.test.u if r.test else None), fmt.num(r.test.p if r.test else None), fmt.num(r.p_holm),
            fmt.pct(r.guard) + (" (measured)" if r.guard_source.startswith("measured") else ""),
            f"{fmt.pct(r.base.foreign_cpu if r.base else None)}/{fmt.pct(r.new.foreign_cpu if r.new else None)}",
            _result(r)]))
    methods = sorted({r.test.method for r in tested})
    if methods:
        lines += ["", f"Distribution used: {', '.join(methods)}."]
    return lines


def _time(c: Comparison) -> list[str]:
    """The tool's own time, each side's test seconds in total and per gate (a gate from a minute on is compared)."""
    if not c.time:
        return []
    (nb, sb), (nn, sn) = c.builds
    lines = ["## The tool's own time", "",
             f"Test seconds summed over workers (setup, call and teardown). Artifacts built: base {nb} "
             f"({fmt.num(sb)} s), new {nn} ({fmt.num(sn)} s); a side that built what the other reused spends its "
             f"time building, so compare warm runs with warm runs.", "",
             *fmt.table(["gate", "base s", "new s", "change", "compared"], "lrrrl")]
    lines += [fmt.row([r.gate, fmt.num(r.base_seconds), fmt.num(r.new_seconds), fmt.pct(r.change, sign=True),
                       "yes" if r.compared else "no (under a minute, or one side only)"]) for r in c.time]
    return lines


def markdown(c: Comparison) -> str:
    """The whole comparison as Markdown: header (both runs, the test, alpha, minimum samples, thresholds and
    which were crossed), then verdicts, quality and throughput."""
    sections = [_header(c), _verdicts(c.verdicts), _quality(c.quality), _throughput(c.throughput), _time(c)]
    lines: list[str] = []
    for s in sections:
        lines += ([""] if lines else []) + s
    return "\n".join(lines) + "\n"


def html(c: Comparison) -> str:
    """The Markdown as one self-contained page (the report's CSS, no network link)."""
    from ..report.mdhtml import markdown_page

    return markdown_page(f"Gatehouse compare: {_sides(c)}", markdown(c))


def _sides(c: Comparison) -> str:
    """``base → new``, with how many more sessions each side holds (``aa7 (+2) → t1a (+2)``)."""
    def one(first: str, runs: tuple[str, ...]) -> str:
        return first + (f" (+{len(runs) - 1})" if len(runs) > 1 else "")
    return f"{one(c.base.run_id, c.runs[0])} → {one(c.new.run_id, c.runs[1])}"


def summary(c: Comparison) -> str:
    """The terminal's account: what changed, and each threshold crossed with what crossed it."""
    changed = [r for r in c.verdicts if r.change != "unchanged"]
    regressions = sum(r.change == "regression" for r in changed)
    slower = sum(r.result in ("regression", "slower") for r in c.throughput)
    faster = sum(r.result == "faster" for r in c.throughput)
    lines = [f"compare {_sides(c)}: {fmt.figure(len(changed))} verdict change(s) "
             f"({fmt.figure(regressions)} pass → fail), {fmt.figure(c.tests)} throughput test(s) "
             f"({fmt.figure(slower)} significantly slower, {fmt.figure(faster)} faster; α {fmt.figure(c.policy.alpha)} "
             f"after Holm), {fmt.figure(len(c.quality))} quality figure(s)"]
    if c.crossed:
        lines.append("regression: " + "; ".join(f"{x.threshold} crossed by {', '.join(x.items)}" for x in c.crossed))
    else:
        lines.append("no fail-on threshold crossed (" + (", ".join(str(x.threshold) for x in c.thresholds) or "none declared") + ")")
    return "\n".join(lines)
