"""Inline SVG charts for report.html: pure functions from figures to one ``<svg>`` string each.

No plotting library, no script, no network: a chart is text in the page, so report.html stays one file
that opens from disk.  Every number drawn (tick labels, tooltips) goes through :func:`harness.fmt.figure`;
every chart carries a ``<title>`` and ``<desc>`` (screen readers, and the tooltip of the whole chart) and
each mark its own ``<title>`` naming the figure it shows.  A chart is only drawn from data: the callers
omit a chart with nothing to show (an empty axis says nothing).
"""

from __future__ import annotations

import html as _html
import math
import statistics
from dataclasses import dataclass
from typing import Iterable, Sequence

from .. import fmt

WIDTH = 660
PALETTE = ("#0969da", "#bf3989", "#1a7f37", "#9a6700", "#8250df", "#cf222e", "#57606a")
FRONTIER, PASSED, FAILED, OFF = "#1a7f37", "#0969da", "#8c959f", "#6e7781"
_SCALED_UNITS = ("s", "ms", "B", "%")     # units fmt.figure scales itself; others go in the axis label


def esc(text: object) -> str:
    return _html.escape(str(text), quote=True)


def finite(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def label(value: float, unit: str = "") -> str:
    """A tick or tooltip figure: scaled units carry their unit (``80 ms``), any other unit is the axis's."""
    return fmt.figure(value, unit if unit in _SCALED_UNITS else "")


# -- scales ---------------------------------------------------------------------------------
def _nice(step: float) -> float:
    """The 1, 2, 5 × 10^k at or above ``step``."""
    power = 10 ** math.floor(math.log10(step))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= step * (1 - 1e-9))


def _power_of_ten(v: float) -> bool:
    return abs(math.log10(v) - round(math.log10(v))) < 1e-9


@dataclass(frozen=True)
class Scale:
    """A data interval mapped onto pixels ``a`` → ``b``, linear or logarithmic, with its ticks."""

    lo: float
    hi: float
    a: float
    b: float
    log: bool = False
    ticks: tuple[float, ...] = ()
    labelled: tuple[float, ...] = ()     # the ticks that carry a label

    def __call__(self, v: float) -> float:
        if self.log:
            t = (math.log10(v) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        else:
            t = (v - self.lo) / (self.hi - self.lo)
        return self.a + t * (self.b - self.a)


def scale(values: Iterable[float], a: float, b: float, *, log: bool | None = None,
          include: Iterable[float] = ()) -> Scale:
    """A scale that shows every value (and ``include``) on nice round ticks.  ``log=None`` chooses a log
    scale when the values are positive and span more than a factor of 30 (browser and native speeds on one
    axis), so the small ones stay readable."""
    vs = [v for v in (*values, *include) if finite(v)]
    if not vs:
        vs = [0.0, 1.0]
    lo, hi = min(vs), max(vs)
    if log is None:
        log = lo > 0 and hi / lo > 30
    if log and lo > 0:
        grid = [m * 10.0 ** e for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 2)
                for m in (1, 2, 5)]
        lo_t = max(t for t in grid if t <= lo * (1 + 1e-9))
        hi_t = min(t for t in grid if t >= hi * (1 - 1e-9) and t > lo_t)
        ticks = [t for t in grid if lo_t <= t <= hi_t]
        # past nine ticks only the powers of ten and the ends are labelled (the rest would run together)
        shown = ticks if len(ticks) <= 9 else [t for t in ticks if t in (lo_t, hi_t) or _power_of_ten(t)]
        return Scale(lo_t, hi_t, a, b, True, tuple(ticks), tuple(shown))
    if lo == hi:
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    step = _nice((hi - lo) / 5)
    lo, hi = math.floor(lo / step + 1e-9) * step, math.ceil(hi / step - 1e-9) * step
    n = round((hi - lo) / step)
    ticks = [round(lo + i * step, 12) for i in range(n + 1)]
    ticks = tuple(float(t) for t in ticks)
    return Scale(lo, hi, a, b, False, ticks, ticks)


