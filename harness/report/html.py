"""report.html: the report record rendered as one self-contained page, and the Markdown it shares with report.md.

:func:`markdown_page` turns the Markdown subset Gatehouse emits (headings, paragraphs, nested bullets,
pipe tables, code, bold, links, images, block quotes) into a whole page with the report's CSS, so any
Markdown Gatehouse writes opens in a browser from disk.  Everything is escaped, and a link to a network
host is never emitted (its text is kept, the link dropped): the page works offline and leaks nothing.

:func:`html` is report.html: report.md's sections in report.md's order (converted from its Markdown, so
the two never disagree), the variants table made sortable with each gate's outcome linking its receipt,
the figures as inline SVG (:mod:`.svg`; the win rule's and the streaming protocol's read the receipts'
evidence files), and every receipt with links to its file and evidence folder.  Nothing here decides:
it renders the report record and the receipt views, every figure through :func:`.fmt.figure`.
"""

from __future__ import annotations

import html as _html
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence
from urllib.parse import quote

from .. import fmt
from ..rundir import receipt_filename
from . import svg

CSS = """
:root { --fg: #1b1f24; --muted: #5b6470; --line: #d5d9de; --head: #f2f4f6; --pass: #1a7f37; --fail: #cf222e;
        --skip: #9a6700; --link: #0550ae; --accent: #0969da; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: var(--fg);
       margin: 0 auto; padding: 1.5rem 2rem 4rem; max-width: 1500px; }
h1 { font-size: 1.6rem; margin: .2rem 0 1rem; }
h2 { font-size: 1.25rem; margin: 2.2rem 0 .6rem; padding-bottom: .25rem; border-bottom: 1px solid var(--line); }
h3 { font-size: 1.05rem; margin: 1.5rem 0 .4rem; }
h4 { font-size: .95rem; margin: 1.2rem 0 .3rem; }
p, ul, blockquote { margin: .5rem 0; }
ul { padding-left: 1.4rem; }
a { color: var(--link); }
code { font: 12.5px/1.3 ui-monospace, "DejaVu Sans Mono", monospace; background: #eef1f4; padding: 0 .25em;
       border-radius: 3px; word-break: break-all; }
blockquote { border-left: 4px solid var(--skip); background: #fff8e5; padding: .4rem .8rem; }
.wrap { overflow-x: auto; margin: .6rem 0; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid var(--line); padding: .25rem .5rem; vertical-align: top; }
th { background: var(--head); text-align: left; white-space: nowrap; }
td.r, th.r { text-align: right; font-variant-numeric: tabular-nums; }
td.r { white-space: nowrap; }
tbody tr:nth-child(even) { background: #fafbfc; }
th[data-sortable] { cursor: pointer; user-select: none; }
th[data-sortable]::after { content: " \\2195"; color: var(--muted); font-size: .8em; }
th[aria-sort="ascending"]::after { content: " \\2191"; color: var(--fg); }
th[aria-sort="descending"]::after { content: " \\2193"; color: var(--fg); }
.pass { color: var(--pass); } .fail, .error { color: var(--fail); font-weight: 600; }
.skip, .skipped, .incomplete { color: var(--skip); }
.why { display: block; color: var(--muted); font-size: 11px; min-width: 9rem; max-width: 16rem; white-space: normal; }
table.sortable th { white-space: normal; vertical-align: bottom; }
table.sortable td { white-space: nowrap; }
.iqr { color: var(--muted); font-size: 11.5px; }
.note { color: var(--muted); font-style: italic; }
nav.toc { font-size: 13px; columns: 3 18rem; margin: .6rem 0 1rem; }
nav.toc a { display: block; }
.plots { display: flex; flex-wrap: wrap; gap: 1rem; }
figure.plot { margin: 0; }
figure.plot figcaption { color: var(--muted); font-size: 12px; max-width: 640px; }
svg.chart { background: #fff; border: 1px solid var(--line); }
svg.chart text { font: 11px system-ui, "DejaVu Sans", sans-serif; fill: var(--fg); }
svg.chart .axis { stroke: #8c959f; } svg.chart .grid { stroke: #eaeef2; }
img { max-width: 100%; }
"""

