"""The Gatehouse pytest plugin: options, hooks and the receipt fixture; the work lives in GatehouseSession."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

import pytest

from . import fingerprint, gates, jsonfile, locks, progress, remote, report, rundir, search, shard
from .campaign import load as load_campaign
from .domain import PEERS, Variant
from .errors import HarnessError
from .receipt import recheck_reasons as receipt_recheck_reasons
from .session import GatehouseSession

SESSION = pytest.StashKey[GatehouseSession]()
RECEIPT = pytest.StashKey[object]()
REPORTS = pytest.StashKey[dict]()
HELD = pytest.StashKey[object]()
TAIL = pytest.StashKey[object]()
PREVIOUS_SINK = pytest.StashKey[object]()


def pytest_addoption(parser):
    group = parser.getgroup("gatehouse", "Gatehouse measurement suite")
    group.addoption("--campaign", default=None, metavar="FILE",
                    help="campaign TOML (default: campaigns/default.toml under the rootdir)")
    group.addoption("--run-dir", default=None, metavar="DIR",
                    help="run directory for receipts and the report (default: a new one under runs/); "
                         "reuse it with --lf to replace only the failing receipts")
    group.addoption("--artifact-cache", default=None, metavar="DIR",
                    help="artifact store (default: $GATEHOUSE_CACHE or ~/.cache/gatehouse/artifacts)")
    group.addoption("--review", default=None, metavar="FILE",
                    help="transcript review record (JSON) that approves a behavior report by SHA-256")
    group.addoption("--no-early-stop", action="store_true", default=False,
                    help="time every recipe, also one that failed a screening gate ([search] early_stop)")
    group.addoption("--shard", default=None, metavar="K/N",
                    help="run the K-th of N parts of the campaign, split by variant (a CI matrix job); join the "
                         "N run directories with bin/gatehouse report --merge")
    group.addoption("--shard-durations", default=None, metavar="PATH",
                    help="weigh the --shard split by a previous run's durations (its run directory, or a file "
                         "written by python -m harness.shard RUN_DIR --out FILE): longest variants first onto the "
                         "least-loaded shard; every job of the matrix must name the same durations")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    """Find the root directory and ini file again, now that Gatehouse's options are known.

    pytest picks its root directory before any plugin's options are parsed, so the value of
    ``--run-dir PATH`` (two words; also ``--campaign``, ``--artifact-cache``, ``--review``) looks like a
    test path: with PATH outside the checkout the root directory became PATH, pytest.ini was lost and
    collection failed, while ``--run-dir=PATH`` worked.  Here the same search runs without those values
    and, where it differs, the ini's ``addopts`` are applied as pytest would have applied them.
    """
    import copy

    from _pytest.config.findpaths import determine_setup

    ns = early_config.known_args_namespace   # parsed with our options: PATH is no longer a file_or_dir
    rootpath, inipath, inicfg, ignored = determine_setup(
        inifile=ns.inifilename, override_ini=ns.override_ini, args=ns.file_or_dir,
        rootdir_cmd_arg=ns.rootdir or None, invocation_dir=early_config.invocation_params.dir)
    if (rootpath, inipath) == (early_config.rootpath, early_config.inipath):
        return
    early_config._rootpath, early_config._inipath, early_config._inicfg = rootpath, inipath, inicfg
    early_config._ignored_config_files = ignored
    early_config._inicache.clear()
    parser.extra_info["rootdir"], parser.extra_info["inifile"] = str(rootpath), str(inipath)
    args[:] = early_config._validate_args(early_config.getini("addopts"), "via addopts config") + args
    early_config.known_args_namespace = parser.parse_known_args(args, namespace=copy.copy(early_config.option))
    early_config.known_args_namespace.confcutdir = str(inipath.parent if inipath else rootpath)


def _session(config) -> GatehouseSession | None:
    return config.stash.get(SESSION, None)


def pytest_configure(config):
    for spec in gates.GATES.values():   # one marker per gate, from the registry: pytest -m "cache or quantization"
        config.addinivalue_line("markers", f"{spec.name}: the {spec.name} gate ({spec.level} level): {spec.describe}")
    option = config.getoption("--campaign")
    path = Path(option) if option else Path(config.rootpath) / "campaigns" / "default.toml"
    if not option and not path.exists():
        return  # not a Gatehouse tree (for example a pytester sandbox without --campaign)
    try:
        campaign = load_campaign(path)
        workerinput = getattr(config, "workerinput", None)
        remote_worker = bool(workerinput and workerinput.get(remote.REMOTE))
        refused = None
        if remote_worker:   # another host: receipts are staged on it and shipped home with the reports
            import tempfile

            worker = workerinput.get("workerid", "worker")
            try:
                remote.check_source(worker, platform.node(), fingerprint.harness_source()["sha256"],
                                    workerinput.get(remote.SOURCE))
            except remote.RemoteError as exc:   # every test of this worker fails at setup, no receipt written
                refused = str(exc)
            run_path = remote.staging(Path(tempfile.gettempdir()), workerinput["testrunuid"], worker)
        elif workerinput is not None:
            run_path = Path(workerinput["gatehouse_run_dir"])
            worker = workerinput.get("workerid", "worker")
        else:
            given = config.getoption("--run-dir")
            run_dir = rundir.RunDir(Path(given).resolve()) if given else \
                rundir.RunDir.new(Path(config.rootpath) / "runs", campaign.name)
            run_dir.check(campaign.sha256)  # refuse a different campaign before any test runs
            run_path = run_dir.path
            worker = "main"
    except HarnessError as exc:
        raise pytest.UsageError(str(exc)) from None
    review_file = config.getoption("--review")
    if review_file and workerinput is None:
        from . import review

        try:
            review.load(review_file)  # a bad review record is refused before any test runs
        except HarnessError as exc:
            raise pytest.UsageError(str(exc)) from None
    cache = config.getoption("--artifact-cache")
    try:
        shard_plan = _shard_plan(config, workerinput)
    except HarnessError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[SESSION] = GatehouseSession(campaign, run_path, Path(cache) if cache else None, worker,
                                             early_stop=campaign.search.early_stop and not config.getoption("--no-early-stop"),
                                             shard=shard_plan, remote=remote_worker, refused=refused)
    _install_progress(config, run_path, worker if workerinput is not None else None)
    if shard_plan is not None:
        config.pluginmanager.register(_ShardFilter(shard_plan), "gatehouse-shard")
    if workerinput is None:
        config.pluginmanager.register(_Controller(config.stash[SESSION]), "gatehouse-controller")


def _shard_plan(config, workerinput) -> "shard.Plan | None":
    """``--shard K/N`` [``--shard-durations PATH``]: the controller reads the durations and hands them to its
    workers (``gatehouse_shard_weights``), so that a remote host needs neither the file nor the run directory."""
    text, given = config.getoption("--shard"), config.getoption("--shard-durations")
    if text is None:
        if given:
            raise shard.ShardError(f"--shard-durations {given}: needs --shard K/N")
        return None
    k, n = shard.parse(text)
    passed = (workerinput or {}).get("gatehouse_shard_weights")
    if passed is not None:
        return shard.Plan(k, n, passed["weights"], passed["source"], passed["sha256"])
    if not given:
        return shard.Plan(k, n)
    weights, sha = shard.load_durations(given)
    return shard.Plan(k, n, weights, str(given), sha)


def _install_progress(config, run_path: Path, worker: str | None) -> None:
    """Progress lines (harness.progress): an xdist worker appends them to its log in the run directory for the
    controller to show; the main process writes them through the terminal writer, nothing under ``-q``."""
    if worker is not None:
        sink = progress.file_sink(rundir.RunDir(run_path).progress / f"{worker}.log")
    elif config.get_verbosity() < 0:
        sink = lambda line: None   # noqa: E731 - quiet under -q
    else:
        sink = _terminal_sink(config)
    config.stash[PREVIOUS_SINK] = progress.install(sink)


def pytest_unconfigure(config):
    """Put back the progress sink this session replaced (a pytester session run in process ends here)."""
    if PREVIOUS_SINK in config.stash:
        progress.install(config.stash[PREVIOUS_SINK])


def _terminal_sink(config):
    from contextlib import nullcontext

    def sink(line: str) -> None:
        tr = config.pluginmanager.get_plugin("terminalreporter")
        if tr is None:
            print(line, file=sys.__stderr__, flush=True)
            return
        capman = config.pluginmanager.get_plugin("capturemanager")
        with capman.global_and_fixture_disabled() if capman else nullcontext():   # as pytest's live logging
            if tr._tw.width_of_current_line:   # a line of progress dots in the making ends first
                tr._tw.line()
            tr.write_line(line)
            tr.flush()

    return sink


def pytest_sessionstart(session):
    """On the xdist controller, show the workers' progress lines as they come (harness.progress.Tail)."""
    gs = _session(session.config)
    if gs is None or hasattr(session.config, "workerinput") or session.config.get_verbosity() < 0:
        return
    if session.config.pluginmanager.get_plugin("dsession") is None:
        return
    tail = progress.Tail(rundir.RunDir(gs.run_path).progress, _terminal_sink(session.config), skip_existing=True)
    session.config.stash[TAIL] = tail.start()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    session = _session(node.config)
    if session is not None:
        node.workerinput["gatehouse_run_dir"] = str(session.run_path)
        if session.shard is not None and session.shard.weights is not None:
            node.workerinput["gatehouse_shard_weights"] = {
                "weights": session.shard.weights, "source": session.shard.source, "sha256": session.shard.sha256}
        if remote.is_remote(node.gateway.spec):
            node.workerinput[remote.REMOTE] = True
            node.workerinput[remote.SOURCE] = fingerprint.harness_source()["sha256"]


