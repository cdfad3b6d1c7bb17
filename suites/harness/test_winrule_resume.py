"""The win rule's window journal, resume, time budget and the report's recomputation of each window's verdict.

A window appends each finished start block to ``starts.jsonl`` (harness/winrule/journal.py); a killed window
(simulated here by stopping after N blocks) resumed in the same run directory reuses them when the registration
and the machine fingerprint match, and refuses to mix them otherwise; a torn last line is ignored and reported.
Before it starts a window is estimated and refused over ``[policy.winrule].max_window_seconds``
(harness/winrule/budget.py).  The report recomputes every window's verdict from its recorded starts and flags a
``decision.json`` that disagrees (harness/winrule/recheck.py, the win-rule section).  The lanes are scripted, as in
test_winrule_lane.py: this tests the plumbing, not a probe.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness import winrule
from harness.errors import CampaignError
from harness.fields import Where
from harness.gates.winrule import WinrulePolicy
from harness.lanes import Generation
from harness.winrule import budget, journal, probe_window
from harness.winrule.lane import Schedule, registered, run_window
from harness.winrule.recheck import recheck_folder

REG = registered(winrule.Registration(name="t", version=1, cells=("short",), repeats=2, waves_per_repeat=2,
                                      primary=winrule.Metric("decode_tok_s", "tokens/s", True),
                                      guards=(winrule.Metric("prefill_ms", "ms", False),), seeds="greedy",
                                      max_repeats=4, step=2),
                 Schedule.build(list(range(100, 400)), {"short": 4}, 8))
SCHEDULE = Schedule.build(list(range(100, 400)), {"short": 4}, 8)
LABELS, CONFIGS = ("a1", "b", "a2"), ("threads=2", "threads=1", "threads=2")
DRIFT = winrule.DriftPolicy()
MACHINE = {"fingerprint": "0123456789abcdef", "cpu_model": "x"}


class Lane:
    """A lane stepping ``ms`` per token (ids follow the prompt), counting its calls; ``sleep`` seconds a call."""

    def __init__(self, ms, sleep=0.0):
        self.ms, self.sleep, self.calls = ms, sleep, 0

    def generate(self, prompt, n):
        self.calls += 1
        time.sleep(self.sleep)
        return Generation(tuple(prompt[-1] + i for i in range(n)), tuple(5.0 + self.ms * i for i in range(n)))


class Killed(Exception):
    """The window's process stopping right after a line reached the disk."""


def ident(reg=REG, machine=MACHINE):
    return journal.identity(reg, LABELS, CONFIGS, {"graph_sha256": "g"}, machine, DRIFT.equal, "h" * 64)


def record(folder: Path, lanes, *, reg=REG, kill_after=None, recorded=(), resumed=None):
    """One window written as probe_window writes it: the journal's header, every block as it ends (stopping with
    Killed after ``kill_after`` blocks), then decision.json."""
    path = folder / journal.NAME
    journal.append(path, journal.header(ident(reg), commit="abc", drift=DRIFT, resumed=resumed))
    written = []

    def keep(line):
        journal.append(path, line)
        written.append(line)
        if kill_after is not None and len(written) == kill_after:
            raise Killed()

    decision, starts, _ = run_window(reg, lanes, CONFIGS, LABELS, SCHEDULE, new_tokens=5, warmup=1,
                                     fingerprint=lambda: dict(MACHINE), commit="abc", sample_interval_s=0.05,
                                     decide=lambda s: winrule.decide(s, reg, DRIFT), recorded=recorded, journal=keep)
    (folder / "decision.json").write_text(json.dumps(decision.as_dict(), indent=1))
    return decision, starts


def test_a_killed_window_resumed_reuses_its_recorded_starts(tmp_path):
    whole = tmp_path / "whole"
    whole.mkdir()
    expected, expected_starts = record(whole, [Lane(10.0), Lane(10.0), Lane(10.0)])
    assert [x.repeats for x in expected.looks] == [2, 4]   # a TIE at 2 repeats: a second block of 2 more

    killed = tmp_path / "killed"
    killed.mkdir()
    with pytest.raises(Killed):
        record(killed, [Lane(10.0), Lane(10.0), Lane(10.0)], kill_after=4)   # a1, b, a2 of look 1, then a1 again
    found = journal.read(killed / journal.NAME)
    assert [(b["label"], b["first"], b["end"]) for b in found.blocks] == [
        ("a1", 0, 2), ("b", 0, 2), ("a2", 0, 2), ("a1", 2, 4)] and found.decided is None and found.torn is None

    blocks, why = journal.reusable(found, ident())
    assert len(blocks) == 4 and why.startswith(f"resumed from {killed / journal.NAME}: 4 of its 4 start block(s)")
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    lanes = [Lane(10.0), Lane(10.0), Lane(10.0)]
    decision, starts = record(resumed, lanes, recorded=blocks)
    # a1 was never run again; b and a2 ran only their second block, each warmed up first in its new process
    assert [lane.calls for lane in lanes] == [0, 5, 5]
    assert decision.verdict == expected.verdict and decision.looks == expected.looks
    assert [x.as_dict() for x in decision.series] == [x.as_dict() for x in expected.series]
    assert [s.values for s in starts] == [s.values for s in expected_starts]
    again = journal.read(resumed / journal.NAME)
    assert again.blocks[:4] == found.blocks and len(again.blocks) == 6 and again.decided["verdict"] == decision.verdict
    assert (killed / journal.NAME).exists()   # the killed attempt's journal is kept