# -- the frame every chart shares -----------------------------------------------------------------
def _open(ident: str, title: str, desc: str, height: float) -> list[str]:
    return [f'<svg class="chart" id="{esc(ident)}" role="img" aria-labelledby="{esc(ident)}-t {esc(ident)}-d" '
            f'width="{WIDTH}" height="{height:.0f}" viewBox="0 0 {WIDTH} {height:.0f}">',
            f'<title id="{esc(ident)}-t">{esc(title)}</title>', f'<desc id="{esc(ident)}-d">{esc(desc)}</desc>',
            f'<text x="{WIDTH / 2:.0f}" y="18" text-anchor="middle" font-weight="600">{esc(title)}</text>']


def _x_axis(sx: Scale, top: float, bottom: float, unit: str, axis_label: str) -> list[str]:
    out = [f'<line class="axis" x1="{sx.a:.1f}" x2="{sx.b:.1f}" y1="{bottom:.1f}" y2="{bottom:.1f}"/>']
    for t in sx.ticks:
        x = sx(t)
        out += [f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{top:.1f}" y2="{bottom:.1f}"/>',
                f'<line class="axis" x1="{x:.1f}" x2="{x:.1f}" y1="{bottom:.1f}" y2="{bottom + 4:.1f}"/>']
        if t in sx.labelled:
            out.append(f'<text x="{x:.1f}" y="{bottom + 16:.1f}" text-anchor="middle">{esc(label(t, unit))}</text>')
    mid = (sx.a + sx.b) / 2
    scale_note = " (log scale)" if sx.log else ""
    out.append(f'<text x="{mid:.1f}" y="{bottom + 34:.1f}" text-anchor="middle">{esc(axis_label + scale_note)}</text>')
    return out


def _y_axis(sy: Scale, left: float, right: float, unit: str, axis_label: str) -> list[str]:
    out = [f'<line class="axis" x1="{left:.1f}" x2="{left:.1f}" y1="{sy.b:.1f}" y2="{sy.a:.1f}"/>']
    for t in sy.ticks:
        y = sy(t)
        out += [f'<line class="grid" x1="{left:.1f}" x2="{right:.1f}" y1="{y:.1f}" y2="{y:.1f}"/>',
                f'<line class="axis" x1="{left - 4:.1f}" x2="{left:.1f}" y1="{y:.1f}" y2="{y:.1f}"/>']
        if t in sy.labelled:
            out.append(f'<text x="{left - 7:.1f}" y="{y + 4:.1f}" text-anchor="end">{esc(label(t, unit))}</text>')
    mid = (sy.a + sy.b) / 2
    out.append(f'<text transform="translate(14 {mid:.1f}) rotate(-90)" text-anchor="middle">{esc(axis_label)}</text>')
    return out


def _legend(items: Sequence[tuple[str, str]], x: float, y: float) -> list[str]:
    """``items``: (marker SVG drawn at 0,0, text) laid out left to right from (x, y)."""
    out = []
    for marker, text in items:
        out += [f'<g transform="translate({x:.1f} {y:.1f})">{marker}</g>',
                f'<text x="{x + 9:.1f}" y="{y + 4:.1f}">{esc(text)}</text>']
        x += 24 + 6.2 * len(text)
    return out


def _star(x: float, y: float, r: float, colour: str, tip: str = "") -> str:
    pts = " ".join(f"{x + (r if i % 2 == 0 else r * 0.45) * math.sin(i * math.pi / 5):.1f},"
                   f"{y - (r if i % 2 == 0 else r * 0.45) * math.cos(i * math.pi / 5):.1f}" for i in range(10))
    inner = f"<title>{esc(tip)}</title>" if tip else ""
    return f'<polygon points="{pts}" fill="{colour}" stroke="#fff" stroke-width="0.8">{inner}</polygon>'


def _circle(x: float, y: float, r: float, colour: str, tip: str = "", hollow: bool = False) -> str:
    fill = "#fff" if hollow else colour
    inner = f"<title>{esc(tip)}</title>" if tip else ""
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="{fill}" stroke="{colour}" stroke-width="1.5">{inner}</circle>'


def _diamond(x: float, y: float, r: float, colour: str, tip: str = "") -> str:
    inner = f"<title>{esc(tip)}</title>" if tip else ""
    return (f'<polygon points="{x:.1f},{y - r:.1f} {x + r:.1f},{y:.1f} {x:.1f},{y + r:.1f} {x - r:.1f},{y:.1f}" '
            f'fill="{colour}">{inner}</polygon>')