_NETWORK = re.compile(r"^\s*(?:[a-z][a-z0-9+.-]*:)?//", re.IGNORECASE)
_SCHEME = re.compile(r"^\s*[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def safe_href(href: str) -> str | None:
    """``href`` when it is a relative link or a fragment, else None: no network host (``http://``,
    ``//host``), no ``javascript:``/``data:``/``file:`` scheme (the page must open the same from any disk)."""
    if _NETWORK.match(href) or _SCHEME.match(href):
        return None
    return href


def esc(text: object) -> str:
    """Text (and attribute values) escaped for HTML, quotes included."""
    return _html.escape(str(text), quote=True)


_INLINE = re.compile(
    r"(?P<code>`+)(?P<codetext>.+?)(?P=code)"                 # `code` (backticks may be doubled)
    r"|!\[(?P<alt>[^\]]*)\]\((?P<src>[^)\s]*)\)"             # ![alt](src)
    r"|\[(?P<text>[^\]]+)\]\((?P<href>[^)\s]*)\)"            # [text](href)
    r"|\*\*(?P<bold>.+?)\*\*")                                 # **bold**


def inline(text: str) -> str:
    """One line of Markdown's inline syntax as HTML; everything else is escaped text."""
    out, pos = [], 0
    for m in _INLINE.finditer(text):
        out.append(esc(text[pos:m.start()]))
        pos = m.end()
        if m.group("code"):
            out.append(f"<code>{esc(m.group('codetext').strip())}</code>")
        elif m.group("src") is not None:
            src = safe_href(m.group("src"))
            out.append(f'<img src="{esc(src)}" alt="{esc(m.group("alt"))}">' if src else esc(m.group("alt")))
        elif m.group("href") is not None:
            href, label = safe_href(m.group("href")), inline(m.group("text"))
            out.append(f'<a href="{esc(href)}">{label}</a>' if href else label)
        else:
            out.append(f"<strong>{inline(m.group('bold'))}</strong>")
    out.append(esc(text[pos:]))
    return "".join(out)


def _cells(line: str) -> list[str]:
    """A pipe-table row's cells (``|`` inside backticks is kept; ``\\|`` is a literal bar)."""
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    cells, cur, in_code = [], [], False
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body) and body[i + 1] == "|":
            cur.append("|")
            i += 2
            continue
        if ch == "`":
            in_code = not in_code
        if ch == "|" and not in_code:
            cells.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
        i += 1
    cells.append("".join(cur).strip())
    return cells


_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def _md_table(lines: list[str]) -> str:
    header, aligns = _cells(lines[0]), ["r" if c.endswith(":") else "" for c in _cells(lines[1])]

    def cls(i: int) -> str:
        return ' class="r"' if i < len(aligns) and aligns[i] else ""

    head = "".join(f"<th{cls(i)}>{inline(c)}</th>" for i, c in enumerate(header))
    body = "".join("<tr>" + "".join(f"<td{cls(i)}>{inline(c)}</td>" for i, c in enumerate(_cells(row))) + "</tr>\n"
                   for row in lines[2:])
    return f'<div class="wrap"><table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody></table></div>'


def _bullets(items: list[tuple[int, str]]) -> str:
    """Nested ``<ul>`` from (depth, text) pairs; a deeper item nests in the one before it."""
    out, depth = [], -1
    for d, text in items:
        d = min(d, depth + 1)
        if d > depth:
            out.append("<ul>" * (d - depth))
        else:
            out.append("</li>" + "</ul></li>" * (depth - d))
        out.append(f"<li>{inline(text)}")
        depth = d
    out.append("</li>" + "</ul></li>" * depth + "</ul>")
    return "".join(out)


_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"^( *)[-*] (.*)$")


