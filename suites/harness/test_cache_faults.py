"""The cache gate catches tracing bugs: exports with a broken padding mask or one-token path must fail it."""

import pytest

from harness.evidence import cache as evidence
from harness.gates import cache as rule
from harness.session import Variant


@pytest.mark.ci
@pytest.mark.parametrize("fault, broken_check", [
    ("ignore_attention_mask", "padded_vs_unpadded"),
    ("restart_positions", "incremental_vs_full"),
])
def test_a_tracing_bug_fails_the_cache_gate(fault, broken_check, models, campaign):
    spec = next(m for m in campaign.models if m.tier == "ci")
    variant = Variant(spec, "fp32")
    policy = campaign.policy["cache"]
    ids = models.heldout_ids(spec)
    prompts = evidence.prompts_from(ids, policy["prompt_lengths"])
    pad = evidence.prompts_from(ids[1000:], policy["pad_lengths"])
    found = evidence.collect(models.decoder(variant, fault=fault), prompts, policy["steps"], tuple(pad),
                             models.torch_logits(spec), torch_gated=True)
    verdict = rule.decide(found, campaign.tolerance("fp32"))
    assert not verdict.passed
    assert any(r.startswith(broken_check) for r in verdict.reasons), verdict.reasons
    # the healthy export of the same model passes, so the failure is the fault's
    healthy = evidence.collect(models.decoder(variant), prompts, policy["steps"], tuple(pad),
                               models.torch_logits(spec), torch_gated=True)
    assert rule.decide(healthy, campaign.tolerance("fp32")).passed