# -- scatter with the Pareto frontier ------------------------------------------------------------
@dataclass(frozen=True)
class Point:
    """One variant in a scatter: ``frontier`` and ``passed`` as the report decided them; ``x_err`` the
    interval drawn as a horizontal whisker (low, high), or None."""

    x: float
    y: float
    label: str
    frontier: bool = False
    passed: bool = True
    tip: str = ""
    x_err: tuple[float, float] | None = None


def _place_labels(anchors: Sequence[tuple[float, float, str]],
                  box: tuple[float, float, float, float]) -> list[tuple[float, float]]:
    """Where each point's label goes: beside its point, moved up or down until it overlaps no label
    placed before it (variants with near-equal figures would otherwise print on top of each other)."""
    placed: list[tuple[float, float, float, float]] = []
    out = []
    left, top, right, bottom = box
    for x, y, text in anchors:
        w = 6.2 * len(text)
        tx = x + 8 if x + 8 + w <= right else x - 8 - w
        for dy in (-6, 12, -18, 24, -30, 36, -42, 48, -54, 60, -66, 72):
            ty = min(max(y + dy, top + 10), bottom - 2)
            rect = (tx, ty - 10, tx + w, ty + 2)
            if not any(rect[0] < p[2] and p[0] < rect[2] and rect[1] < p[3] and p[1] < rect[3] for p in placed):
                break
        placed.append(rect)
        out.append((tx, ty))
    return out


def scatter(points: Sequence[Point], *, ident: str, title: str, desc: str, x_label: str, y_label: str,
            x_unit: str = "", y_unit: str = "", y_include: Sequence[float] = (), x_log: bool | None = None) -> str:
    """Points labelled by variant, the frontier's points as stars joined by a line in x order, failed
    variants hollow and grey; ``y_include`` widens the y axis (the quality index's 0 to 100)."""
    pts = [p for p in points if finite(p.x) and finite(p.y)]
    height, left, right, top, bottom = 380, 70, WIDTH - 30, 48, 380 - 48
    xs = [v for p in pts for v in (p.x, *(p.x_err or ())) if finite(v)]
    sx = scale(xs, left, right, log=x_log)
    sy = scale([p.y for p in pts], bottom, top, log=False, include=y_include)
    out = _open(ident, title, desc, height)
    out += _x_axis(sx, top, bottom, x_unit, x_label) + _y_axis(sy, left, right, y_unit, y_label)
    front = sorted((p for p in pts if p.frontier), key=lambda p: p.x)
    if len(front) > 1:
        path = " ".join(f"{sx(p.x):.1f},{sy(p.y):.1f}" for p in front)
        out.append(f'<polyline points="{path}" fill="none" stroke="{FRONTIER}" stroke-width="1.5" stroke-dasharray="5 3">'
                   f'<title>Pareto frontier</title></polyline>')
    for p in pts:
        if p.x_err and all(finite(v) for v in p.x_err):
            x0, x1, y = sx(max(p.x_err[0], sx.lo)), sx(min(p.x_err[1], sx.hi)), sy(p.y)
            out.append(f'<path d="M{x0:.1f} {y:.1f}H{x1:.1f}M{x0:.1f} {y - 4:.1f}v8M{x1:.1f} {y - 4:.1f}v8" '
                       f'stroke="{FRONTIER if p.frontier else PASSED if p.passed else FAILED}" fill="none"/>')
    for p in sorted(pts, key=lambda p: (p.frontier, p.passed)):    # frontier stars drawn last, on top
        x, y = sx(p.x), sy(p.y)
        tip = p.tip or p.label
        out.append(_star(x, y, 8, FRONTIER, tip) if p.frontier else _circle(x, y, 5, PASSED, tip) if p.passed
                   else _circle(x, y, 5, FAILED, tip, hollow=True))
    for p, (tx, ty) in zip(pts, _place_labels([(sx(p.x), sy(p.y), p.label) for p in pts], (left, top, right, bottom))):
        grey = "" if p.passed else f' fill="{OFF}"'
        out.append(f'<text x="{tx:.1f}" y="{ty:.1f}"{grey}>{esc(p.label)}</text>')
    out += _legend([(_star(0, 0, 6, FRONTIER), "Pareto frontier"), (_circle(0, 0, 4, PASSED), "passed every gate"),
                    (_circle(0, 0, 4, FAILED, hollow=True), "failed or incomplete")], left, 36)
    return "\n".join(out + ["</svg>"])