class _Controller:
    """The controlling process's side of xdist (harness/remote.py): it writes what remote workers ship, and an
    error receipt for a test whose worker died while running it."""

    def __init__(self, session: GatehouseSession):
        self.session = session
        self.pending: dict[str, dict] = {}
        self.collected: set[str] = set()   # what the workers collected to run
        self.reported: set[str] = set()    # what ended (a teardown report, or a crash report)
        self.seconds: dict[str, float] = {}   # a running test's phases so far
        self.timed: list[dict] = []           # durations lines not yet written (the run directory may not exist yet)

    def _time(self, report) -> None:
        """Each test's seconds by shard unit into ``durations.jsonl`` (what ``--shard-durations`` weighs by),
        written once the run directory exists (a session of the suite's own tests alone makes none)."""
        unit = getattr(report, shard.UNIT, None)
        if unit is None or report.when not in ("setup", "call", "teardown"):
            return
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + float(report.duration or 0.0)
        if report.when == "teardown":
            self.timed.append({"nodeid": report.nodeid, "unit": unit,
                               "seconds": round(self.seconds.pop(report.nodeid), 3)})
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


def gate_of(node) -> gates.GateSpec | None:
    """The registered gate a test is marked with (``@pytest.mark.gate("name")``), or None."""
    marker = node.get_closest_marker("gate")
    if marker is None:
        return None
    if len(marker.args) != 1 or marker.kwargs:
        raise pytest.UsageError(f"{node.nodeid}: @pytest.mark.gate takes exactly the gate's name (the registry "
                                f"declares what it applies to), got args {marker.args!r} kwargs {marker.kwargs!r}")
    try:
        return gates.get(marker.args[0])
    except KeyError as exc:
        raise pytest.UsageError(f"{node.nodeid}: {exc.args[0]}") from None


