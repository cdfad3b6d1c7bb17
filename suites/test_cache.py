"""Gate 1, cache allclose: incremental decoding with past key/values against full recompute and PyTorch."""

import pytest

from harness.evidence import cache as evidence
from harness.gates import cache as rule
from harness.session import PEER_GENAI


@pytest.mark.gate("cache", dtypes=("fp32", "q8", "q4"))
def test_cache_allclose(variant, models, campaign, receipt):
    _cache_gate(variant, models, campaign, receipt, campaign.tolerance(variant.dtype))


@pytest.mark.native
@pytest.mark.gate("cache", peer=PEER_GENAI)
def test_cache_allclose_peer_ortgenai(variant, models, campaign, receipt):
    """ORT-GenAI's int4 build of the same model through the same gate, at q4's tolerance."""
    _cache_gate(variant, models, campaign, receipt, campaign.tolerance("q4"))


def _cache_gate(variant, models, campaign, receipt, tolerance):
    policy = campaign.policy["cache"]
    receipt.set(parameters={"steps": policy["steps"], "prompt_lengths": policy["prompt_lengths"],
                            "pad_lengths": policy["pad_lengths"], "threads": campaign.threads},
                policy={"tolerance": tolerance,
                        "rule": "max|a-b| <= atol + rtol*max|ref|; greedy agreement (a flip between logits closer "
                                "than the bound is a tie); int8-activation graphs: gated on their fp32-compute twin"})
    models.pin_graph(receipt, variant)
    ids = models.heldout_ids(variant.model)
    prompts = evidence.prompts_from(ids, policy["prompt_lengths"])
    short, long = evidence.prompts_from(ids[1000:], policy["pad_lengths"])
    twin = models.fp32_compute_twin(variant)
    receipt.set(parameters={"fp32_compute_twin": twin is not None})
    torch_logits = models.torch_logits(variant.model)
    if twin is None:
        found = evidence.collect(models.decoder(variant), prompts, policy["steps"], (short, long), torch_logits,
                                 torch_gated=variant.dtype == "fp32")
    else:
        # the cache logic, gated on the twin (same nodes, cache and weights; MatMulNBits in fp32) ...
        found = evidence.collect(twin, prompts, policy["steps"], (short, long), None, torch_gated=False,
                                 graph="fp32-compute twin")
        # ... and the int8-activation graph's own comparisons and rounding, reported
        own = evidence.collect(models.decoder(variant), prompts, policy["steps"], (short, long), torch_logits,
                               torch_gated=False, twin=twin, gated=False, graph="int8 activations")
        found["cases"] += own["cases"]
    receipt.note("cases", found["cases"])
    verdict = receipt.decide(rule.decide(found, tolerance))
    assert verdict.passed, verdict.render()