def slug(text: str) -> str:
    """A heading's anchor id: lower case letters, digits and dashes."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


def markdown_body(markdown_text: str | Iterable[str]) -> str:
    """Gatehouse's Markdown subset as an HTML fragment: headings get ids (their :func:`slug`), pipe
    tables are wrapped to scroll, ``---:`` columns are right-aligned."""
    if isinstance(markdown_text, str):
        lines = markdown_text.splitlines()
    else:
        lines = [part for line in markdown_text for part in str(line).splitlines() or [""]]
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        if m := _HEADING.match(line):
            level = len(m.group(1))
            out.append(f'<h{level} id="{slug(m.group(2))}">{inline(m.group(2))}</h{level}>')
            i += 1
        elif line.lstrip().startswith("|") and i + 1 < len(lines) and _SEPARATOR.match(lines[i + 1]):
            j = i + 2
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                j += 1
            out.append(_md_table(lines[i:j]))
            i = j
        elif _BULLET.match(line):
            items = []
            while i < len(lines) and lines[i].strip():
                if b := _BULLET.match(lines[i]):
                    items.append((len(b.group(1)) // 2, b.group(2)))
                elif lines[i].startswith(" "):  # an indented continuation of the item before
                    items[-1] = (items[-1][0], items[-1][1] + " " + lines[i].strip())
                else:
                    break
                i += 1
            out.append(_bullets(items))
        elif line.lstrip().startswith(">"):
            quoted = []
            while i < len(lines) and lines[i].lstrip().startswith(">"):
                quoted.append(lines[i].lstrip()[1:].lstrip())
                i += 1
            out.append(f"<blockquote>{markdown_body(quoted)}</blockquote>")
        else:
            para = []
            while i < len(lines) and lines[i].strip() and not (
                    _HEADING.match(lines[i]) or _BULLET.match(lines[i]) or lines[i].lstrip().startswith((">", "|"))):
                para.append(lines[i].strip())
                i += 1
            if not para:  # a lone pipe line that is no table: show it as text
                para, i = [line.strip()], i + 1
            out.append(f"<p>{inline(' '.join(para))}</p>")
    return "\n".join(out)


def page(title: str, body: str, script: str = "") -> str:
    """A complete page around ``body`` (already HTML) with the report's CSS and an optional inline script."""
    js = f"\n<script>\n{script}\n</script>" if script else ""
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n{body}{js}\n</body>\n</html>\n")


def markdown_page(title: str, markdown_text: str) -> str:
    """Markdown Gatehouse wrote (a report, a comparison) as a whole self-contained HTML page with the
    report's CSS: opens from disk, no network link."""
    return page(title, markdown_body(markdown_text))


# -- report.html ------------------------------------------------------------------------------------
SORT_SCRIPT = """
(function () {
  /* Click (or Enter on) a header of a sortable table to sort by it; again to reverse.  A numeric column
     sorts by each cell's data-sort (the raw figure); a cell without one sorts last either way. */
  function key(td, numeric) {
    if (!td) { return null; }
    var raw = td.getAttribute("data-sort");
    if (numeric) {
      if (raw === null || raw === "") { return null; }
      var n = parseFloat(raw);
      return isNaN(n) ? null : n;
    }
    return (raw === null ? td.textContent : raw).trim().toLowerCase();
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    var heads = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads, function (th, col) {
      if (!th.hasAttribute("data-sortable")) { return; }
      th.tabIndex = 0;
      function sort() {
        var numeric = th.getAttribute("data-type") === "num";
        var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
        Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = key(a.cells[col], numeric), y = key(b.cells[col], numeric);
          if (x === null || y === null) { return (x === null ? 1 : 0) - (y === null ? 1 : 0); }
          return (x < y ? -1 : x > y ? 1 : 0) * dir;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      }
      th.addEventListener("click", sort);
      th.addEventListener("keydown", function (e) {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sort(); }
      });
    });
  });
})();
"""

OUTCOME_CLASSES = ("pass", "fail", "error", "skip", "stale", "incomplete")


def _href(path: str) -> str:
    """A relative link to a file of the run directory (quoted, escaped for an attribute)."""
    return esc(quote(path))


def receipt_href(nodeid: str) -> str:
    """The run-relative link to a node's receipt file (the name :func:`harness.rundir.receipt_filename` gives it)."""
    return f"receipts/{receipt_filename(nodeid)}"


