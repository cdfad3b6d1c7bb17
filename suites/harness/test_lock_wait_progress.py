"""A wait for the machine lock is never silent (issue 35: a ``campaign --model`` queued behind another Gatehouse run
sat 51 s without a line): past 2 s it says which lock, who holds it (pid and command, from /proc/locks) and how
long it has waited, again every 10 s, and when it got it; a short wait prints nothing."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import locks, progress

ROOT = Path(__file__).resolve().parents[2]
HOLD = ("import sys, time; sys.path.insert(0, {root!r})\nfrom harness import locks\n"
        "with locks.machine(exclusive=True):\n    print('held', flush=True)\n    time.sleep({seconds})\n")

pytestmark = pytest.mark.ci


def hold(tmp_path, monkeypatch, seconds: float) -> subprocess.Popen:
    monkeypatch.setenv("GATEHOUSE_LOCK_DIR", str(tmp_path))
    monkeypatch.delenv(locks.HELD_ENV, raising=False)
    p = subprocess.Popen([sys.executable, "-c", HOLD.format(root=str(ROOT), seconds=seconds)], stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def taking(monkeypatch, **kw) -> tuple[list[str], float]:
    lines: list[str] = []
    previous = progress.install(lines.append)
    try:
        monkeypatch.setattr(locks, "_local", type(locks._local)())   # not nested in this test's own hold
        t0 = time.monotonic()
        with locks.machine():
            waited = time.monotonic() - t0
    finally:
        progress.install(previous)
    return lines, waited


def test_a_long_wait_names_the_holder_and_the_time(tmp_path, monkeypatch):
    p = hold(tmp_path, monkeypatch, 3.5)
    lines, waited = taking(monkeypatch)
    p.wait()
    assert waited >= 2.0
    waiting = [x for x in lines if "waiting" in x]
    assert waiting and f"pid {p.pid} (" in waiting[0] and "machine.lock" in waiting[0], lines
    assert "for the shared lock" in waiting[0]
    assert any("taken (shared)" in x for x in lines), lines


def test_a_short_wait_prints_nothing(tmp_path, monkeypatch):
    p = hold(tmp_path, monkeypatch, 0.5)
    lines, _ = taking(monkeypatch)
    p.wait()
    assert lines == []


def test_holders_reads_proc_locks(tmp_path, monkeypatch):
    p = hold(tmp_path, monkeypatch, 2)
    try:
        assert any(h.startswith(f"pid {p.pid} (") for h in locks.holders(tmp_path / "machine.lock"))
    finally:
        p.wait()
    assert locks.holders(tmp_path / "nowhere.lock") == []
