"""report.html: the Markdown converter, the SVG charts, and the whole page built from a run directory, opened in
the real Chromium the browser lane uses (renders, no console or page errors, sorts, charts drawn), with a
screenshot kept as the test's evidence."""

import json
import os
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest

from harness.rundir import receipt_filename
from harness.report import svg
from harness.report.html import html
from harness.report.mdhtml import markdown_page, safe_href
from test_report_collect import lane_measurements, make_receipt, variant_views, write_run

NETWORK = re.compile(r"(?i)\b(?:https?|wss?|ftp):|(?:href|src)\s*=\s*[\"']?//|@import|url\(|<link\b")


class Links(HTMLParser):
    """Every href and src of a page, and its element counts."""

    def __init__(self):
        super().__init__()
        self.links: list[str] = []
        self.tags: dict[str, int] = {}

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        self.links += [v for k, v in attrs if k in ("href", "src") and v is not None]


def parse(text: str) -> Links:
    p = Links()
    p.feed(text)
    return p


# -- the Markdown converter ---------------------------------------------------------------------
MD = """# Title <b>

> **SCREENING RUN** — not qualification.

- run: `r&d` [receipt](receipts/a-b.json) and [elsewhere](https://example.org/x) ![chart](chart.png)
  - nested **bold** with `code | pipe`
    - deeper
- back out, [js](javascript:alert(1)), [proto](//host/x)

## Table

| name | figure |
|---|---:|
| `a|b` <i> | 1,234 |
| plain | — |

#### Small heading
A paragraph
that wraps.
"""


def test_markdown_page_converts_escapes_and_never_links_a_network_host():
    page = markdown_page("T & <x>", MD)
    assert page.startswith("<!DOCTYPE html>") and "<title>T &amp; &lt;x&gt;</title>" in page and "<style>" in page
    assert '<h1 id="title-b">Title &lt;b&gt;</h1>' in page and '<h4 id="small-heading">' in page
    assert "<blockquote><p><strong>SCREENING RUN</strong> — not qualification.</p></blockquote>" in page
    assert "<ul><li>run: <code>r&amp;d</code>" in page
    assert "<ul><li>nested <strong>bold</strong> with <code>code | pipe</code><ul><li>deeper</li></ul></li></ul></li>" in page
    assert '<a href="receipts/a-b.json">receipt</a>' in page and '<img src="chart.png" alt="chart">' in page
    assert "elsewhere" in page and "example.org" not in page and "javascript" not in page and "host/x" not in page
    assert '<th class="r">figure</th>' in page and '<td><code>a|b</code> &lt;i&gt;</td><td class="r">1,234</td>' in page
    assert "<p>A paragraph that wraps.</p>" in page
    assert not NETWORK.search(page)
    assert [safe_href(h) for h in ("receipts/x.json", "#a", "../x", "http://a", "HTTPS://a", "//a", "data:x", "file:/x")] \
        == ["receipts/x.json", "#a", "../x", None, None, None, None, None]


# -- the charts --------------------------------------------------------------------------------------
def test_charts_are_inline_svg_with_titles_ticks_through_the_formatter():
    pts = [svg.Point(18_100.0, 0.0, "m-q4", frontier=True, x_err=(17_800.0, 18_400.0)),
           svg.Point(20_100.0, 50.0, "m-fp32", frontier=True), svg.Point(19_000.0, 0.0, "m-q8 (failed)", passed=False)]
    chart = svg.scatter(pts, ident="s", title="Quality <vs> speed", desc="d", x_label="tok/s", y_label="q",
                        y_include=(0, 100))
    assert chart.startswith('<svg class="chart" id="s" role="img"') and "<title id=\"s-t\">Quality &lt;vs&gt; speed</title>" in chart
    assert chart.count("<polygon") >= 2 and "<polyline" in chart and ">20,000<" in chart and ">100<" in chart
    assert "http" not in chart                          # inline SVG needs no xmlns
    sizes = svg.scatter([svg.Point(4.5e5, 10.0, "a"), svg.Point(1e6, 20.0, "b")], ident="b", title="t", desc="d",
                        x_label="graph", x_unit="B", y_label="q")
    assert ">600 kB<" in sizes and ">1 MB<" in sizes
    rows = [("m-q4 · native-probe", [svg.Interval(18_000.0, 17_700.0, 18_300.0, "short"), svg.Interval(12_000.0, None, None, "long")]),
            ("m-q4 · ort-web", [svg.Interval(350.0, 300.0, 400.0, "short")])]
    lanes = svg.whiskers(rows, ident="w", title="t", desc="d", x_label="decode tokens/s")
    assert "(log scale)" in lanes and ">1,000<" in lanes and lanes.count("<circle") >= 3 + 2   # dots and legend
    dist = svg.distribution([("case", [0.0005, 0.0007, 0.002]), ("empty", [])], ident="d", title="t", desc="d",
                            x_label="latency", unit="s", reference=(0.08, "token period 80 ms"))
    assert ">case<" in dist and ">empty<" not in dist and "µs<" in dist and "token period 80 ms" in dist
    aba = svg.off_on_off([10.0, 11.0], [12.0, 12.5], [10.5, float("nan")], ident="a", title="t", desc="d", y_label="ms",
                         unit="ms")
    assert aba.count("<circle") == 3 + 2 and "repeat 2 ON: 12.5 ms" in aba      # the NaN is left out, never drawn
    assert svg.scale([0.0, 0.0], 0, 1).ticks[0] < 0 < svg.scale([0.0, 0.0], 0, 1).ticks[-1]   # a flat axis still spans
    assert svg.quartiles([1.0, 2.0, 3.0, 4.0, 5.0]) == (2.0, 3.0, 4.0)