def _outcome(outcome: str, text: str | None = None) -> str:
    cls = outcome if outcome in OUTCOME_CLASSES else ""
    return f'<span class="{cls}">{esc(text or outcome)}</span>'


@dataclass(frozen=True)
class _Cell:
    html: str
    sort: float | str | None = None    # the raw figure a numeric column sorts by
    right: bool = False


def _num(value: Any, text: str) -> _Cell:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return _Cell(esc(text), value if ok else None, True)


def _table(header: Sequence[tuple[str, str]], rows: Sequence[Sequence[_Cell]], ident: str) -> str:
    """A sortable table: ``header`` is (title, "num" or "text") per column."""
    right = ' class="r"'
    head = "".join(f'<th data-sortable data-type="{kind}"{right if kind == "num" else ""} scope="col">'
                   f'{esc(title).replace("_", "_<wbr>")}</th>' for title, kind in header)
    body = []
    for row in rows:
        tds = []
        for c in row:
            attrs = (' class="r"' if c.right else "") + ("" if c.sort is None else f' data-sort="{esc(c.sort)}"')
            tds.append(f"<td{attrs}>{c.html}</td>")
        body.append("<tr>" + "".join(tds) + "</tr>")
    return (f'<div class="wrap"><table class="sortable" id="{esc(ident)}">\n<thead><tr>{head}</tr></thead>\n'
            f"<tbody>\n" + "\n".join(body) + "\n</tbody></table></div>")


def _gate_order(names: Iterable[str]) -> list[str]:
    """Gate names in the registry's order, any it no longer knows after them, sorted."""
    from .. import gates

    names = set(names)
    return [g for g in gates.GATES if g in names] + sorted(names - set(gates.GATES))


def _gate_cell(entry: Mapping[str, Any]) -> _Cell:
    """A variant's gate: its outcome linking to its receipt (further receipts numbered beside it), and the
    first reason of a gate that did not pass."""
    receipts = entry["receipts"]
    first = receipts[0] if receipts else None
    reason = entry["reasons"][0] if entry["reasons"] else ""
    title = f' title="{esc(reason)}"' if reason else ""
    if first is None:
        text = _outcome(entry["outcome"])
    else:
        title = title or f' title="{esc(first["nodeid"])}"'
        text = f'<a href="{_href(receipt_href(first["nodeid"]))}"{title}>{_outcome(entry["outcome"])}</a>'
    more = "".join(f' <a class="iqr" href="{_href(receipt_href(r["nodeid"]))}" title="{esc(r["nodeid"])} ({esc(r["outcome"])})">'
                   f'[{esc(fmt.figure(n))}]</a>' for n, r in enumerate(receipts[1:], 2))
    short = next((reason[len(r["nodeid"]) + 2:] for r in receipts if reason.startswith(r["nodeid"] + ": ")), reason)
    why = f'<span class="why">{esc(short if len(short) <= 120 else short[:119] + "…")}</span>' if reason else ""
    return _Cell(text + more + why, entry["outcome"])


def _top1(r: Mapping[str, Any], views: Sequence[Any]) -> str:
    """Top-1 agreement as a percentage with its counts (hits/tokens) from the receipt that recorded it."""
    value = r["figures"].get("top1_agreement")
    for v in views:
        if (v.model, v.dtype) == (r["model"], r["dtype"]) and v.value("top1_agreement") == value and value is not None:
            hits, n = v.value("top1_hits"), v.value("tokens")
            if isinstance(hits, int) and isinstance(n, int) and not isinstance(hits, bool):
                return f"{fmt.pct(value)} ({fmt.counts({'numerator': hits, 'denominator': n})})"
    return fmt.pct(value)


