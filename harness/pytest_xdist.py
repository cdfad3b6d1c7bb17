"""The controlling process's side of pytest-xdist: what a worker is told when it starts, what remote workers ship
home (receipts, build and progress lines; harness/remote.py), per-test durations by shard unit, and an error
receipt for a test whose worker died while running it."""

from __future__ import annotations

import pytest

from . import fingerprint, remote, rundir, shard
from .errors import HarnessError
from .receipt import now_iso
from .session import GatehouseSession

MAIN = "main"   # the worker of a run without xdist


def configure_node(session: GatehouseSession, node) -> None:
    """What a starting worker receives: the run directory, the shard's weights, and for a remote worker the
    harness source it must match."""
    node.workerinput["gatehouse_run_dir"] = str(session.run_path)
    if session.shard is not None and session.shard.weights is not None:
        node.workerinput["gatehouse_shard_weights"] = {
            "weights": session.shard.weights, "source": session.shard.source, "sha256": session.shard.sha256}
    if remote.is_remote(node.gateway.spec):
        node.workerinput[remote.REMOTE] = True
        node.workerinput[remote.SOURCE] = fingerprint.harness_source()["sha256"]


class Controller:
    """The controlling process's side of xdist (harness/remote.py): it writes what remote workers ship, and an
    error receipt for a test whose worker died while running it."""

    def __init__(self, session: GatehouseSession):
        self.session = session
        self.pending: dict[str, dict] = {}
        self.collected: set[str] = set()   # what the workers collected to run
        self.reported: set[str] = set()    # what ended (a teardown report, or a crash report)
        self.seconds: dict[str, float] = {}   # a running test's phases so far
        self.timed: list[dict] = []           # durations lines not yet written (the run directory may not exist yet)
        self.session_id = now_iso()             # names this session (its start) in its durations lines

    def _time(self, report) -> None:
        """Each test's seconds by shard unit into ``durations.jsonl`` (what ``--shard-durations`` weighs by),
        written once the run directory exists (a session of the suite's own tests alone makes none), with whether it
        held the machine exclusively, the worker that ran it and when its report came home (the report's time budget:
        :mod:`harness.report.timebudget`)."""
        unit = getattr(report, shard.UNIT, None)
        if unit is None or report.when not in ("setup", "call", "teardown"):
            return
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + float(report.duration or 0.0)
        if report.when == "teardown":
            node = getattr(report, "node", None)   # xdist's worker (its gateway id: gw0, or a socket host's name)
            self.timed.append({"nodeid": report.nodeid, "unit": unit,
                               "seconds": round(self.seconds.pop(report.nodeid), 3),
                               "exclusive": bool(getattr(report, shard.EXCLUSIVE, False)),
                               "worker": node.gateway.id if node is not None else MAIN,
                               "session": self.session_id, "finished_at": now_iso()})
            self.flush_durations()

    def flush_durations(self) -> None:
        if self.timed and self.session.started:
            for line in self.timed:
                rundir.append_jsonl(self.session.run_dir.durations, line)
            self.timed.clear()

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids):
        self.collected.update(ids)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session):
        """A run cut short by a dead worker leaves tests that never ran: they count as failed for ``--lf`` (pytest's
        last-failed cache), so ``pytest --lf`` with the same run directory completes the run. Then the last
        durations lines."""
        self.flush_durations()
        never = self.collected - self.reported
        lf = session.config.pluginmanager.get_plugin("lfplugin")
        if never and lf is not None:
            for nodeid in sorted(never):
                lf.lastfailed[nodeid] = True

    def pytest_runtest_logreport(self, report):
        if report.when in ("teardown", "???"):   # xdist's crash report says "???"
            self.reported.add(report.nodeid)
        self._time(report)
        skeleton = getattr(report, remote.PENDING, None)
        if skeleton:
            self.pending[report.nodeid] = skeleton
        lines = getattr(report, remote.PROGRESS, None)
        if lines:
            try:
                remote.accept_progress(self.session.run_dir, lines)
            except HarnessError:   # a progress line is never worth failing a test for
                pass
        shipped = getattr(report, remote.SHIPPED, None)
        if shipped:
            try:
                remote.accept(self.session.run_dir, shipped, self.session.run_record()["run_id"])
            except HarnessError as exc:   # the test's outcome stands; its receipt is missing (incomplete)
                report.outcome = "failed"
                report.longrepr = f"Gatehouse refused the receipt {report.nodeid} shipped by a remote worker: {exc}"
        if report.when == "teardown":
            self.pending.pop(report.nodeid, None)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem, report, sched):
        skeleton = self.pending.pop(crashitem, None)
        if skeleton is None:   # died before the test's setup ended: nothing of it was measured
            return
        host = (skeleton.get("machine_before") or {}).get("hostname")
        try:
            self.session.write_crash_receipt(skeleton, f"{report.longrepr} (host {host}): the worker died before the "
                                                       f"test ended; nothing it measured survived; rerun it with --lf")
        except HarnessError as exc:
            report.longrepr = f"{report.longrepr}; Gatehouse could not write its error receipt: {exc}"
