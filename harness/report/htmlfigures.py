"""report.html's figures as inline SVG (:mod:`.svg`): quality against speed and size, decode speed per lane,
the win rule's OFF/ON/OFF repeats and the streaming protocol's batch latency.

The win rule's and the streaming protocol's charts read the receipts' evidence files; a chart that has
nothing to draw is replaced by a note saying why.  Nothing here decides.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from .. import fmt
from . import svg
from .htmltables import receipt_href, run_href
from .mdhtml import esc


def _figure(chart: str, caption: str) -> str:
    return f'<figure class="plot">{chart}<figcaption>{caption}</figcaption></figure>'


def note(text: str) -> str:
    return f'<p class="note">{esc(text)}</p>'


def _variant_points(rep: Mapping[str, Any], x_of) -> list[svg.Point]:
    pts = []
    for r in rep["variants"]:
        qi, (x, err, what) = r["figures"].get("quality_index"), x_of(r)
        if svg.finite(qi) and svg.finite(x):
            name = f"{r['model']}-{r['dtype']}"
            tip = (f"{name}: quality {fmt.figure(qi)} /100, {what}; {r['status']}"
                   + ("; on the Pareto frontier" if r.get("frontier") else "")
                   + ("" if r["passed_all_gates"] else "; did not pass every gate"))
            pts.append(svg.Point(x, qi, name + ("" if r["passed_all_gates"] else " (failed)"), bool(r.get("frontier")),
                                 bool(r["passed_all_gates"]), tip, err))
    return pts


def _speed(r: Mapping[str, Any]):
    s = r.get("speed") or {}
    tok, iqr = s.get("decode_tok_s"), s.get("decode_tok_s_iqr")
    err = (tok - iqr / 2, tok + iqr / 2) if svg.finite(tok) and svg.finite(iqr) else None
    what = f"decode {fmt.figure(tok, 'tok/s')} (IQR {fmt.figure(iqr, 'tok/s')}, {s.get('lane')} lane, {s.get('cell')} prompt)"
    return tok, err, what


def _size(r: Mapping[str, Any]):
    return r["graph_bytes"] or None, None, f"graph {fmt.figure(r['graph_bytes'] or None, 'B')}"


def quality_charts(rep: Mapping[str, Any]) -> list[str]:
    """Quality index against decode speed and against graph size, the report's frontier marked."""
    dims = ", ".join(rep.get("frontier_dimensions") or []) or "—"
    frontier = (f"Stars: the Pareto frontier as the report decided it (over {esc(dims)}, among variants that passed "
                f"every gate); hollow grey: failed or incomplete.")
    out = []
    pts = _variant_points(rep, _speed)
    if pts:
        out.append(_figure(svg.scatter(pts, ident="plot-quality-speed", title="Quality vs decode speed",
                                       desc="Quality index (/100) against decode tokens per second, one point per variant.",
                                       x_label="decode tokens/s (speed-rank lane, short prompt)", y_label="quality index /100",
                                       y_include=(0, 100)),
                           f"{frontier} Horizontal whiskers: the IQR of the repeats, centred on the median (receipts "
                           f"record the IQR's width)."))
    else:
        out.append(note("Quality vs decode speed: no variant has both a quality index and a decode speed; chart omitted."))
    pts = _variant_points(rep, _size)
    if pts:
        out.append(_figure(svg.scatter(pts, ident="plot-quality-size", title="Quality vs graph size",
                                       desc="Quality index (/100) against the ONNX graph's size on disk, one point per variant.",
                                       x_label="graph size", x_unit="B", y_label="quality index /100", y_include=(0, 100)),
                           frontier))
    else:
        out.append(note("Quality vs graph size: no variant has both a quality index and a graph size; chart omitted."))
    return out


