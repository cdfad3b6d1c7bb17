"""Renderings of a Decision: a Markdown table for reports and a per-repeat chart drawn with matplotlib."""

from __future__ import annotations

import math
from pathlib import Path

from .decision import Decision, Series


def _value(v: float | None) -> str:
    if v is None or not math.isfinite(v):
        return "—"
    return f"{v:.6g}"


def percent(fraction: float) -> str:
    """``+1.23%``; a change that rounds to zero is ``+0.00%``, never ``-0.00%``."""
    return f"{0.0 if abs(fraction) < 5e-5 else fraction:+.2%}"


def _change(series: Series, repeat: int) -> str:
    if series.result is None:
        return "—"
    return percent(math.expm1(series.result.gains[repeat]))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(decision: Decision) -> str:
    """The decision record as Markdown: verdict, reasons, one table row per series and repeat, then context.

    Renders only what the Decision holds, so the table and the JSON record can
    never disagree.  ``change`` is the oriented gain (positive is better).
    """
    reg = decision.registration
    lines = [f"### Win rule `{reg.key}`: **{decision.verdict}**", ""]
    if decision.verdict_before_override is not None and decision.verdict_before_override != decision.verdict:
        lines += [f"Before the override the rule said **{decision.verdict_before_override}**.", ""]
    lines += [f"Required effect {reg.required_effect:.2%}; alpha {reg.alpha:g}; {reg.repeats} repeats of "
              f"{reg.waves_per_repeat} waves; primary `{reg.primary.name}` "
              f"({'higher' if reg.primary.higher_is_better else 'lower'} is better).", ""]
    if decision.reasons:
        lines += [f"Reasons for {decision.verdict}:", ""] + [f"- {_cell(r)}" for r in decision.reasons] + [""]
    lines += [f"Outputs: {_cell(decision.outputs)}.", ""]
    if decision.looks:
        lines += ["Stopping rule: " + "; ".join(f"{x.repeats} repeats at alpha {x.alpha:g} → {x.verdict}"
                                                for x in decision.looks)
                  + f" (looks registered at {', '.join(map(str, reg.looks))} repeats).", ""]
    if decision.bad_evidence:
        lines += ["Bad evidence in reported metrics (named; they decide nothing):", ""] + \
                 [f"- {_cell(r)}" for r in decision.bad_evidence] + [""]
    if decision.blocked_by:
        lines += ["Blocked by guards:", ""] + [f"- {_cell(b)}" for b in decision.blocked_by] + [""]
    starts = ", ".join(f"`{s.label}` ({s.role}, {s.config})" for s in decision.starts)
    lines += [f"Starts: {starts or 'none'}.", ""]
    lines += ["| cell | metric | role | repeat | control first | candidate | control last | control "
              "| change (+ is better) | verdict |", "|---|---|---|---|---|---|---|---|---|---|"]
    for s in decision.series:
        n = max(len(s.control_first), len(s.candidate), len(s.control_last), 1)
        for r in range(n):
            pick = (lambda xs: xs[r] if r < len(xs) else None)
            verdict = (s.verdict or "—") if r == 0 else ""
            lines.append(f"| {_cell(s.cell)} | {_cell(s.metric)} ({_cell(s.unit)}) | {s.role} | {r} "
                         f"| {_value(pick(s.control_first))} | {_value(pick(s.candidate))} "
                         f"| {_value(pick(s.control_last))} | {_value(pick(s.control))} "
                         f"| {_change(s, r) if r < len(s.control) else '—'} | {verdict} |")
    lines.append("")
    spreads = [s for s in decision.series if s.role == "primary"]
    if spreads:
        lines.append("OFF/OFF spread of the primary: " + "; ".join(
            f"{s.cell} {'—' if s.off_off_spread is None else percent(s.off_off_spread)}" for s in spreads) + ".")
        lines.append("")
    if decision.alternatives:
        lines.append("With another primary: " + "; ".join(
            f"`{m}` → {v or '—'}" for m, v in sorted(decision.alternatives.items())) + ".")
        lines.append("")
    for spread in decision.archive_spreads:
        d = spread.definition
        figure = "fewer than 2 days" if spread.spread is None else f"{spread.spread:.2%}"
        lines.append(f"Archive day-to-day spread of `{d.metric}` in `{d.cell}` ({spread.days} days, "
                     f"{spread.rows} values): {figure} against the required {spread.required_effect:.2%}.")
    if decision.drift is not None:
        lines.append(f"Drift checked: {', '.join(decision.drift.checked) or 'nothing'}; "
                     f"not exposed: {', '.join(decision.drift.absent) or 'nothing'}.")
        for key, why in decision.drift.waived:
            lines.append(f"Waived by the campaign: `{key}` ({_cell(why)}).")
    sampled = [s for s in decision.starts if s.samples]
    if sampled:
        keys = ("steal_fraction", "iowait_fraction", "foreign_cpu_share", "run_queue_mean", "cpu_mhz_min",
                "cpu_mhz_max", "sampled_seconds")
        lines += ["", "The machine sampled during each start:", "", "| start | " + " | ".join(keys) + " |",
                  "|---|" + "---|" * len(keys)]
        for s in sampled:
            got = dict(s.samples)
            lines.append(f"| {_cell(s.label)} | " + " | ".join(
                "—" if got.get(k) is None else f"{got[k]:.4g}" for k in keys) + " |")
    return "\n".join(lines).rstrip() + "\n"


def draw_chart(decision: Decision, path: Path | str) -> Path:
    """Per-repeat chart of every decision series (primary and guards): both controls, the candidate, the pairing.

    Uses matplotlib's object API on an Agg canvas, never pyplot, so it sets no
    global backend and is safe inside a pytest session.  Returns ``path``.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = Path(path)
    shown = [s for s in decision.series if s.role != "reported"]
    rows = max(len(shown), 1)
    fig = Figure(figsize=(7.0, 2.4 * rows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, 1, squeeze=False)[:, 0]
    if not shown:
        axes[0].text(0.5, 0.5, "no series", ha="center", va="center")
        axes[0].set_axis_off()
    for ax, s in zip(axes, shown):
        for values, label, style in ((s.control_first, "control first", "o--"),
                                     (s.control_last, "control last", "s--"),
                                     (s.control, "control (paired mean)", "-"),
                                     (s.candidate, "candidate", "D-")):
            points = [(i, v) for i, v in enumerate(values) if math.isfinite(v)]
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, style, label=label)
        ax.set_title(f"{s.cell} · {s.metric} ({s.role}): {s.verdict or '—'}", fontsize=9)
        ax.set_xlabel("repeat")
        ax.set_xticks(range(max(len(s.control_first), len(s.candidate), len(s.control_last), 1)))
        ax.set_ylabel(f"{s.unit} ({'higher' if s.higher_is_better else 'lower'} is better)", fontsize=8)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{decision.registration.key}: {decision.verdict}", fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path
