"""Gate 1, cache allclose: incremental decoding with past key/values against full recompute and PyTorch.

Parametrized over every variant and ORT-GenAI's int4 build (held to q4's tolerance), from the registry.
"""

import pytest

from harness.gates.cache import ROUNDING_ALLOWANCE


@pytest.mark.gate("cache")
def test_cache_allclose(variant, models, campaign, policy, gate, receipt):
    receipt.set(parameters={"threads": campaign.threads, "policy_dtype": variant.policy_dtype},
                policy={"rule": "max|a-b| <= atol + rtol*max|ref|; greedy agreement (a flip between logits closer "
                                "than the bound is a tie); graphs that quantize activations at run time: gated on their "
                                f"full-precision twin (activation quantization removed), else allowed "
                                f"{ROUNDING_ALLOWANCE:g}x the rounding measured between two row sets"})
    models.pin_graph(receipt, variant)
    receipt.record_session(models.session_settings(variant))
    found, hit = models.cache_evidence(variant, policy)
    receipt.note("evaluation_cached", hit)
    receipt.set(parameters={"fp32_compute_twin": found["fp32_compute_twin"]})
    receipt.note("cases", found["cases"])
    receipt.note("activation_quantization", found["activation_quantization"])
    verdict = receipt.decide(gate.decide(gate.evidence.pick(found), policy))
    assert verdict.passed, verdict.render()