def pytest_generate_tests(metafunc):
    if "variant" not in metafunc.fixturenames:
        return
    session = _session(metafunc.config)
    spec = gate_of(metafunc.definition)
    if session is None or spec is None:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: a test that takes `variant` must be "
                                f"marked @pytest.mark.gate(...) and run with a campaign")
    params = []
    for m in session.campaign.models:
        for v in gates.targets(spec, m):
            marks = [getattr(pytest.mark, m.tier)]
            marks += [getattr(pytest.mark, name) for name in (PEERS[v.peer].marks if v.peer else ())]
            reason = session.campaign.expected_failure(spec.name, m.id, v.dtype)
            if reason:
                # strict: a gate that starts passing must say so, and the expectation be removed
                marks.append(pytest.mark.xfail(reason=f"campaign expects this gate to fail: {reason}", strict=True))
            if "donor" in metafunc.fixturenames:   # a skill-overlay gate: model x dtype x overlay
                overlay = session.campaign.overlay
                for d in (overlay.donors_of(m.id) if overlay is not None else ()):
                    params.append(pytest.param(v, d, id=f"{v.id}-{d.id}", marks=marks))
                continue
            params.append(pytest.param(v, id=v.id, marks=marks))
    if "donor" in metafunc.fixturenames:
        metafunc.parametrize(("variant", "donor"), params)
        return
    metafunc.parametrize("variant", params)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Before every other implementation: each gate test carries its gate's own marker (so ``-m`` can choose
    by gate). After them all: the recipes' screening tests first (``[search]``, harness/search.py), so a
    recipe that fails one is never timed. The shard is taken in between (``_ShardFilter``)."""
    for item in items:
        spec = gate_of(item)
        if spec is not None:
            item.add_marker(spec.name)
    result = yield
    session = _session(config)
    if session is None or not session.early_stop:
        return result
    screen = set(session.campaign.search.screen)

    def screening(item) -> bool:
        spec, variant = gate_of(item), _variant_of(item)
        return spec is not None and spec.name in screen and isinstance(variant, Variant) and variant.recipe is not None

    items[:] = search.order(items, screening)
    return result


class _ShardFilter:
    """``--shard``: a plain ``trylast`` implementation, so it runs after ``-m``/``-k`` have deselected (a
    durations-weighted split then weighs only the tests this selection runs) and before ``--lf`` filters in its
    wrapper (a rerun of a shard's failures keeps the shard's split)."""

    def __init__(self, plan: "shard.Plan"):
        self.plan = plan

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        _keep_shard(config, items, self.plan)


def _unit_of(item) -> str:
    """The unit a test is sharded and timed by (harness.shard.unit): its variant, else the test itself."""
    variant = _variant_of(item)
    return shard.unit(item.nodeid, variant.id if isinstance(variant, Variant) else None)


def _keep_shard(config, items, plan: "shard.Plan") -> None:
    """Deselect every test outside the plan's shard (harness.shard: by variant, a window never split)."""
    keep = plan.select([_unit_of(item) for item in items])
    dropped = [item for item, kept in zip(items, keep) if not kept]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item, kept in zip(items, keep) if kept]


