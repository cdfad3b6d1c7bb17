"""Gate 1, cache allclose: incremental decoding with past key/values against full recompute and PyTorch."""

import pytest

from harness.evidence import cache as evidence
from harness.gates import cache as rule


@pytest.mark.gate("cache", dtypes=("fp32", "q8", "q4"))
def test_cache_allclose(variant, models, campaign, receipt):
    policy = campaign.policy["cache"]
    tolerance = campaign.tolerance(variant.dtype)
    graph, identity = models.graph(variant)
    receipt.set(parameters={"steps": policy["steps"], "prompt_lengths": policy["prompt_lengths"],
                            "pad_lengths": policy["pad_lengths"], "threads": campaign.threads},
                policy={"tolerance": tolerance, "rule": "max|a-b| <= atol + rtol*max|ref|; greedy agreement"})
    receipt.pin_identity("graph", identity["path"], identity["sha256"], identity["bytes"])
    ids = models.heldout_ids(variant.model)
    prompts = evidence.prompts_from(ids, policy["prompt_lengths"])
    short, long = evidence.prompts_from(ids[1000:], policy["pad_lengths"])
    found = evidence.collect(models.decoder(variant), prompts, policy["steps"], (short, long),
                             models.torch_logits(variant.model), torch_gated=variant.dtype == "fp32")
    receipt.note("cases", found["cases"])
    verdict = receipt.decide(rule.decide(found, tolerance))
    assert verdict.passed, verdict.render()