# -- a run directory like a CI run's ----------------------------------------------------------------
WIN_NODE = "suites/test_winrule.py::test_win_rule[m-q4-real]"
STREAM_NODES = ("suites/test_streaming.py::test_streaming_protocol[ci-rt80_b1-short]",
                "suites/test_streaming.py::test_streaming_protocol[ci-rt480_b4-long]")


def _series(cell, metric, role, unit, first, cand, last, verdict):
    return {"cell": cell, "metric": metric, "role": role, "unit": unit, "higher_is_better": metric == "decode_tok_s",
            "required_effect_fraction": 0.02, "control_first": first, "candidate": cand, "control_last": last,
            "off_off_spread_fraction": 0.01, "verdict": verdict,
            "statistic": {"changes_fraction": [(c - f) / f for f, c in zip(first, cand)]}}


def build_run(tmp_path):
    """Three variants (one failing its cache gate), a browser lane, a win-rule window and two streaming cases,
    each with the evidence files a real run leaves."""
    views = (variant_views("m", "q4", tok_s=18_000.0, quality=40.0, graph_bytes=493_000, files=tmp_path)
             + variant_views("m", "fp32", tok_s=20_000.0, quality=60.0, graph_bytes=896_000, files=tmp_path)
             + variant_views("m", "q8", tok_s=19_000.0, quality=55.0, graph_bytes=569_000, files=tmp_path))
    views = [make_receipt("cache", "m", "q8", outcome="fail", reasons=["max abs error 2.47 exceeds 0.00185"],
                          measurements={"parameters": 100})
             if (v.gate, v.dtype) == ("cache", "q8") else dict(v.data) for v in views]
    browser = make_receipt("throughput_browser", "m", "q4", nodeid="suites/test_throughput_browser.py::"
                           "test_throughput_browser[m-q4-ort-web]", measurements=lane_measurements(350.0, long=600.0),
                           extra={"lane": "ort-web"})
    winrule = {"window": "real", "verdict": "WIN", "verdict_before_override": "WIN", "expected": "WIN", "reasons": [],
               "markdown": "decision.md", "chart": "chart.png", "looks": [5]}
    win = make_receipt("winrule", "m", "q4", nodeid=WIN_NODE, extra={"winrule": winrule},
                       measurements={"short_candidate_over_control": 1.04})
    streams = [make_receipt("streaming", "ci", None, nodeid=n, measurements={"token_period_seconds": 0.08, "rtf": 0.01},
                            extra={"logs": {"events": "events.jsonl"}}) for n in STREAM_NODES]
    training = make_receipt("training", "m", None, measurements={"final_over_initial_train_loss": 0.44})
    run = write_run(tmp_path, [*views, browser, win, *streams, training])

    ev = run.evidence(WIN_NODE)
    ev.mkdir(parents=True)
    (ev / "decision.md").write_text("### Win rule: **WIN**\n")
    (ev / "chart.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    series = [_series("short", "decode_tok_s", "primary", "tokens/s", [17_600.0, 17_100.0, 18_000.0],
                      [18_300.0, 18_300.0, 18_600.0], [18_000.0, 18_100.0, 17_800.0], "WIN"),
              _series("short", "prefill_ms", "guard", "ms", [0.37, 0.35, 0.34], [0.36, 0.36, 0.35], [0.36, 0.35, 0.35], "TIE"),
              _series("short", "cpu_per_wall", "reported", "cpu s/s", [2.1], [0.0], [2.2], None)]
    (ev / "decision.json").write_text(json.dumps({"verdict": "WIN", "series": series}))
    for k, node in enumerate(STREAM_NODES):
        ev = run.evidence(node)
        ev.mkdir(parents=True)
        lines = [{"kind": "ready"}]
        for w in range(40):
            ready = 0.08 * (w + 1)
            lines.append({"kind": "batch", "start_window": w, "end_window_exclusive": w + 1, "input_eof": w == 39,
                          "source_audio_ready_seconds": ready, "finished_seconds": ready + 0.0006 * (1 + k) + 1e-5 * (w % 7)})
        (ev / "events.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return run


def test_report_html_from_a_run_directory(tmp_path):
    from harness.report import assemble
    from harness.report.collect import collect

    run = build_run(tmp_path)
    paths = assemble.rebuild(run.path)
    assert paths["html"] == run.report_html and run.report_html.is_file()
    text = run.report_html.read_text()
    assert not NETWORK.search(text), NETWORK.search(text)

    # every link is relative and lands on a file or folder of the run (receipts, evidence, the other reports)
    page = parse(text)
    files = [l for l in page.links if not l.startswith("#")]
    assert files and all(safe_href(l) == l for l in files)
    missing = [l for l in files if not (run.path / unquote(l)).exists()]
    assert not missing, missing
    linked = {unquote(l) for l in files if l.startswith("receipts/")}
    assert linked == {f"receipts/{p.name}" for p in run.receipt_files()}         # every receipt, and only those
    assert {f"{run.evidence_name(n)}/" for n in (WIN_NODE, *STREAM_NODES)} <= {unquote(l) for l in files}

    # the variants table: one gate cell per gate, linking the gate's receipt; the failing gate shows its reason
    table = text[text.index('id="variants-table"'):text.index("</table>", text.index('id="variants-table"'))]
    cache_q8 = receipt_filename("suites/test_cache.py::test_cache[m-q8]")
    assert f'href="receipts/{cache_q8}"' in table and "max abs error 2.47 exceeds 0.00185" in table
    assert '<td class="r" data-sort="896000">896 kB</td>' in table and "20,000" in table
    assert "IQR 1" in table                                    # decode tok/s with its IQR, through fmt.figure

    # the same sections as report.md, in its order, then the figures after the variants and every receipt
    md_heads = [l[3:] for l in run.report_md.read_text().splitlines() if l.startswith("## ")]
    html_heads = [h for h in re.findall(r'<h2 id="[^"]*">(.*?)</h2>', text)]
    assert [h for h in html_heads if h not in ("Figures", "Receipts")] == [
        h.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;") for h in md_heads]
    assert html_heads.index("Figures") == html_heads.index("Variants") + 1 and html_heads[-1] == "Receipts"
    assert text.count('<svg class="chart"') == 6   # quality×2, lanes, win rule primary and guard, streaming
    assert "Receipts behind this section" in text

    # without the run directory the charts that read evidence say so, and nothing breaks
    c = collect(run)
    rep, views = assemble.decide(c)
    bare = html(rep, views)
    assert bare.count('<svg class="chart"') == 3 and "no run directory was given" in bare and 'href="evidence/' not in \
        bare.split('id="receipts-table"')[1]


@pytest.mark.browser
def test_report_html_in_chromium(tmp_path):
    """Opened from disk in the browser lane's Chromium: no console or page errors, a numeric column sorts both
    ways (missing figures last), every chart has a size, and a full-page screenshot is kept."""
    sync_api = pytest.importorskip("playwright.sync_api")
    from harness.browser import driver
    from harness.report import assemble

    if not shutil.which("chromium"):
        pytest.skip("Debian's chromium is not installed (web/setup.sh)")
    run = build_run(tmp_path)
    assemble.rebuild(run.path)
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=driver.chromium_path(), headless=True, args=list(driver.CHROMIUM_ARGS))
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            problems = []
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
            page.goto(run.report_html.as_uri(), wait_until="load")

            def column(name):
                col = page.evaluate("n => [...document.querySelectorAll('#variants-table thead th')]"
                                    ".findIndex(th => th.textContent.trim().startsWith(n))", name)
                assert col >= 0, name
                return page.evaluate("c => [...document.querySelectorAll('#variants-table tbody tr')]"
                                     ".map(tr => tr.cells[c].getAttribute('data-sort'))", col)

            before = column("graph")
            header = page.locator("#variants-table thead th", has_text="graph")
            header.click()
            up = [float(v) for v in column("graph")]
            assert up == sorted(up) and up != [float(v) for v in before]
            assert header.get_attribute("aria-sort") == "ascending"
            header.click()
            down = [float(v) for v in column("graph")]
            assert down == sorted(up, reverse=True) and header.get_attribute("aria-sort") == "descending"
            page.locator("#variants-table thead th", has_text="speed").click()
            speed = column("speed")                                 # the failing q8 has no speed rank
            assert speed[-1] is None and [float(v) for v in speed[:-1]] == [1.0, 2.0]
            page.locator("#variants-table thead th", has_text="speed").click()
            speed = column("speed")
            assert speed[-1] is None and [float(v) for v in speed[:-1]] == [2.0, 1.0]   # missing last either way

            boxes = page.evaluate("[...document.querySelectorAll('svg.chart')].map(s => "
                                  "{const r = s.getBoundingClientRect(); return [s.id, r.width, r.height, "
                                  "s.querySelectorAll('circle, polygon, rect, line').length]})")
            assert len(boxes) == 6 and all(w > 100 and h > 100 and marks > 5 for _, w, h, marks in boxes), boxes
            assert page.locator("#variants-table a[href^='receipts/']").count() >= 3 * 4
            shot = tmp_path / "report-html.png"
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert not problems, problems
    assert shot.stat().st_size > 10_000
    kept = [shot]
    if os.environ.get("GATEHOUSE_EVIDENCE_DIR"):
        target = Path(os.environ["GATEHOUSE_EVIDENCE_DIR"]) / "report-html.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, target)
        kept.append(target)
    print("report.html screenshot:", ", ".join(str(p) for p in kept))