def lane_chart(rep: Mapping[str, Any], views: Sequence[Any]) -> list[str]:
    """Decode tokens/s per lane and workload cell, median with its IQR as a whisker."""
    by_node = {v.nodeid: v for v in views}
    rows = []
    lanes = [v.lane for v in views if v.lane is not None]
    for row in sorted(lanes, key=lambda r: (str(r.model), str(r.dtype), r.lane, r.nodeid)):
        view, ivs = by_node.get(row.nodeid), []
        for cell, figures in sorted(row.cells.items()):
            tok, iqr = figures.decode_tok_s, figures.decode_tok_s_iqr
            if not svg.finite(tok):
                continue
            lane = (view.data.get("lane") or {}) if view is not None and view.version >= 2 else {}
            n = ((lane.get("cells") or {}).get(cell) or {}).get("repeats")
            tip = (f"{row.model}-{row.dtype} {row.lane}, {cell} prompt: median {fmt.figure(tok, 'tok/s')}, "
                   f"IQR {fmt.figure(iqr, 'tok/s')}" + (f", {fmt.figure(n)} repeats" if isinstance(n, int) else "")
                   + f" ({row.outcome})")
            half = iqr / 2 if svg.finite(iqr) else None
            ivs.append(svg.Interval(tok, None if half is None else tok - half, None if half is None else tok + half,
                                    f"{cell} prompt", tip))
        if ivs:
            rows.append((f"{row.model}-{row.dtype} · {row.lane}", ivs))
    if not rows:
        return [note("Decode speed per lane: no lane receipt has a decode speed; chart omitted.")]
    return [_figure(svg.whiskers(rows, ident="plot-lanes", title="Decode tokens/s per lane and prompt",
                                 desc="Median decode tokens per second of each lane's repeats, with the IQR as a whisker.",
                                 x_label="decode tokens/s"),
                    "Dots: the median over the lane's repeats; whiskers: the IQR's width centred on the median (receipts "
                    "record the width, not the quartiles). Every lane ran the same workload in the same run.")]


def _evidence_file(run: Any, view: Any, name: str) -> Path:
    return run.path / view.evidence / name


def winrule_charts(views: Sequence[Any], run: Any | None) -> list[str]:
    """Each win-rule window's primary and guard metrics per cell: OFF, ON, OFF per repeat, from the decision
    record in the receipt's evidence (``decision.json`` beside the ``decision.md`` the receipt names)."""
    from ..errors import ReceiptError
    from ..jsonfile import load

    windows = [v for v in views if v.winrule]
    if not windows:
        return [note("Win rule: no receipt holds a win-rule decision; charts omitted.")]
    if run is None:
        return [note("Win rule: the per-repeat figures are in each window's evidence, and no run directory was given; "
                      "charts omitted.")]
    out, n = [], 0
    for v in windows:
        w = v.winrule
        name = Path(w["markdown"]).with_suffix(".json").name
        path = _evidence_file(run, v, name)
        try:
            decision = load(path, "win-rule decision record")
            series = decision.get("series") if isinstance(decision, Mapping) else None
            if not isinstance(series, list):
                raise ReceiptError(f"{path}: series: expected a list, got {type(series).__name__}")
        except ReceiptError as exc:
            out.append(note(f"Win rule {v.nodeid}: no chart ({exc})."))
            continue
        record = f'<a href="{run_href(v.evidence + "/" + w["markdown"])}">{esc(w["markdown"])}</a>'
        for s in series:
            if not isinstance(s, Mapping) or s.get("role") not in ("primary", "guard"):
                continue
            n += 1
            unit = {"tokens/s": "tok/s"}.get(s.get("unit"), s.get("unit") or "")
            stat = s.get("statistic") or {}
            changes = stat.get("changes_fraction") or []
            better = "higher" if s.get("higher_is_better") else "lower"
            title = (f"{v.model}-{v.dtype} window {w['window']}: {s.get('cell')} {s.get('metric')} ({s.get('role')}) "
                     f"{s.get('verdict') or '—'}")
            chart = svg.off_on_off(s.get("control_first") or [], s.get("candidate") or [], s.get("control_last") or [],
                                   ident=f"plot-winrule-{n}", title=title,
                                   desc=f"{s.get('metric')} per repeat: control before, candidate, control after.",
                                   y_label=f"{s.get('metric')} ({unit}, {better} is better)", unit=unit)
            caption = (f"Window <strong>{esc(w['window'])}</strong>: {esc(w['verdict'])} (expected {esc(w['expected'])}); "
                       f"this {esc(s.get('role'))} metric: {esc(s.get('verdict') or '—')}. Change per repeat (+ is better): "
                       f"{esc(', '.join(fmt.pct(c, sign=True) for c in changes) or '—')}; OFF/OFF spread "
                       f"{esc(fmt.pct(s.get('off_off_spread_fraction'), sign=True))}; required effect "
                       f"{esc(fmt.pct(s.get('required_effect_fraction')))}. Record: {record}, "
                       f'<a href="{run_href(receipt_href(v.nodeid))}">receipt</a>.')
            out.append(_figure(chart, caption))
    if not n and not out:
        out.append(note("Win rule: the decision records hold no primary or guard series; charts omitted."))
    return out


