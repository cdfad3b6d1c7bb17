"""The cache gate catches tracing bugs: exports with a broken padding mask or one-token path must fail it."""

import pytest

from harness import gates
from harness.domain import Variant
from harness.evidence import cache as evidence


@pytest.mark.ci
@pytest.mark.parametrize("fault, broken_check", [
    ("ignore_attention_mask", "padded_vs_unpadded"),
    ("restart_positions", "incremental_vs_full"),
])
def test_a_tracing_bug_fails_the_cache_gate(fault, broken_check, models, campaign):
    spec = next(m for m in campaign.models if m.tier == "ci")
    variant = Variant(spec, "fp32")
    gate, policy = gates.get("cache"), campaign.policy["cache"]
    verdict = gate.decide(gate.evidence.pick(evidence.gather(models, variant, policy, fault=fault)), policy)
    assert not verdict.passed
    assert any(r.startswith(broken_check) for r in verdict.reasons), verdict.reasons
    # the healthy export of the same model passes, so the failure is the fault's
    assert gate.decide(gate.evidence.pick(evidence.gather(models, variant, policy)), policy).passed