def variants_table(rep: Mapping[str, Any], views: Sequence[Any]) -> str:
    """The variants as report.md lists them, sortable, each gate's outcome a link to its receipt."""
    from .markdown import variant_rows

    rows = variant_rows(rep)
    gate_names = _gate_order(g for r in rows for g in r["gates"])
    header = [("quality rank", "num"), ("speed rank", "num"), ("model", "text"), ("dtype", "text"), ("status", "text"),
              ("quality /100", "num"), ("graph size", "num"), ("decode tok/s (IQR)", "num"), ("loss increase", "num"),
              ("mean KLD (nats)", "num"), ("top-1", "num"), ("frontier", "text"),
              *((g, "text") for g in gate_names)]
    out = []
    for r in rows:
        f, speed = r["figures"], r.get("speed") or {}
        tok, iqr = speed.get("decode_tok_s"), speed.get("decode_tok_s_iqr")
        tok_html = esc(fmt.figure(tok))
        if svg.finite(iqr):
            tok_html += f' <span class="iqr">IQR {esc(fmt.figure(iqr))}</span>'
        if speed:
            why = f'{speed["lane"]} lane, {speed["cell"]} prompt: median and IQR over the repeats'
            tok_html = f'<span title="{esc(why)}">{tok_html}</span>'
        status = f'<span title="{esc("; ".join(r["blockers"]))}">{esc(r["status"])}</span>' if r["blockers"] else esc(r["status"])
        out.append([
            _num(r["quality_rank"], fmt.num(r["quality_rank"])), _num(r.get("speed_rank"), fmt.num(r.get("speed_rank"))),
            _Cell(esc(r["model"])), _Cell(esc(r["dtype"])), _Cell(status, r["status"]),
            _num(f.get("quality_index"), fmt.figure(f.get("quality_index"))),
            _num(r["graph_bytes"] or None, fmt.figure(r["graph_bytes"] or None, "B")),
            _Cell(tok_html, tok if svg.finite(tok) else None, True),
            _num(f.get("relative_increase"), fmt.pct(f.get("relative_increase"), sign=True)),
            _num(f.get("kld_mean"), fmt.figure(f.get("kld_mean"))),
            _num(f.get("top1_agreement"), _top1(r, views)),
            _Cell('<strong class="pass" title="on the Pareto frontier">★ yes</strong>' if r.get("frontier") else "",
                  "yes" if r.get("frontier") else ""),
            *(_gate_cell(r["gates"][g]) if g in r["gates"] else _Cell("—", "") for g in gate_names)])
    return _table(header, out, "variants-table")


def receipts_table(views: Sequence[Any], run: Any | None) -> str:
    """Every receipt: what it measured, its outcome (first reason on hover) and links to its file and to its
    evidence folder (when the run directory holds one)."""
    order = {g: n for n, g in enumerate(_gate_order(v.gate for v in views))}
    rows = []
    for v in sorted(views, key=lambda v: (order[v.gate], v.nodeid)):
        reason = v.reasons[0] if v.reasons else ""
        outcome = _outcome(v.outcome) if not reason else f'<span title="{esc(reason)}">{_outcome(v.outcome)}</span>'
        ev = ""
        if v.evidence and run is not None and (run.path / v.evidence).is_dir():
            ev = f'<a href="{_href(v.evidence)}/">evidence</a>'
        rows.append([_Cell(f"<code>{esc(v.nodeid)}</code>", v.nodeid), _Cell(esc(v.gate)), _Cell(esc(v.model or "—")),
                     _Cell(esc(v.dtype or "—")),
                     _Cell(outcome + (' <span class="iqr">stale</span>' if v.stale else ""), v.outcome),
                     _Cell(f'<a href="{_href(receipt_href(v.nodeid))}">receipt</a>'), _Cell(ev)])
    return _table([("node id", "text"), ("gate", "text"), ("model", "text"), ("dtype", "text"), ("outcome", "text"),
                   ("receipt", "text"), ("evidence", "text")], rows, "receipts-table")


# -- the figures -------------------------------------------------------------------------------------
def _figure(chart: str, caption: str) -> str:
    return f'<figure class="plot">{chart}<figcaption>{caption}</figcaption></figure>'


