"""A skill overlay's cost (issue 17): decode speed with the overlay applied by onnxruntime in the native probe
against the same graph without it, decided by the OFF/ON/OFF win rule (:mod:`harness.gates.overlay_cost`).

The overlay changes the greedy ids by design: the registration declares the candidate numerics-changing and
attaches the overlay's held-out quality verdict on this graph (the overlay_quality rule), without which the
window is INVALID."""

from __future__ import annotations

import pytest

from harness import gates, winrule
from harness.hashing import sha256_file
from harness.throughput import probe
from harness.winrule import probe_window


@pytest.fixture(scope="session")
def probe_for_overlay():
    return probe.ensure_built()


@pytest.mark.native
@pytest.mark.exclusive
@pytest.mark.gate("overlay_cost")
def test_overlay_cost(variant, donor, models, gatehouse, gate, policy, receipt, probe_for_overlay):
    campaign = gatehouse.campaign
    wr = campaign.policy["winrule"]
    if not wr.declared:
        pytest.skip("the campaign declares no [policy.winrule]: the cost window has no registration")
    graph, identity = models.graph(variant)
    models.pin_graph(receipt, variant)
    path, record = models.overlay(variant, donor, campaign.policy["overlay_delta"].min_delta)
    receipt.pin(path, "overlay")
    quality_policy = campaign.policy["overlay_quality"]
    judge = gates.get("overlay_quality")
    quality = judge.decide(judge.evidence.pick(models.overlay_quality(variant, donor, quality_policy)), quality_policy)
    overlay_sha = sha256_file(path)
    behavior = winrule.Behavior(overlay_sha[:16], quality.passed, "overlay_quality rule on this graph")
    work = models.workload(variant.model)
    schedule = probe_window.schedule_for(wr, work, models.heldout_ids(variant.model))
    # the question is "does the overlay cost more than the guard allows", so the effect is the guard's (5 % in
    # the default campaign), not the 2 % a configuration change must clear to be called a win
    effect = wr.guard_effect or wr.required_effect
    reg = probe_window.registration(wr, f"overlay-cost-{donor.id}", schedule, numerics_changing=True,
                                    required_effect=effect)
    drift = probe_window.drift_policy(wr)
    control = dict(wr.control)
    candidate = {**control, "overlay": str(path)}
    receipt.set(parameters={"donor": donor.id, "registration": reg.as_dict(), "control": control,
                            "candidate": {**control, "overlay_sha256": overlay_sha}, "schedule_sha256": schedule.sha256,
                            "attached_quality": {"passed": quality.passed, "reasons": list(quality.reasons)}},
                policy={"expected": "not LOSS", "drift": drift.as_dict()})
    w = probe_window.run(receipt, label="cost", reg=reg, drift=drift, binary=probe_for_overlay, graph=graph,
                         graph_sha256=identity["sha256"], configs=(control, candidate, control), work=work,
                         schedule=schedule, archive_file=probe_window.archive_path(gatehouse.store.root),
                         run_name=gatehouse.run_path.name, expected="not LOSS", behavior=behavior,
                         budget=probe_window.budget_of(wr, campaign.path))
    receipt.record_winrule(w.block)
    evidence = gate.evidence(verdict=w.decision.verdict, reasons=tuple(w.decision.reasons),
                             figures=probe_window.ratio_figures(w.decision),
                             control_token_ms=probe_window.control_token_ms(w.decision))
    verdict = receipt.decide(gate.decide(evidence, policy))
    assert verdict.passed, verdict.render() + "\n" + winrule.render_markdown(w.decision)