def test_a_changed_registration_or_machine_is_not_mixed_in_and_the_old_journal_is_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(probe_window, "emit", lambda line: None)
    evidence = tmp_path / "evidence"
    first = evidence / "test_win_rule-0123"
    first.mkdir(parents=True)
    with pytest.raises(Killed):
        record(first, [Lane(10.0), Lane(10.0), Lane(10.0)], kill_after=2)
    rerun = evidence / ".test_win_rule-0123.rerun-4242"   # RunDir.evidence_for_rerun of the same node
    rerun.mkdir()

    blocks, said = probe_window._resume(rerun, ident())
    assert len(blocks) == 2 and said["from"] == str(first / journal.NAME) and said["blocks"] == 2

    other = dataclasses.replace(REG, required_effect=0.03)
    blocks, said = probe_window._resume(rerun, ident(reg=other))
    assert blocks == () and said["from"] is None
    print(said["journals"][0])
    assert ("(registration.required_effect_fraction: 0.02 recorded, 0.03 now); " in said["journals"][0]
            and "its 2 start block(s) are kept there and not mixed in; the window starts fresh" in said["journals"][0])

    blocks, said = probe_window._resume(rerun, ident(machine={**MACHINE, "fingerprint": "fedcba9876543210"}))
    assert blocks == () and "machine.fingerprint: '0123456789abcdef' recorded, 'fedcba9876543210' now" in \
        said["journals"][0]
    assert len(journal.read(first / journal.NAME).blocks) == 2   # nothing was deleted or rewritten


def test_a_torn_last_line_is_ignored_and_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(probe_window, "emit", lambda line: None)
    folder = tmp_path / "evidence" / "node"
    folder.mkdir(parents=True)
    with pytest.raises(Killed):
        record(folder, [Lane(10.0), Lane(10.0), Lane(10.0)], kill_after=3)
    path = folder / journal.NAME
    whole = path.read_bytes()
    lines = whole.split(b"\n")
    path.write_bytes(b"\n".join(lines[:3]) + b"\n" + lines[3][:40])   # the third block stopped mid-write

    found = journal.read(path)
    assert len(found.blocks) == 2 and found.torn == (f"{path}:4: a torn last line (40 bytes, no newline: the window "
                                                     f"was stopped while writing it) was ignored")
    with pytest.raises(journal.JournalError, match="refusing to append to a torn journal"):
        journal.append(path, {"kind": "block"})
    blocks, said = probe_window._resume(tmp_path / "evidence" / ".node.rerun-7", ident())
    assert len(blocks) == 2 and found.torn in said["journals"][0]

    path.write_bytes(b"\n".join(lines[:2]) + b"\n{not json\n" + b"\n".join(lines[3:]))   # a bad line inside is an error
    with pytest.raises(journal.JournalError, match=re.escape(f"{path}:3: not valid JSON")):
        journal.read(path)


def test_the_estimate_and_the_budget_refusal():
    reg = winrule.Registration(name="probe-intra-op-threads-real", version=1, cells=("short", "long"), repeats=5,
                               waves_per_repeat=2, primary=winrule.Metric("decode_tok_s", "tokens/s", True),
                               seeds="greedy", max_repeats=10, step=5)
    est = budget.estimate(reg, [{"short": 0.5, "long": 2.0}] * 3, warmup=1)
    # per start (1 warm-up + 10 repeats x 2 waves) x (0.5 + 2.0) s; at the first look 1 + 5 x 2
    assert est.most_s == pytest.approx(3 * 21 * 2.5) and est.first_look_s == pytest.approx(3 * 11 * 2.5)
    assert (est.waves, est.warmups) == (120, 6)
    where = Where("campaigns/default.toml", "policy.winrule.max_window_seconds")
    err = budget.refusal(est, 100.0, where, reg.name)
    assert str(err) == (
        "campaigns/default.toml: policy.winrule.max_window_seconds: the window 'probe-intra-op-threads-real' would "
        "take 158 s at most (120 waves and 6 warm-up generations over the three starts, to max_repeats; 82.5 s if it "
        "stops at its first look); basis: one generation per cell timed on each of the 3 loaded probes just before "
        "the window (short 500 ms, long 2 s a wave), over the budget of 100 s (max_window_seconds = 100); "
        "the window was not started: raise the budget, or lower repeats, max_repeats, waves_per_repeat or the cells")
    assert isinstance(err, CampaignError)
    assert budget.refusal(est, 200.0, where, reg.name) is None and budget.refusal(est, None, where, reg.name) is None
    # a resumed window counts only what is left: the first start has its 10 repeats, the second 5
    left = budget.estimate(reg, [{"short": 0.5, "long": 2.0}] * 3, warmup=1, done=[10, 5, 0])
    assert left.most_s == pytest.approx((0 + 11 + 21) * 2.5) and "15 repeats recorded by an earlier" in left.basis


