"""The overlay gates on the CI model through the same fixtures and evidence as suites/test_overlay.py: a donor
trained to damage general text fails the held-out quality gate with its reason; the shipped donor's overlay
passes both gates at every dtype (that is the gate test itself, in the CI tier)."""

from __future__ import annotations

import dataclasses

import pytest

from harness import gates
from harness.domain import Variant
from harness.overlay import donor as donors

DAMAGE = donors.DonorSpec(id="damage", model="ci-tiny", objective="damage", families="ffn", layers="all", steps=100,
                          lr=3e-3, seq_len=128, batch_size=8, replay_rows=0)


@pytest.fixture(scope="module")
def ci(campaign):
    return next(m for m in campaign.models if m.source == "train")


def _quality(models, campaign, variant, donor_spec):
    _, record = models.overlay(variant, donor_spec, campaign.policy["overlay_delta"].min_delta)
    policy = campaign.policy["overlay_quality"]
    return gates.get("overlay_quality").decide(
        gates.get("overlay_quality").evidence.pick(models.overlay_quality(variant, donor_spec, policy)), policy), record


@pytest.mark.parametrize("dtype", ["q4", "fp32"])
def test_a_donor_trained_to_damage_general_text_fails_the_quality_gate(models, campaign, ci, dtype):
    verdict, record = _quality(models, campaign, Variant(ci, dtype), DAMAGE)
    assert not verdict.passed
    assert any(r.startswith("general held-out perplexity rose") for r in verdict.reasons), verdict.render()
    print(verdict.render())
    # the delta gate alone passes it: a large change is exactly what a delta rule keeps
    assert gates.get("overlay_delta").decide(gates.get("overlay_delta").evidence.pick(record),
                                             campaign.policy["overlay_delta"]).passed


def test_the_shipped_donor_passes_quality_and_names_its_figures(models, campaign, ci):
    spec = campaign.overlay.donors_of(ci.id)[0]
    verdict, record = _quality(models, campaign, Variant(ci, "q4"), spec)
    assert verdict.passed, verdict.render()
    assert verdict.figures["domain_ppl_change"].value < -campaign.policy["overlay_quality"].min_domain_gain
    assert record["overlay_bytes"] < record["backbone_bytes"]


# -- overlay_cost: a LOSS gates only on a model whose decode step is long enough to time across processes ---
def test_overlay_cost_gates_a_loss_only_above_min_token_ms():
    from harness.gates import overlay_cost

    policy = overlay_cost.CostPolicy(min_token_ms=1.0)
    slow_model = overlay_cost.WindowEvidence(verdict="LOSS", control_token_ms=14.0)
    tiny_model = dataclasses.replace(slow_model, control_token_ms=0.06)
    assert not overlay_cost.decide(slow_model, policy).passed
    v = overlay_cost.decide(tiny_model, policy)
    assert v.passed and v.figures["verdict_gated"].value is False and v.figures["control_token_ms"].value == 0.06
    invalid = dataclasses.replace(tiny_model, verdict="INVALID", reasons=("no attached quality verdict",))
    assert not overlay_cost.decide(invalid, policy).passed                 # INVALID fails whatever the model
    assert overlay_cost.decide(dataclasses.replace(slow_model, verdict="TIE"), policy).passed
    assert not overlay_cost.decide(dataclasses.replace(slow_model, control_token_ms=None), policy).figures["verdict_gated"].value


def test_control_token_ms_reads_the_fastest_cell():
    from types import SimpleNamespace

    from harness.winrule import probe_window

    d = SimpleNamespace(series=(SimpleNamespace(metric="decode_tok_s", control=(100.0, 120.0, 110.0)),
                                SimpleNamespace(metric="decode_tok_s", control=(50.0, 50.0)),
                                SimpleNamespace(metric="prefill_ms", control=(1.0,))))
    assert probe_window.control_token_ms(d) == 1000.0 / 110.0
    assert probe_window.control_token_ms(SimpleNamespace(series=())) is None