def _variant_of(item):
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("variant") if callspec is not None else None


def _variant_dict(variant) -> dict:
    """The receipt's variant block of a test's ``variant`` parameter (none for a run-level test)."""
    return variant.as_dict() if isinstance(variant, Variant) else {"model": None, "dtype": None}


def _announce(session: GatehouseSession, item) -> None:
    """Tell the controller what a gate test is before any of it runs: a passed setup report (silent in every
    reporter) that xdist forwards, carrying the skeleton of its error receipt should this worker die."""
    spec, variant = gate_of(item), _variant_of(item)
    if spec is None:
        return
    from .receipt import now_iso

    note = pytest.TestReport(nodeid=item.nodeid, location=item.location, keywords={}, outcome="passed",
                             longrepr=None, when="setup")
    setattr(note, remote.PENDING, remote.skeleton(item.nodeid, spec.name, _variant_dict(variant),
                                                  session.campaign.policy[spec.name].as_dict(), spec.level,
                                                  fingerprint.machine(), session.worker, now_iso()))
    item.ihook.pytest_runtest_logreport(report=note)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    session = _session(item.config)
    if session is not None and hasattr(item.config, "workerinput"):
        # (xdist's worker forwards a report of the running test only; a worker that dies between two tests leaves
        # the next one without a receipt, and --lf runs it: xdist reports it failed)
        _announce(session, item)
    exclusive = item.get_closest_marker("exclusive") is not None
    with locks.machine(exclusive=exclusive) as held:
        item.stash[HELD] = held
        yield


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    session = _session(item.config)
    if session is not None and session.refused:   # a remote worker of another harness source measures nothing
        item.session.shouldstop = session.refused
        pytest.fail(session.refused, pytrace=False)
    spec = gate_of(item)
    if session is None or spec is None:
        return
    variant = _variant_of(item)
    gate = spec.name
    r = session.new_receipt(item.nodeid, gate, _variant_dict(variant))
    r.level = spec.level
    r.set(policy=session.campaign.policy[gate].as_dict())
    if isinstance(variant, Variant):
        expected = session.campaign.expected_failure(gate, variant.model.id, variant.dtype)
        if expected:
            r.note("expected_failure", expected)
    held = item.stash.get(HELD, None)
    if held is not None:
        r.exclusive = held.mode == "exclusive"
        r.lock_wait_s = held.wait_s
    item.stash[RECEIPT] = r
    why = session.stop_reason(variant) if isinstance(variant, Variant) and item.get_closest_marker("exclusive") \
        else None
    if why:
        r.note("early_stop", why)
        pytest.skip(f"{why}: not timed ([search] early_stop; --no-early-stop times it)")


