"""How the plugin sees a collected test: its gate (``@pytest.mark.gate``), its variant, the variants a gate test is
parametrized over, the shard it belongs to, and the announcement a worker sends before a gate test runs."""

from __future__ import annotations

import pytest

from . import fingerprint, gates, remote, shard
from .domain import PEERS, Variant
from .session import GatehouseSession


def shard_plan(config, workerinput) -> "shard.Plan | None":
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


def parametrize(metafunc, session: GatehouseSession, spec: gates.GateSpec) -> None:
    """Parametrize a gate test over the campaign's variants the gate applies to (with the overlay's donors for
    a skill-overlay gate), each marked with its model's tier, its peer's marks and a strict xfail the campaign
    expects."""
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


class ShardFilter:
    """``--shard``: a plain ``trylast`` implementation, so it runs after ``-m``/``-k`` have deselected (a
    durations-weighted split then weighs only the tests this selection runs) and before ``--lf`` filters in its
    wrapper (a rerun of a shard's failures keeps the shard's split)."""

    def __init__(self, plan: "shard.Plan"):
        self.plan = plan

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        keep_shard(config, items, self.plan)


def unit_of(item) -> str:
    """The unit a test is sharded and timed by (harness.shard.unit): its variant, else the test itself."""
    variant = variant_of(item)
    return shard.unit(item.nodeid, variant.id if isinstance(variant, Variant) else None)


def keep_shard(config, items, plan: "shard.Plan") -> None:
    """Deselect every test outside the plan's shard (harness.shard: by variant, a window never split)."""
    keep = plan.select([unit_of(item) for item in items])
    dropped = [item for item, kept in zip(items, keep) if not kept]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item, kept in zip(items, keep) if kept]


def run_order(items: list) -> list:
    """Items in the order xdist hands them out: the modules with a ``slow`` test first (each module kept whole, for
    its module-scoped fixtures, but that ``standalone`` tests alternate with the rest), then the other shared tests,
    then every ``exclusive`` one (each part in its own order). Interleaved, a worker about to time waited, idle, for
    the test the other worker was running, once per timing test (30 waits, 383 s of a bare CI run); last, the timing
    tests follow each other and only the first waits, for whatever the other worker is running then: a short test,
    once the long ones went first."""
    timed = [i for i in items if i.get_closest_marker("exclusive") is not None]
    shared = [i for i in items if i.get_closest_marker("exclusive") is None]
    slow = {i.path for i in shared if i.get_closest_marker("slow") is not None}
    first = [i for i in shared if i.path in slow]
    # ``standalone`` tests build nothing: they alternate with the others two by two, as xdist first hands tests out
    # (``--maxschedchunk 1``: two consecutive ones to each worker), so one worker computes while the other makes the
    # CI model the rest need (in a bare run, one worker waited 62.8 s for the other's training)
    alone = [i for i in first if i.get_closest_marker("standalone") is not None]
    first = alternate(alone, [i for i in first if i.get_closest_marker("standalone") is None], 2)
    return first + [i for i in shared if i.path not in slow] + timed


def alternate(a: list, b: list, n: int) -> list:
    """``n`` of ``a``, ``n`` of ``b``, ``n`` of ``a``, ... until one runs out, then the rest of the other."""
    out = []
    for k in range(0, max(len(a), len(b)), n):
        out += a[k:k + n] + b[k:k + n]
    return out


def variant_of(item):
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("variant") if callspec is not None else None


def variant_dict(variant) -> dict:
    """The receipt's variant block of a test's ``variant`` parameter (none for a run-level test)."""
    return variant.as_dict() if isinstance(variant, Variant) else {"model": None, "dtype": None}


def announce(session: GatehouseSession, item) -> None:
    """Tell the controller what a gate test is before any of it runs: a passed setup report (silent in every
    reporter) that xdist forwards, carrying the skeleton of its error receipt should this worker die."""
    spec, variant = gate_of(item), variant_of(item)
    if spec is None:
        return
    from .receipt import now_iso

    note = pytest.TestReport(nodeid=item.nodeid, location=item.location, keywords={}, outcome="passed",
                             longrepr=None, when="setup")
    setattr(note, remote.PENDING, remote.skeleton(item.nodeid, spec.name, variant_dict(variant),
                                                  session.campaign.policy[spec.name].as_dict(), spec.level,
                                                  fingerprint.machine(), session.worker, now_iso()))
    item.ihook.pytest_runtest_logreport(report=note)
