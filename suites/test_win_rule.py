"""Gate 6, the OFF/ON/OFF win rule on the native lane: a real A/B/A window and an A/A window.

Each window launches three fresh probe processes (control, candidate, control) on the same graph and
runs them in A/B/A order through :func:`harness.winrule.lane.run_window` (via
:mod:`harness.winrule.probe_window`): the registered cells (short and long prompt decode), each wave fed
its own frozen prompt from the registered schedule, the machine sampled during every start, the greedy
ids of every wave kept; the rule decides after each block and a TIE adds ``step`` repeats to the same
three processes up to ``max_repeats``.  The real candidate is a configuration change whose direction is
known in advance (the campaign says which and why); the A/A window's candidate is the control itself and
must never be reported as a WIN.  Control starts are appended to the archive, whose day-to-day spread for
the same definition is reported beside the required effect.
"""

from __future__ import annotations

import pytest

from harness import winrule
from harness.throughput import probe
from harness.winrule import probe_window

WINDOWS = ("real", "aa")


@pytest.fixture(scope="session")
def probe_for_winrule():
    return probe.ensure_built()


@pytest.mark.native
@pytest.mark.exclusive
@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.gate("winrule")
def test_win_rule(variant, window, models, gatehouse, gate, policy, receipt, probe_for_winrule):
    if not policy.declared:
        pytest.skip("the campaign declares no [policy.winrule]")
    if window == "real" and variant.model.id not in policy.expected:
        pytest.skip(f"[policy.winrule].expected declares no verdict for {variant.model.id}")
    work = models.workload(variant.model)
    schedule = probe_window.schedule_for(policy, work, models.heldout_ids(variant.model))
    registration = probe_window.registration(policy, f"{policy.name}-{window}", schedule)
    graph, identity = models.graph(variant)
    models.pin_graph(receipt, variant)
    control = dict(policy.control)
    candidate = dict(policy.candidate) if window == "real" else dict(control)
    expected = policy.expected[variant.model.id] if window == "real" else "not WIN"
    drift = probe_window.drift_policy(policy)
    receipt.set(parameters={"window": window, "registration": registration.as_dict(), "control": control,
                            "candidate": candidate, "workload_sha256": work.sha256,
                            "schedule_sha256": schedule.sha256,
                            "why": policy.explain if window == "real" else "A/A: the candidate is the control"},
                policy={"expected": expected, "drift": drift.as_dict()})
    w = probe_window.run(receipt, label=window, reg=registration, drift=drift, binary=probe_for_winrule, graph=graph,
                         graph_sha256=identity["sha256"], configs=(control, candidate, control), work=work,
                         schedule=schedule, archive_file=probe_window.archive_path(gatehouse.store.root),
                         run_name=gatehouse.run_path.name, expected=expected,
                         budget=probe_window.budget_of(policy, gatehouse.campaign.path))
    receipt.record_winrule(w.block)
    evidence = gate.evidence(window=window, verdict=w.decision.verdict, expected=expected,
                             reasons=tuple(w.decision.reasons), figures=probe_window.ratio_figures(w.decision),
                             control_token_ms=probe_window.control_token_ms(w.decision))
    verdict = receipt.decide(gate.decide(evidence, policy))
    assert verdict.passed, verdict.render() + "\n" + winrule.render_markdown(w.decision)