def _outcome(item, reps) -> tuple[str, list[str]]:
    """Turn pytest's phase reports and the gate's own verdict into one receipt outcome."""
    r = item.stash[RECEIPT]
    setup = reps.get("setup")
    if setup is None or setup[0].skipped:
        return "skip", [_text(setup) or "skipped at setup"]
    if setup[0].failed:
        return "error", [f"setup failed: {_text(setup)}"]
    outcome, reasons = "pass", []
    call = reps.get("call")
    if call is not None:
        rep, excinfo = call
        unexpected = excinfo is not None and not excinfo.errisinstance((AssertionError, pytest.skip.Exception)) \
            and not hasattr(rep, "wasxfail")
        if unexpected:
            outcome, reasons = "error", [f"{excinfo.typename}: {excinfo.value}"]
        elif r.verdict is not None:
            outcome, reasons = ("pass", []) if r.verdict.passed else ("fail", list(r.verdict.reasons))
        elif rep.failed or hasattr(rep, "wasxfail"):
            outcome, reasons = "fail", [_text(call) or "assertion failed"]
        elif rep.skipped:
            outcome, reasons = "skip", [_text(call) or "skipped"]
    changed = receipt_recheck_reasons(r.graph_recheck)
    if changed:   # the figures were measured on bytes that are no longer the pinned graph
        outcome, reasons = ("error" if outcome == "error" else "fail"), [*reasons, *changed]
    teardown = reps.get("teardown")
    if teardown is not None and teardown[0].failed:
        outcome, reasons = "error", reasons + [f"teardown failed: {_text(teardown)}"]
    return outcome, reasons


def _text(entry) -> str:
    if entry is None:
        return ""
    rep, excinfo = entry
    if excinfo is not None:
        if excinfo.errisinstance(pytest.skip.Exception):
            return str(excinfo.value.msg if hasattr(excinfo.value, "msg") else excinfo.value)
        return f"{excinfo.typename}: {str(excinfo.value).strip().splitlines()[0] if str(excinfo.value).strip() else ''}"
    if isinstance(rep.longrepr, tuple):
        return str(rep.longrepr[2])
    return str(rep.longrepr or "")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    result = yield
    rep = result.get_result()
    setattr(rep, shard.UNIT, _unit_of(item))
    session = _session(item.config)
    if session is not None and session.remote:   # a remote worker's progress lines go home with every report
        lines = session.new_progress_lines()
        if lines:
            setattr(rep, remote.PROGRESS, {"worker": session.worker, "lines": lines})
    if RECEIPT not in item.stash:
        return
    if rep.when == "call":
        _recheck_graphs(item.stash[RECEIPT], rep)
    reps = item.stash.setdefault(REPORTS, {})
    reps[rep.when] = (rep, call.excinfo)
    if rep.when != "teardown":
        return
    try:
        outcome, reasons = _outcome(item, reps)
        path = session.write_receipt(item.stash[RECEIPT], outcome, reasons)
        if session.remote:   # home to the controller's run directory with the report (harness/remote.py)
            setattr(rep, remote.SHIPPED, remote.pack(session.run_dir, item.nodeid, path, session.new_build_lines()))
        props = junit_properties(item.stash[RECEIPT], outcome, reasons, path)
        item.user_properties.extend(props)     # what record_property would add: JUnit XML's <properties>
        rep.user_properties.extend(props)
    except HarnessError as exc:
        rep.outcome = "failed"
        rep.longrepr = f"Gatehouse could not write the receipt for {item.nodeid}: {exc}"


def junit_properties(r, outcome: str, reasons: list[str], path: Path) -> list[tuple[str, str]]:
    """The receipt's key figures as JUnit XML properties, so a CI system reads them without the report: the
    gate, its outcome and first reason, the receipt's path, every measurement (``gatehouse.<name>``, the raw
    value with its unit) and each lane cell's decode tokens/s."""
    props = [("gatehouse_receipt", str(path)), ("gatehouse.gate", r.gate), ("gatehouse.outcome", outcome)]
    if reasons:
        props.append(("gatehouse.reason", reasons[0]))
    for name, m in sorted(r.measurements.items()):
        if m.get("value") is not None:
            props.append((f"gatehouse.{name}", f"{m['value']}" + (f" {m['unit']}" if m.get("unit") else "")))
    for cell, c in sorted(((r.lane or {}).get("cells") or {}).items()):
        if c.get("decode_tokens_per_s") is not None:
            props.append((f"gatehouse.{r.lane['name']}.{cell}.decode_tokens_per_s", str(c["decode_tokens_per_s"])))
    return props


