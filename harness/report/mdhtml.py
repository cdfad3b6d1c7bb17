"""Gatehouse's Markdown as HTML: the converter and the self-contained page shell shared by report.html and compare.

:func:`markdown_page` turns the Markdown subset Gatehouse emits (headings, paragraphs, nested bullets,
pipe tables, code, bold, links, images, block quotes) into a whole page with the report's CSS, so any
Markdown Gatehouse writes opens in a browser from disk.  Everything is escaped, and a link to a network
host is never emitted (its text is kept, the link dropped): the page works offline and leaks nothing.
:func:`page` is the shell (the CSS, an optional inline script) every such page is built in.
"""

from __future__ import annotations

import html as _html
import re
from typing import Iterable

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
