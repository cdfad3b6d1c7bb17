"""report.html's sortable tables: the variants (each gate's outcome linking its receipt) and every receipt.

Also the links into the run directory the page uses everywhere (:func:`run_href`, :func:`receipt_href`)
and an outcome's coloured span.  Nothing here decides: it renders the report record and the receipt views,
every figure through :func:`harness.fmt.figure`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence
from urllib.parse import quote

from .. import fmt
from ..rundir import receipt_filename
from . import svg
from .mdhtml import esc

OUTCOME_CLASSES = ("pass", "fail", "error", "skip", "stale", "incomplete")


def run_href(path: str) -> str:
    """A relative link to a file of the run directory (quoted, escaped for an attribute)."""
    return esc(quote(path))


def receipt_href(nodeid: str) -> str:
    """The run-relative link to a node's receipt file (the name :func:`harness.rundir.receipt_filename` gives it)."""
    return f"receipts/{receipt_filename(nodeid)}"


def outcome_span(outcome: str, text: str | None = None) -> str:
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
        text = outcome_span(entry["outcome"])
    else:
        title = title or f' title="{esc(first["nodeid"])}"'
        text = f'<a href="{run_href(receipt_href(first["nodeid"]))}"{title}>{outcome_span(entry["outcome"])}</a>'
    more = "".join(f' <a class="iqr" href="{run_href(receipt_href(r["nodeid"]))}" title="{esc(r["nodeid"])} ({esc(r["outcome"])})">'
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
        outcome = outcome_span(v.outcome) if not reason else f'<span title="{esc(reason)}">{outcome_span(v.outcome)}</span>'
        ev = ""
        if v.evidence and run is not None and (run.path / v.evidence).is_dir():
            ev = f'<a href="{run_href(v.evidence)}/">evidence</a>'
        rows.append([_Cell(f"<code>{esc(v.nodeid)}</code>", v.nodeid), _Cell(esc(v.gate)), _Cell(esc(v.model or "—")),
                     _Cell(esc(v.dtype or "—")),
                     _Cell(outcome + (' <span class="iqr">stale</span>' if v.stale else ""), v.outcome),
                     _Cell(f'<a href="{run_href(receipt_href(v.nodeid))}">receipt</a>'), _Cell(ev)])
    return _table([("node id", "text"), ("gate", "text"), ("model", "text"), ("dtype", "text"), ("outcome", "text"),
                   ("receipt", "text"), ("evidence", "text")], rows, "receipts-table")
