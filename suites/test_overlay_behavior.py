"""Skill overlays (issue 17): the general scenario suite, overlaid vs backbone, with the behavior gate's rule.

Reference = the variant's graph (the backbone) evaluated as the behavior gate evaluates it; candidate = the same
graph with the overlay applied by onnxruntime. Both evaluations are cached artifacts keyed by their subject
(the overlay's SHA-256 is part of the overlaid one's), the suite and the contract. Parametrized model x dtype x
overlay (the campaign's ``[[overlay.donors]]``); decided with ``[policy.behavior]`` (its margins replaced by
``[policy.overlay_behavior].margins`` where that table names one).
"""

import pytest

from harness.behavior import evaluate


@pytest.mark.gate("overlay_behavior")
def test_overlay_behavior(variant, donor, models, behavior, gatehouse, gate, policy, receipt):
    rule = policy.over(gatehouse.campaign.policy["behavior"])
    models.pin_graph(receipt, variant)
    path, _ = models.overlay(variant, donor, gatehouse.campaign.policy["overlay_delta"].min_delta)
    overlay = receipt.pin(path, "overlay")
    rendered, contract = behavior.suite(variant.model), behavior.contract(variant.model)
    receipt.set(parameters={"donor": donor.id, "suite": rendered.describe(), "contract": contract.as_dict(),
                            "contract_sha256": contract.sha256, "reference": "backbone graph",
                            "overlay_sha256": overlay["sha256"]},
                policy={"behavior": rule.as_dict()})   # the effective behavior policy it decides with
    receipt.pin(rendered.suite.path, "scenario_suite")

    ref_art, ref, ref_rows = behavior.evaluate(variant)
    cand_art, cand, cand_rows = behavior.evaluate(variant, overlay=path)
    behavior.record_pair(receipt, cand_art, ref_art)

    found = evaluate.comparison(ref, ref_rows, cand, cand_rows, rule.agreement_tokens, tuple(contract.modes))
    receipt.note("evaluation_cached", {"candidate": cand_art.hit, "reference": ref_art.hit})
    receipt.measure("evaluation_seconds", cand["timing"]["seconds"], "s")
    receipt.measure("reference_evaluation_seconds", ref["timing"]["seconds"], "s")
    receipt.measure("generated_tokens", cand["timing"]["generated_tokens"], "tokens")
    verdict = receipt.decide(gate.decide(gate.evidence.pick(found, overlay_sha256=overlay["sha256"]), rule))
    assert verdict.passed, verdict.render()
