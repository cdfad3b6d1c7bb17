"""Progress while it runs, the terminal summary, JUnit properties and the CI step summary, through pytester
(serial, -q and xdist), and the progress module's own pieces."""

import time
import xml.etree.ElementTree as ET

import pytest

from harness import progress

CONFTEST = '''
from harness import gates
from harness.gates.spec import GateSpec, NoEvidence, NoPolicy

gates.register(GateSpec(name="toy", level="variant", applies_to=("fp32", "q4"), policy=NoPolicy, evidence=NoEvidence,
                        decide=lambda evidence, policy: evidence, describe="a toy gate", required=False))
'''

GATE_TEST = '''
import os
from pathlib import Path
import pytest
from harness import progress
from harness.verdict import Measurement, Verdict

@pytest.mark.gate("toy")
def test_toy_gate(variant, receipt):
    art = Path(os.environ["TOY_ARTIFACT"])
    receipt.pin(art, "graph")
    print("captured test output")          # captured as usual: only progress lines pass through
    tick = progress.ticker(f"toy {variant.id} cases", 3, every_s=3600)
    for i in range(3):
        tick(i + 1)
    reasons = [f"{variant.id} told to fail: the toy's reason"] if variant.dtype == "q4" else []
    verdict = receipt.decide(Verdict.from_checks(reasons, {"value_s": Measurement(1.5, "s", 3)}))
    assert verdict.passed, verdict.render()
'''


@pytest.fixture
def sandbox(toy_sandbox, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    return toy_sandbox(GATE_TEST, CONFTEST)


def run(pt, run_dir, *args):
    return pt.runpytest_subprocess("--campaign", "campaign.toml", "--run-dir", str(run_dir), "-p", "no:randomly", *args)


def test_progress_shows_with_capture_on_and_the_summary_tables_the_variants(sandbox, tmp_path, monkeypatch):
    step = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    junit = tmp_path / "junit.xml"
    res = run(sandbox, tmp_path / "run", f"--junitxml={junit}")
    out = res.stdout.str()
    assert "toy ci-tiny-fp32 cases: 1/3" in out and "toy ci-tiny-fp32 cases: 3/3 in" in out   # first and last count
    assert "toy ci-tiny-fp32 cases: 2/3" not in out                                           # throttled
    assert "captured test output" not in out[:out.index("= FAILURES =")]                      # capture stays on
    summary = out[out.index("= gatehouse ="):]
    assert "variant" in summary and "ci-tiny-q4" in summary and "ci-tiny-fp32" in summary
    assert "ci-tiny-q4 / toy (fail): ci-tiny-q4 told to fail: the toy's reason" in summary   # one reason per gate
    assert "report: " in summary and "report.md" in summary
    text = step.read_text()                                                                   # the CI step summary
    assert text.startswith("## Gatehouse — ") and "| ci-tiny-q4 |" in text and "told to fail" in text
    cases = {c.get("name"): {p.get("name"): p.get("value") for p in c.iter("property")}
             for c in ET.parse(junit).getroot().iter("testcase")}
    props = cases["test_toy_gate[ci-tiny-q4]"]
    assert props["gatehouse.gate"] == "toy" and props["gatehouse.outcome"] == "fail"
    assert props["gatehouse.value_s"] == "1.5 s" and "told to fail" in props["gatehouse.reason"]
    assert props["gatehouse_receipt"].endswith(".json")


def test_quiet_shows_no_progress_and_no_table(sandbox, tmp_path):
    out = run(sandbox, tmp_path / "run", "-q").stdout.str()
    assert "cases: 1/3" not in out and "rank  variant" not in out
    assert "report: " in out                                   # still where the report is


def test_xdist_workers_progress_reaches_the_controller(sandbox, tmp_path):
    res = run(sandbox, tmp_path / "run", "-n", "2")
    out = res.stdout.str()
    assert "cases: 3/3 in" in out and ("gw0 [gatehouse" in out or "gw1 [gatehouse" in out)
    logs = sorted(p.name for p in (tmp_path / "run" / "progress").glob("*.log"))
    assert logs and all(name.startswith("gw") for name in logs)


def test_ticker_shows_first_last_and_at_most_every_interval(monkeypatch):
    lines = []
    progress.install(lines.append)
    try:
        tick = progress.ticker("cases", 4, every_s=3600)
        for i in range(1, 5):
            tick(i)
        assert [ln.split("] ", 1)[1] for ln in lines][:1] == ["cases: 1/4"]
        assert len(lines) == 2 and lines[1].split("] ", 1)[1].startswith("cases: 4/4 in ")
    finally:
        progress.install(None)


def test_emit_never_raises_and_install_hands_back_the_sink_it_replaced():
    def broken(line):
        raise OSError("terminal gone")
    previous = progress.install(broken)
    try:
        progress.emit("still fine")
    finally:
        assert progress.install(previous) is broken   # what a nested session's unconfigure puts back


def test_tail_shows_complete_lines_once_and_waits_for_a_partial_one(tmp_path):
    folder = tmp_path / "progress"
    folder.mkdir()
    (folder / "gw0.log").write_text("old line\n")
    shown = []
    tail = progress.Tail(folder, shown.append, interval_s=3600, skip_existing=True)
    with open(folder / "gw0.log", "a") as f:
        f.write("first\nsecond, half")
    assert tail.poll() == 1 and shown == ["gw0 first"]
    with open(folder / "gw0.log", "a") as f:
        f.write(" written\n")
    (folder / "gw1.log").write_text("other worker\n")
    tail.poll()
    assert shown == ["gw0 first", "gw0 second, half written", "gw1 other worker"]
    assert tail.poll() == 0


def test_stamp():
    assert progress.stamp(5.2) == "   5s" and progress.stamp(187) == "3m07s" and progress.stamp(3720) == "1h02m"


def test_a_ticker_without_ends_speaks_only_after_its_interval(monkeypatch):
    """``ends=False`` (a win-rule block, announced by its start line): no first or last line of its own, a line once
    the interval has passed since the start or the last line."""
    from harness import progress

    now = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    said = []
    tick = progress.ticker("block repeats", 5, every_s=10, say=said.append, ends=False)
    tick(1)
    now[0] += 11
    tick(2)
    now[0] += 3
    tick(3)
    tick(5)
    assert said == ["block repeats: 2/5"]