def _recheck_graphs(r, rep) -> None:
    """Re-hash the graphs the test pinned as soon as its body ends; a changed one fails the test (an
    expected failure too: a graph that changed is not the failure the campaign expected)."""
    reasons = r.recheck_graphs()
    if not reasons:
        return
    rep.outcome = "failed"
    rep.longrepr = "Gatehouse: a pinned graph changed while the test measured it:\n" + "\n".join(reasons)
    if hasattr(rep, "wasxfail"):
        del rep.wasxfail


@pytest.fixture
def receipt(request):
    """This gate test's receipt: ``set``, ``pin``, ``measure``, ``decide``, ``note``, ``sampling`` (around a
    timing), ``evidence_dir``."""
    r = request.node.stash.get(RECEIPT, None)
    if r is None:
        raise pytest.UsageError(f"{request.node.nodeid}: the receipt fixture needs @pytest.mark.gate(...) "
                                f"and a campaign")
    r.evidence_dir.mkdir(parents=True, exist_ok=True)
    return r


@pytest.fixture
def gate(request) -> gates.GateSpec:
    """This test's gate declaration (its name, policy class and ``decide``)."""
    spec = gate_of(request.node)
    if spec is None:
        raise pytest.UsageError(f"{request.node.nodeid}: the gate fixture needs @pytest.mark.gate(...)")
    return spec


@pytest.fixture
def policy(request, gate, campaign):
    """This test's gate policy, as the campaign declared it (parsed and checked when the campaign loaded)."""
    return campaign.policy[gate.name]


@pytest.fixture(scope="session")
def gatehouse(request) -> GatehouseSession:
    session = _session(request.config)
    if session is None:
        pytest.skip("no Gatehouse campaign in this tree (pass --campaign)")
    return session


@pytest.fixture(scope="session")
def campaign(gatehouse):
    return gatehouse.campaign


@pytest.fixture(scope="session")
def artifact_store(gatehouse):
    return gatehouse.store


def pytest_sessionfinish(session, exitstatus):
    tail = session.config.stash.get(TAIL, None)
    if tail is not None:
        tail.stop()
    gs = _session(session.config)
    if gs is None or hasattr(session.config, "workerinput") or not gs.started:
        return
    try:
        gs.report_paths = report.rebuild(gs.run_dir, session.config.getoption("--review"))
    except HarnessError as exc:
        gs.report_error = str(exc)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    gs = _session(config)
    if gs is None or hasattr(config, "workerinput") or not gs.started:
        return
    tr = terminalreporter
    tr.section("gatehouse")
    if getattr(gs, "report_error", None):
        tr.write_line(f"report not rebuilt: {gs.report_error}", red=True)
    paths = getattr(gs, "report_paths", None)
    if paths:
        from .report import summary

        try:
            rep = jsonfile.load(paths["json"], "report")
        except HarnessError as exc:
            tr.write_line(f"report unreadable: {exc}", red=True)
            rep = None
        if rep is not None:
            if config.get_verbosity() >= 0:
                for line in summary.terminal_lines(rep, gs.run_path):
                    tr.write_line(line)
            _step_summary(tr, summary.markdown_summary(rep, paths))
        tr.write_line(report.summary_line(paths["json"]))
        for kind in ("md", "html"):
            if paths.get(kind):
                tr.write_line(f"report: {paths[kind]}")
    tr.write_line(f"run directory: {gs.run_path}")


def _step_summary(tr, text: str) -> None:
    """Append the summary to ``$GITHUB_STEP_SUMMARY`` when CI sets it (GitHub Actions' job summary)."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return
    try:
        with open(target, "a", encoding="utf-8") as f:
            f.write(text + "\n")
    except OSError as exc:
        tr.write_line(f"GITHUB_STEP_SUMMARY={target}: cannot append the summary: {exc}", red=True)
