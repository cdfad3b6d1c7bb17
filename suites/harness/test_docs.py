"""The documentation holds its shape: a README of at most 10 KB that starts with the two commands (the test command
being what CI runs), every relative link in README.md, DEVELOPERS.md and docs/ resolving, a page for every gate the
registry declares, and docs/measurements.md newest first."""

import re
import shlex
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_BYTES = 10 * 1024
# The README's first two commands, as the README has always opened (the main job, then the tests).
MAIN_JOB = "bin/gatehouse campaign"
TESTS = "bin/gatehouse test"
# Written by the work on adding a gate; until it lands, links to it are not checked (every other target is).
MAY_BE_ABSENT = {DOCS / "adding-a-gate.md"}

_FENCE = re.compile(r"^(```|~~~)")
_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_DATE = re.compile(r"\b(\d{4}-\d{2}-\d{2})\b")


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", ROOT / "DEVELOPERS.md", *sorted(DOCS.rglob("*.md"))]


def prose_lines(text: str, code: bool = False) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, with inline code spans removed (kept with ``code``)."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, line if code else re.sub(r"`[^`]*`", "``", line)))
    return out


def fenced_blocks(text: str) -> list[list[str]]:
    blocks, current = [], None
    for line in text.splitlines():
        if _FENCE.match(line.strip()):
            if current is None:
                current = []
            else:
                blocks.append(current)
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def command(line: str) -> str:
    """A shell line without its comment and surrounding blanks, spelled the way shlex splits it."""
    return " ".join(shlex.split(line, comments=True))


def slug(heading: str) -> str:
    """A heading's anchor as Markdown renderers on code hosts make it: code and link markup dropped, lower case,
    punctuation but hyphens removed, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = "".join(c for c in text.lower() if c in " -_" or unicodedata.category(c)[0] in "LN")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(path.read_text(), code=True):
        m = _HEADING.match(line)
        if not m:
            continue
        s = slug(m.group(2))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every link in the file's prose."""
    text = path.read_text()
    found = []
    for n, line in prose_lines(text):
        found += [(n, m.group(1)) for m in _LINK.finditer(line)]
    # inline code was blanked above, so a link whose text is code (``[`cache`](gates/cache.md)``) is read here
    for n, line in enumerate(text.splitlines(), 1):
        found += [(n, m.group(1)) for m in re.finditer(r"\[`[^`]*`\]\(([^)\s]+)\)", line)]
    return sorted(set(found))


def test_the_readme_is_at_most_10_kb():
    size = len(README.read_bytes())
    assert size <= MAX_README_BYTES, f"README.md is {size} bytes; move detail to docs/ (at most {MAX_README_BYTES})"


def test_the_readme_starts_with_the_two_commands_and_the_test_command_is_what_ci_runs():
    text = README.read_text()
    before = text.split("```", 1)[0].strip().splitlines()
    assert before == ["# Gatehouse"], f"only the title may come before the two commands, found {before!r}"
    first = fenced_blocks(text)[0]
    assert [command(line) for line in first if line.strip()] == [MAIN_JOB, TESTS], \
        f"README.md must open with exactly `{MAIN_JOB}` then `{TESTS}`, found {first!r}"
    ci = [command(line) for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.lstrip().startswith(("#", "set ", "cd "))]
    assert [c.removeprefix("./") for c in ci] == [TESTS], \
        f".ci/run must run the README's test command `{TESTS}` and nothing else, runs {ci!r}"


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path):
    bad = []
    for n, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):   # a scheme (http:, mailto:): not a file of this checkout
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            if dest in MAY_BE_ABSENT:
                continue
            bad.append(f"{path.relative_to(ROOT)}:{n}: {target}: no such file")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{path.relative_to(ROOT)}:{n}: {target}: {dest.name} has no heading #{anchor}")
    assert not bad, "\n".join(bad)


def test_the_link_reader_sees_links_and_the_slugs_match_the_renderers():
    assert slug("Policy: `[policy.behavior]`") == "policy-policybehavior"
    assert slug("Set-up: llama.cpp's AMX kernels") == "set-up-llamacpps-amx-kernels"
    assert slug("Issue 21: quantization recipes in the main job (`runs/i21-main`)") == \
        "issue-21-quantization-recipes-in-the-main-job-runsi21-main"
    line = "see [the page](gates/cache.md#verdict) and [`x`](a.md), not `[code](nowhere.md)`"
    assert [t for _, t in links_in(line)] == ["a.md", "gates/cache.md#verdict"]


def links_in(text: str) -> list[tuple[int, str]]:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "x.md"
        p.write_text(text)
        return links(p)


def test_every_gate_the_registry_declares_has_its_page():
    from harness import gates

    declared = [s.name for s in gates.discover(gates.__name__, gates.__path__)]
    assert set(declared) <= set(gates.GATES)
    missing = [n for n in declared if not (DOCS / "gates" / f"{n}.md").is_file()]
    assert not missing, f"no docs/gates/<name>.md for {', '.join(missing)} (see docs/adding-a-gate.md)"
    index = (DOCS / "gates" / "README.md").read_text()
    unlisted = [n for n in declared if f"({n}.md)" not in index]
    assert not unlisted, f"docs/gates/README.md does not link {', '.join(unlisted)}"
    stale = sorted(p.stem for p in (DOCS / "gates").glob("*.md") if p.stem != "README" and p.stem not in declared)
    assert not stale, f"pages for gates the registry does not declare: {', '.join(stale)}"


def test_measurements_are_newest_first():
    sections = [(n, _DATE.search(line)) for n, line in prose_lines((DOCS / "measurements.md").read_text())
                if line.startswith("## ")]
    dated = [(n, m.group(1)) for n, m in sections if m]
    assert dated, "docs/measurements.md has no dated section (## YYYY-MM-DD)"
    dates = [d for _, d in dated]
    assert dates == sorted(dates, reverse=True) and len(set(dates)) == len(dates), \
        f"docs/measurements.md's dated sections must be newest first, one per date: {dates}"
    first_undated = next((n for n, m in sections if not m), None)
    assert first_undated is None or all(n < first_undated for n, _ in dated), \
        "undated measurements go after every dated section"
