"""The Gatehouse pytest plugin: options, hooks and fixtures. The work lives in GatehouseSession; how a test is seen
(gate, variant, shard) in pytest_items, its outcome in pytest_outcome, the terminal in pytest_terminal, the xdist
controller in pytest_xdist."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from . import (fingerprint, gates, locks, progress, pytest_items, pytest_outcome, pytest_terminal, pytest_xdist,
               remote, report, rundir, search, shard)
from .campaign import load as load_campaign
from .domain import Variant
from .errors import HarnessError
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
        shard_plan = pytest_items.shard_plan(config, workerinput)
    except HarnessError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[SESSION] = GatehouseSession(campaign, run_path, Path(cache) if cache else None, worker,
                                             early_stop=campaign.search.early_stop and not config.getoption("--no-early-stop"),
                                             shard=shard_plan, remote=remote_worker, refused=refused)
    config.stash[PREVIOUS_SINK] = pytest_terminal.install_progress(config, run_path,
                                                                   worker if workerinput is not None else None)
    if shard_plan is not None:
        config.pluginmanager.register(pytest_items.ShardFilter(shard_plan), "gatehouse-shard")
    if workerinput is None:
        config.pluginmanager.register(pytest_xdist.Controller(config.stash[SESSION]), "gatehouse-controller")



def pytest_unconfigure(config):
    """Put back the progress sink this session replaced (a pytester session run in process ends here)."""
    if PREVIOUS_SINK in config.stash:
        progress.install(config.stash[PREVIOUS_SINK])


def pytest_sessionstart(session):
    """On the xdist controller, show the workers' progress lines as they come (harness.progress.Tail)."""
    gs = _session(session.config)
    if gs is None or hasattr(session.config, "workerinput") or session.config.get_verbosity() < 0:
        return
    if session.config.pluginmanager.get_plugin("dsession") is None:
        return
    tail = progress.Tail(rundir.RunDir(gs.run_path).progress, pytest_terminal.terminal_sink(session.config), skip_existing=True)
    session.config.stash[TAIL] = tail.start()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    session = _session(node.config)
    if session is not None:
        pytest_xdist.configure_node(session, node)


def pytest_generate_tests(metafunc):
    if "variant" not in metafunc.fixturenames:
        return
    session = _session(metafunc.config)
    spec = pytest_items.gate_of(metafunc.definition)
    if session is None or spec is None:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: a test that takes `variant` must be "
                                f"marked @pytest.mark.gate(...) and run with a campaign")
    pytest_items.parametrize(metafunc, session, spec)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Before every other implementation: each gate test carries its gate's own marker (so ``-m`` can choose
    by gate). After them all: the recipes' screening tests first (``[search]``, harness/search.py), so a
    recipe that fails one is never timed; under xdist, the modules with slow tests first and the tests that hold
    the machine exclusively last (``pytest_items.run_order``). The shard is taken in between (``_ShardFilter``)."""
    for item in items:
        spec = pytest_items.gate_of(item)
        if spec is not None:
            item.add_marker(spec.name)
    result = yield
    session = _session(config)
    if session is not None and session.early_stop:
        screen = set(session.campaign.search.screen)

        def screening(item) -> bool:
            spec, variant = pytest_items.gate_of(item), pytest_items.variant_of(item)
            return spec is not None and spec.name in screen and isinstance(variant, Variant) and variant.recipe is not None

        items[:] = search.order(items, screening)
    if hasattr(config, "workerinput"):   # an xdist worker: its order is the order the controller hands tests out in
        items[:] = pytest_items.run_order(items)
    return result


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    session = _session(item.config)
    if session is not None and hasattr(item.config, "workerinput"):
        # (xdist's worker forwards a report of the running test only; a worker that dies between two tests leaves
        # the next one without a receipt, and --lf runs it: xdist reports it failed)
        pytest_items.announce(session, item)
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
    spec = pytest_items.gate_of(item)
    if session is None or spec is None:
        return
    variant = pytest_items.variant_of(item)
    gate = spec.name
    r = session.new_receipt(item.nodeid, gate, pytest_items.variant_dict(variant))
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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    result = yield
    rep = result.get_result()
    setattr(rep, shard.UNIT, pytest_items.unit_of(item))
    held = item.stash.get(HELD, None)   # how the test held the machine: what the run's time budget splits by
    setattr(rep, shard.EXCLUSIVE, held is not None and held.mode == "exclusive")
    session = _session(item.config)
    if session is not None and session.remote:   # a remote worker's progress lines go home with every report
        lines = session.new_progress_lines()
        if lines:
            setattr(rep, remote.PROGRESS, {"worker": session.worker, "lines": lines})
    if RECEIPT not in item.stash:
        return
    if rep.when == "call":
        pytest_outcome.recheck_graphs(item.stash[RECEIPT], rep)
    reps = item.stash.setdefault(REPORTS, {})
    reps[rep.when] = (rep, call.excinfo)
    if rep.when != "teardown":
        return
    try:
        outcome, reasons = pytest_outcome.outcome(item.stash[RECEIPT], reps)
        path = session.write_receipt(item.stash[RECEIPT], outcome, reasons)
        if session.remote:   # home to the controller's run directory with the report (harness/remote.py)
            setattr(rep, remote.SHIPPED, remote.pack(session.run_dir, item.nodeid, path, session.new_build_lines()))
        props = pytest_outcome.junit_properties(item.stash[RECEIPT], outcome, reasons, path)
        item.user_properties.extend(props)     # what record_property would add: JUnit XML's <properties>
        rep.user_properties.extend(props)
    except HarnessError as exc:
        rep.outcome = "failed"
        rep.longrepr = f"Gatehouse could not write the receipt for {item.nodeid}: {exc}"


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
    spec = pytest_items.gate_of(request.node)
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
    pytest_terminal.summary(terminalreporter, gs, config)