def _case(nodeid: str) -> str:
    return nodeid.split("[", 1)[-1].rstrip("]") if "[" in nodeid else nodeid.split("::")[-1]


def streaming_latencies(events: Iterable[Mapping[str, Any]]) -> list[float]:
    """Seconds from each steady-state batch's audio being ready to its result (``finished_seconds`` −
    ``source_audio_ready_seconds``): batches after the first window and before end of input."""
    return [e["finished_seconds"] - e["source_audio_ready_seconds"] for e in events
            if e.get("kind") == "batch" and e.get("start_window", 0) > 0 and not e.get("input_eof")
            and svg.finite(e.get("finished_seconds")) and svg.finite(e.get("source_audio_ready_seconds"))]


def _read_jsonl(path: Path) -> list[Any]:
    from ..errors import ReceiptError
    from ..jsonfile import loads

    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ReceiptError(f"{path}: cannot read the event log: {exc.strerror or exc}") from None
    return [loads(line, f"{path}:{n}") for n, line in enumerate(raw.split(b"\n"), 1) if line.strip()]


def streaming_chart(views: Sequence[Any], run: Any | None) -> list[str]:
    """The streaming protocol's per-batch latency, one row per profile and case, from each receipt's event
    log (``extra.logs.events`` in its evidence)."""
    from ..errors import ReceiptError

    mine = [v for v in views if isinstance(v.extra.get("logs"), Mapping) and v.extra["logs"].get("events")
            and v.outcome != "skip"]
    if not mine:
        return [note("Streaming latency: no receipt names a streaming event log; chart omitted.")]
    if run is None:
        return [note("Streaming latency: the per-batch timings are in each case's evidence, and no run directory was "
                      "given; chart omitted.")]
    groups, problems, period = [], [], None
    for v in sorted(mine, key=lambda v: _case(v.nodeid)):
        try:
            values = streaming_latencies(e for e in _read_jsonl(_evidence_file(run, v, v.extra["logs"]["events"]))
                                         if isinstance(e, Mapping))
        except ReceiptError as exc:
            problems.append(str(exc))
            continue
        if values:
            groups.append((_case(v.nodeid), values))
        period = period if period is not None else v.value("token_period_seconds")
    out = []
    if groups:
        reference = (period, f"token period {fmt.figure(period, 's')}") if svg.finite(period) else None
        out.append(_figure(svg.distribution(groups, ident="plot-streaming", title="Streaming: batch latency after its audio",
                                            desc="Seconds from each batch's audio being ready to its result, per case.",
                                            x_label="finished − audio ready", unit="s", reference=reference),
                           "Box: first to third quartile, the median marked; line: smallest to largest; dots: every "
                           "steady-state batch (after the first window, before end of input) of the case's event log."))
    else:
        out.append(note("Streaming latency: no event log holds a steady-state batch; chart omitted."))
    out += [note(f"Streaming latency: {p}") for p in problems]
    return out