# -- point estimates with IQR whiskers, one row per subject ---------------------------------------
@dataclass(frozen=True)
class Interval:
    """A median with the interval drawn around it (its IQR), in one series (a workload cell, say)."""

    value: float
    low: float | None
    high: float | None
    series: str
    tip: str = ""


def whiskers(rows: Sequence[tuple[str, Sequence[Interval]]], *, ident: str, title: str, desc: str, x_label: str,
             unit: str = "", log: bool | None = None, label_width: int = 230) -> str:
    """A horizontal dot plot: one row per subject (label at the left), one dot per series with its whisker
    from ``low`` to ``high``; series are told apart by colour and a small vertical offset."""
    rows = [(name, [i for i in ivs if finite(i.value)]) for name, ivs in rows]
    rows = [(name, ivs) for name, ivs in rows if ivs]
    series = list(dict.fromkeys(i.series for _, ivs in rows for i in ivs))
    colour = {s: PALETTE[n % len(PALETTE)] for n, s in enumerate(series)}
    band = 8 + 10 * len(series)
    left, right, top = label_width, WIDTH - 20, 46
    bottom = top + band * len(rows) + 6
    height = bottom + 46
    values = [v for _, ivs in rows for i in ivs for v in (i.value, i.low, i.high) if finite(v)]
    sx = scale(values, left, right, log=log)
    out = _open(ident, title, desc, height) + _x_axis(sx, top, bottom, unit, x_label)
    for n, (name, ivs) in enumerate(rows):
        y0 = top + 6 + n * band
        if n % 2:
            out.append(f'<rect x="{left}" y="{y0 - 3:.1f}" width="{right - left}" height="{band}" fill="#f6f8fa"/>')
        out.append(f'<text x="{left - 8}" y="{y0 + band / 2 + 1:.1f}" text-anchor="end">{esc(name)}</text>')
        for i in ivs:
            y, c = y0 + 6 + 10 * series.index(i.series), colour[i.series]
            clip = lambda v: min(max(v, sx.lo), sx.hi)   # noqa: E731  (a whisker never leaves the axis)
            if finite(i.low) and finite(i.high) and (not sx.log or i.low > 0):
                x0, x1 = sx(clip(i.low)), sx(clip(i.high))
                out.append(f'<path d="M{x0:.1f} {y:.1f}H{x1:.1f}M{x0:.1f} {y - 3:.1f}v6M{x1:.1f} {y - 3:.1f}v6" '
                           f'stroke="{c}" fill="none"/>')
            out.append(_circle(sx(i.value), y, 3.5, c, i.tip))
    out += _legend([(_circle(0, 0, 3.5, colour[s]), s) for s in series], left, 34)
    return "\n".join(out + ["</svg>"])


# -- the win rule: OFF / ON / OFF per repeat ---------------------------------------------------------
def off_on_off(control_first: Sequence[float], candidate: Sequence[float], control_last: Sequence[float], *,
               ident: str, title: str, desc: str, y_label: str, unit: str = "") -> str:
    """One repeat per column: the control before (OFF), the candidate (ON) and the control after (OFF),
    joined in time order, so a drift between the two OFFs shows beside the change the ON makes."""
    n = max(len(control_first), len(candidate), len(control_last))
    height, left, right, top, bottom = 300, 70, WIDTH - 20, 48, 300 - 48
    values = [v for seq in (control_first, candidate, control_last) for v in seq if finite(v)]
    sy = scale(values, bottom, top, log=False)
    step = (right - left) / max(n, 1)
    out = _open(ident, title, desc, height) + _y_axis(sy, left, right, unit, y_label)
    out.append(f'<line class="axis" x1="{left}" x2="{right}" y1="{bottom}" y2="{bottom}"/>')
    for r in range(n):
        cx = left + step * (r + 0.5)
        out.append(f'<text x="{cx:.1f}" y="{bottom + 16}" text-anchor="middle">{esc(fmt.figure(r + 1))}</text>')
        at = lambda seq: seq[r] if r < len(seq) else None   # noqa: E731
        trio = [(cx - step * 0.22, at(control_first), "OFF before"), (cx, at(candidate), "ON"),
                (cx + step * 0.22, at(control_last), "OFF after")]
        drawn = [(x, v, name) for x, v, name in trio if finite(v)]
        if len(drawn) > 1:
            out.append(f'<polyline points="{" ".join(f"{x:.1f},{sy(v):.1f}" for x, v, _ in drawn)}" fill="none" '
                       f'stroke="#afb8c1"/>')
        for x, v, name in drawn:
            tip = f"repeat {fmt.figure(r + 1)} {name}: {fmt.figure(v, unit)}"
            out.append(_diamond(x, sy(v), 6, PALETTE[1], tip) if name == "ON" else
                       _circle(x, sy(v), 4, OFF, tip, hollow=name == "OFF after"))
    out.append(f'<text x="{(left + right) / 2:.1f}" y="{bottom + 34}" text-anchor="middle">repeat</text>')
    out += _legend([(_circle(0, 0, 4, OFF), "OFF before"), (_diamond(0, 0, 6, PALETTE[1]), "ON (candidate)"),
                    (_circle(0, 0, 4, OFF, hollow=True), "OFF after")], left, 36)
    return "\n".join(out + ["</svg>"])


