"""Skill overlays (issue 17): a donor fine-tuned here on pinned domain text, its tensors encoded as the backbone
graph encodes them and applied by onnxruntime at session creation; the backbone graph never changes.

Parametrized model x dtype x overlay (the campaign's ``[[overlay.donors]]``)."""

from __future__ import annotations

import pytest


@pytest.mark.gate("overlay_delta")
def test_overlay_delta(variant, donor, models, gate, policy, receipt):
    models.pin_graph(receipt, variant)
    donor_art = models.donor(variant.model, donor)
    path, record = models.overlay(variant, donor, policy.min_delta)
    receipt.pin(path, "overlay")
    receipt.set(parameters={"donor": donor.id, "families": donor.families, "layers": donor.layers,
                            "min_delta": policy.min_delta, "donor_key": donor_art.key})
    receipt.note("donor", _donor_record(donor_art))
    receipt.note("overlay", record)
    verdict = receipt.decide(gate.decide(gate.evidence.pick(record), policy))
    assert verdict.passed, verdict.render()


@pytest.mark.gate("overlay_quality")
def test_overlay_quality(variant, donor, models, gatehouse, gate, policy, receipt):
    models.pin_graph(receipt, variant)
    path, record = models.overlay(variant, donor, gatehouse.campaign.policy["overlay_delta"].min_delta)
    receipt.pin(path, "overlay")
    evidence = models.overlay_quality(variant, donor, policy)
    receipt.set(parameters={"donor": donor.id, "context": policy.context, "max_tokens": policy.max_tokens,
                            "overlay_tensors": evidence["overlay_tensors"]})
    receipt.note("storage", {"backbone_bytes": record["backbone_bytes"], "overlay_bytes": record["overlay_bytes"]})
    verdict = receipt.decide(gate.decide(gate.evidence.pick(evidence), policy))
    assert verdict.passed, verdict.render()


def _donor_record(art) -> dict:
    import json

    rec = json.loads(art.file("donor.json").read_text())
    keep = ("donor", "model", "objective", "steps", "seed", "lr", "loss_first", "loss_last", "eval", "tensors",
            "train_seconds", "wall_seconds", "corpus_sha256", "corpus_tokens", "source", "file", "sha256")
    return {k: rec[k] for k in keep if k in rec}
