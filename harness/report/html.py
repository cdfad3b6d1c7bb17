"""report.html: the report record rendered as one self-contained page.

:func:`html` is report.html: report.md's sections in report.md's order (converted from its Markdown by
:mod:`.mdhtml`, so the two never disagree), the variants table made sortable with each gate's outcome
linking its receipt (:mod:`.htmltables`), the figures as inline SVG (:mod:`.htmlfigures`), and every
receipt with links to its file and evidence folder.  Nothing here decides: it renders the report record
and the receipt views, every figure through :func:`.fmt.figure`.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from .. import fmt
from .htmlfigures import lane_chart, note, quality_charts, streaming_chart, winrule_charts
from .htmltables import outcome_span, receipt_href, receipts_table, run_href, variants_table
from .mdhtml import esc, markdown_body, page, slug

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
        headings = [s.heading for s in spec.section(views)]
        if not headings:
            continue
        read = [v for g, group in by_gate.items() if spec.section(group) for v in group]
        for h in headings:
            out.setdefault(h, []).extend(read)
    return out


def _receipt_list(views: Sequence[Any]) -> str:
    items = "".join(f'<li><a href="{run_href(receipt_href(v.nodeid))}"><code>{esc(v.nodeid)}</code></a> '
                    f'{outcome_span(v.outcome)}</li>' for v in sorted(views, key=lambda v: v.nodeid))
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
                            f'<a href="{run_href(rep["plot"])}">{esc(rep["plot"])}</a>.</p>')
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
                     + note(f"Every valid receipt of the run ({fmt.figure(len(views))}), with its file and evidence folder.")
                     + receipts_table(views, run)))
    toc = "".join(f'<a href="#{esc(i)}">{esc(re.sub(r"[`*]", "", h))}</a>' for i, h, _ in sections)
    title = f"Gatehouse report — {rep['run']['campaign']['name']}"
    body = (markdown_body(chunks[0][1]) + f'\n<nav class="toc" aria-label="sections">{toc}</nav>\n'
            + "\n".join(s[2] for s in sections)
            + '\n<p class="note">Rebuilt from the receipts alone; the same report as Markdown: '
              '<a href="report.md">report.md</a>, as a record: <a href="report.json">report.json</a>.</p>')
    return page(title, body, SORT_SCRIPT)