# -- a distribution per group: box (quartiles), whiskers (range), every value as a dot ------------------
def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    """(first quartile, median, third quartile), inclusive method (a single value is all three)."""
    vs = sorted(values)
    if len(vs) == 1:
        return vs[0], vs[0], vs[0]
    q1, q2, q3 = statistics.quantiles(vs, n=4, method="inclusive")
    return q1, q2, q3


def distribution(groups: Sequence[tuple[str, Sequence[float]]], *, ident: str, title: str, desc: str,
                 x_label: str, unit: str = "", reference: tuple[float, str] | None = None, log: bool | None = None,
                 label_width: int = 200) -> str:
    """One row per group: a box from the first to the third quartile with the median marked, a whisker
    from the smallest to the largest value, and every value a dot (spread vertically so repeats show);
    ``reference`` is a vertical line with its label (the token period, say)."""
    groups = [(name, [v for v in vs if finite(v) and (log is not True or v > 0)]) for name, vs in groups]
    groups = [(name, vs) for name, vs in groups if vs]
    band, left, right, top = 30, label_width, WIDTH - 20, 40
    bottom = top + band * len(groups) + 4
    height = bottom + 46
    values = [v for _, vs in groups for v in vs]
    include = [reference[0]] if reference and finite(reference[0]) else []
    sx = scale(values, left, right, log=log, include=include)
    out = _open(ident, title, desc, height) + _x_axis(sx, top, bottom, unit, x_label)
    for n, (name, vs) in enumerate(groups):
        y = top + 4 + n * band + band / 2
        q1, med, q3 = quartiles(vs)
        tip = (f"{name}: median {fmt.figure(med, unit)}, IQR {fmt.figure(q3 - q1, unit)}, "
               f"range {fmt.figure(min(vs), unit)} to {fmt.figure(max(vs), unit)}, n = {fmt.figure(len(vs))}")
        out.append(f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end">{esc(name)}</text>')
        out.append(f'<line x1="{sx(min(vs)):.1f}" x2="{sx(max(vs)):.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke="#57606a"/>')
        for k, v in enumerate(vs):
            jitter = ((k * 7919) % 11 - 5) * 1.4
            out.append(f'<circle cx="{sx(v):.1f}" cy="{y + jitter:.1f}" r="1.6" fill="{PALETTE[0]}" fill-opacity="0.45"/>')
        out.append(f'<rect x="{sx(q1):.1f}" y="{y - 8:.1f}" width="{max(sx(q3) - sx(q1), 1.5):.1f}" height="16" '
                   f'fill="{PALETTE[0]}" fill-opacity="0.15" stroke="{PALETTE[0]}"><title>{esc(tip)}</title></rect>')
        out.append(f'<line x1="{sx(med):.1f}" x2="{sx(med):.1f}" y1="{y - 9:.1f}" y2="{y + 9:.1f}" stroke="{PALETTE[1]}" '
                   f'stroke-width="2.5"><title>{esc(tip)}</title></line>')
    if include:
        x = sx(reference[0])
        out += [f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top - 4}" y2="{bottom:.1f}" stroke="{PALETTE[5]}" '
                f'stroke-dasharray="4 3"><title>{esc(reference[1])}</title></line>',
                f'<text x="{x - 4:.1f}" y="{top - 6}" text-anchor="end" fill="{PALETTE[5]}">{esc(reference[1])}</text>']
    return "\n".join(out + ["</svg>"])