def _note(text: str) -> str:
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
        out.append(_note("Quality vs decode speed: no variant has both a quality index and a decode speed; chart omitted."))
    pts = _variant_points(rep, _size)
    if pts:
        out.append(_figure(svg.scatter(pts, ident="plot-quality-size", title="Quality vs graph size",
                                       desc="Quality index (/100) against the ONNX graph's size on disk, one point per variant.",
                                       x_label="graph size", x_unit="B", y_label="quality index /100", y_include=(0, 100)),
                           frontier))
    else:
        out.append(_note("Quality vs graph size: no variant has both a quality index and a graph size; chart omitted."))
    return out


def lane_chart(rep: Mapping[str, Any], views: Sequence[Any]) -> list[str]:
    """Decode tokens/s per lane and workload cell, median with its IQR as a whisker."""
    from ..view import cells

    by_node = {v.nodeid: v for v in views}
    rows = []
    for row in sorted(rep.get("lanes") or [], key=lambda r: (str(r["model"]), str(r["dtype"]), r["lane"], r["nodeid"])):
        view, ivs = by_node.get(row["nodeid"]), []
        for cell in cells(row):
            tok, iqr = row.get(f"decode_tok_s_{cell}"), row.get(f"decode_tok_s_iqr_{cell}")
            if not svg.finite(tok):
                continue
            lane = (view.data.get("lane") or {}) if view is not None and view.version >= 2 else {}
            n = ((lane.get("cells") or {}).get(cell) or {}).get("repeats")
            tip = (f"{row['model']}-{row['dtype']} {row['lane']}, {cell} prompt: median {fmt.figure(tok, 'tok/s')}, "
                   f"IQR {fmt.figure(iqr, 'tok/s')}" + (f", {fmt.figure(n)} repeats" if isinstance(n, int) else "")
                   + f" ({row['outcome']})")
            half = iqr / 2 if svg.finite(iqr) else None
            ivs.append(svg.Interval(tok, None if half is None else tok - half, None if half is None else tok + half,
                                    f"{cell} prompt", tip))
        if ivs:
            rows.append((f"{row['model']}-{row['dtype']} · {row['lane']}", ivs))
    if not rows:
        return [_note("Decode speed per lane: no lane receipt has a decode speed; chart omitted.")]
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
        return [_note("Win rule: no receipt holds a win-rule decision; charts omitted.")]
    if run is None:
        return [_note("Win rule: the per-repeat figures are in each window's evidence, and no run directory was given; "
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
            out.append(_note(f"Win rule {v.nodeid}: no chart ({exc})."))
            continue
        record = f'<a href="{_href(v.evidence + "/" + w["markdown"])}">{esc(w["markdown"])}</a>'
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
                       f'<a href="{_href(receipt_href(v.nodeid))}">receipt</a>.')
            out.append(_figure(chart, caption))
    if not n and not out:
        out.append(_note("Win rule: the decision records hold no primary or guard series; charts omitted."))
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
        return [_note("Streaming latency: no receipt names a streaming event log; chart omitted.")]
    if run is None:
        return [_note("Streaming latency: the per-batch timings are in each case's evidence, and no run directory was "
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
        out.append(_note("Streaming latency: no event log holds a steady-state batch; chart omitted."))
    out += [_note(f"Streaming latency: {p}") for p in problems]
    return out


# -- the page ------------------------------------------------------------------------------------------
def _chunks(md: str) -> list[tuple[str | None, list[str]]]:
    """report.md cut at its ``## `` headings: (heading, lines); the first has no heading (the page's title)."""
    out: list[tuple[str | None, list[str]]] = [(None, [])]
    for line in md.splitlines():
        if line.startswith("## "):
            out.append((line[3:].strip(), [line]))
        else:
            out[-1][1].append(line)
    return out


def section_receipts(views: Sequence[Any]) -> dict[str, list[Any]]:
    """Per gate section heading, the receipts it renders: those of every gate whose receipts alone make the
    section say something (a section reads its own gate's receipts, the lane table every lane's)."""
    from .. import gates

    by_gate: dict[str, list[Any]] = {}
    for v in views:
        by_gate.setdefault(v.gate, []).append(v)
    out: dict[str, list[Any]] = {}
    for spec in gates.GATES.values():
        if spec.section is None:
            continue
        headings = [l[3:].strip() for l in spec.section(views) if l.startswith("## ")]
        if not headings:
            continue
        read = [v for g, group in by_gate.items() if spec.section(group) for v in group]
        for h in headings:
            out.setdefault(h, []).extend(read)
    return out


def _receipt_list(views: Sequence[Any]) -> str:
    items = "".join(f'<li><a href="{_href(receipt_href(v.nodeid))}"><code>{esc(v.nodeid)}</code></a> '
                    f'{_outcome(v.outcome)}</li>' for v in sorted(views, key=lambda v: v.nodeid))
    return (f'<details><summary>Receipts behind this section ({esc(fmt.figure(len(views)))})</summary>'
            f"<ul>{items}</ul></details>")


def html(rep: Mapping[str, Any], views: Sequence[Any], run_dir: Any | None = None) -> str:
    """The whole report.html: ``rep`` the report record, ``views`` the run's receipts after qualification
    (as report.md gets them), ``run_dir`` the run directory (for the evidence the charts read and links
    that must exist), or None.  The sections are report.md's, in its order; the variants table becomes
    sortable with each gate's outcome linking its receipt, and figures and a list of every receipt join."""
    from ..rundir import RunDir
    from .markdown import markdown

    run = RunDir.of(run_dir) if run_dir is not None else None
    plot = f"![quality vs size]({rep['plot']})" if rep.get("plot") else None
    chunks = [(h, [l for l in lines if l.strip() != plot]) for h, lines in _chunks(markdown(rep, views, run.path if run else None))]
    behind = section_receipts(views)
    figures = [("quality", "Quality", quality_charts(rep)), ("lanes", "Speed per lane", lane_chart(rep, views)),
               ("winrule", "Win rule, per repeat", winrule_charts(views, run)),
               ("streaming", "Streaming latency", streaming_chart(views, run))]
    fig_html = ['<h2 id="figures">Figures</h2>']
    for key, title, parts in figures:
        fig_html.append(f'<h3 id="figures-{key}">{esc(title)}</h3>')
        fig_html.append('<div class="plots">' + "\n".join(parts) + "</div>")
        if key == "quality" and plot:
            fig_html.append(f'<p class="note">report.md\'s chart of quality against size: '
                            f'<a href="{_href(rep["plot"])}">{esc(rep["plot"])}</a>.</p>')
    sections: list[tuple[str, str, str]] = []     # (id, heading, html)
    for heading, lines in chunks[1:]:
        if heading == "Variants":
            text = markdown_body([l for l in lines if not l.lstrip().startswith("|")])
            sections.append((slug(heading), heading, text + "\n" + variants_table(rep, views)
                             + "\n<p class=\"note\">Click a column heading to sort. Each gate's outcome links to its "
                               "receipt; a failing gate shows its first reason.</p>"))
            sections.append(("figures", "Figures", "\n".join(fig_html)))
        else:
            extra = _receipt_list(behind[heading]) if behind.get(heading) else ""
            sections.append((slug(heading), heading, markdown_body(lines) + extra))
    if not any(s[0] == "figures" for s in sections):
        sections.insert(0, ("figures", "Figures", "\n".join(fig_html)))
    sections.append(("receipts", "Receipts", '<h2 id="receipts">Receipts</h2>\n'
                     + _note(f"Every valid receipt of the run ({fmt.figure(len(views))}), with its file and evidence folder.")
                     + receipts_table(views, run)))
    toc = "".join(f'<a href="#{esc(i)}">{esc(re.sub(r"[`*]", "", h))}</a>' for i, h, _ in sections)
    title = f"Gatehouse report — {rep['run']['campaign']['name']}"
    body = (markdown_body(chunks[0][1]) + f'\n<nav class="toc" aria-label="sections">{toc}</nav>\n'
            + "\n".join(s[2] for s in sections)
            + '\n<p class="note">Rebuilt from the receipts alone; the same report as Markdown: '
              '<a href="report.md">report.md</a>, as a record: <a href="report.json">report.json</a>.</p>')
    return page(title, body, SORT_SCRIPT)