def test_a_window_over_its_budget_is_refused_before_it_starts(tmp_path):
    reg = dataclasses.replace(REG, max_repeats=40, step=38, prompts=None)   # up to 3 x (40 x 2 + 1) waves
    lanes = [Lane(1.0, sleep=0.02), Lane(1.0, sleep=0.02), Lane(1.0, sleep=0.02)]
    notes = {}
    receipt = SimpleNamespace(note=notes.__setitem__)
    work = SimpleNamespace(new_tokens=5, warmup=1)
    over = budget.Budget(1.0, Where("c.toml", "policy.winrule.max_window_seconds"))
    with pytest.raises(CampaignError) as refused:
        probe_window._estimate(receipt, reg, lanes, LABELS, SCHEDULE, work, (), over)
    print(refused.value)
    assert str(refused.value).startswith("c.toml: policy.winrule.max_window_seconds: the window 't' would take ")
    assert "over the budget of 1 s (max_window_seconds = 1)" in str(refused.value)
    assert [lane.calls for lane in lanes] == [1, 1, 1] and notes["winrule_estimate"]["budget_s"] == 1.0
    probe_window._estimate(receipt, reg, lanes, LABELS, SCHEDULE, work, (), None)   # no budget: estimated, not refused
    assert notes["winrule_estimate"]["most_s"] > 1.0 and notes["winrule_estimate"]["budget_s"] is None


def test_the_budget_is_a_policy_field_named_in_its_refusal():
    raw = {"name": "w", "version": 1, "cells": ["short"], "repeats": 2, "waves_per_repeat": 1, "required_effect": 0.02,
           "control": {"threads": 2}, "candidate": {"threads": 1}, "expected": {"m": "LOSS"}, "explain": "why"}
    assert WinrulePolicy.parse(raw, Where("c.toml", "policy.winrule")).max_window_seconds is None
    assert WinrulePolicy.parse({**raw, "max_window_seconds": 900}, Where("c.toml", "policy.winrule")).max_window_seconds == 900
    with pytest.raises(CampaignError, match=r"^c\.toml: policy\.winrule\.max_window_seconds: must be >= 1\.0, got 0\.5"):
        WinrulePolicy.parse({**raw, "max_window_seconds": 0.5}, Where("c.toml", "policy.winrule"))


def test_the_report_recomputes_each_verdict_and_flags_an_edited_decision(tmp_path):
    from harness.report import assemble
    from test_report_collect import make_receipt, write_run

    node = "suites/test_win_rule.py::test_win_rule[ci-tiny-q4-real]"
    block = {"window": "real", "verdict": "WIN", "verdict_before_override": "WIN", "expected": "WIN", "reasons": [],
             "markdown": "decision.md", "chart": "chart.png", "looks": [2]}
    run = write_run(tmp_path, [make_receipt("winrule", "ci-tiny", "q4", nodeid=node, extra={"winrule": block})])
    folder = run.evidence(node)
    folder.mkdir(parents=True)
    decision, _ = record(folder, [Lane(10.0), Lane(5.0), Lane(10.0)])   # the candidate twice as fast
    assert decision.verdict == winrule.WIN and recheck_folder(folder, {}, {}, "WIN").agrees
    (folder / "decision.md").write_text("### Win rule\n")
    assemble.rebuild(run.path)
    text = run.report_md.read_text()
    assert "| WIN, agrees |" in text and "1 of 1 agree with their `decision.json` and receipt" in text

    edited = json.loads((folder / "decision.json").read_text())
    edited["series"][0]["candidate"][1] = 50.0
    edited["verdict"] = edited["verdict_before_override"] = "LOSS"
    (folder / "decision.json").write_text(json.dumps(edited))
    assemble.rebuild(run.path)
    text = run.report_md.read_text()
    assert "| **WIN: disagrees** |" in text and "0 of 1 agree" in text and "Not counted as evidence" in text
    line = next(l for l in text.splitlines() if l.startswith("- ci-tiny q4 window real"))
    print(line)
    assert "decision.json says 'LOSS'; the recorded starts give WIN" in line
    assert "decision.json: short decode_tok_s candidate repeat 1 is 50.0; the recorded starts have" in line

    (folder / journal.NAME).write_bytes((folder / journal.NAME).read_bytes() + b'{"kind": "blo')   # and a torn tail
    assemble.rebuild(run.path)
    assert "Torn journal lines" in run.report_md.read_text()
