"""Gate 1, cache allclose: incremental decoding with past key/values against full recompute and PyTorch.

Parametrized over every variant and ORT-GenAI's int4 build (held to q4's tolerance), from the registry.
"""

import pytest

from harness.evidence import cache as evidence


@pytest.mark.gate("cache")
def test_cache_allclose(variant, models, campaign, policy, gate, receipt):
    receipt.set(parameters={"threads": campaign.threads, "policy_dtype": variant.policy_dtype},
                policy={"rule": "max|a-b| <= atol + rtol*max|ref|; greedy agreement (a flip between logits closer "
                                "than the bound is a tie); int8-activation graphs: gated on their fp32-compute twin"})
    models.pin_graph(receipt, variant)
    receipt.record_session(models.session_settings(variant))
    found = evidence.gather(models, variant, policy)
    receipt.set(parameters={"fp32_compute_twin": found["fp32_compute_twin"]})
    receipt.note("cases", found["cases"])
    verdict = receipt.decide(gate.decide(gate.evidence.pick(found), policy))
    assert verdict.passed, verdict.render()
