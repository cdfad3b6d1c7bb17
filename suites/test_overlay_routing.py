"""Skill overlays (issue 17): can a router tell when to apply the skill? Selection subspaces (skill, general)
fitted from pinned prompts at a backbone layer, judged on held-out prompts (harness/gates/overlay_routing.py).

Parametrized model x dtype x overlay as the other overlay gates, though routing reads the backbone's PyTorch
weights, not the dtype's graph: the evidence is computed once per model and policy in this process
(``models.memo``, :func:`harness.evidence.overlay_routing.for_model`) and each receipt says whether it reused it."""

from __future__ import annotations

import json

import pytest

from harness.evidence import overlay_routing


@pytest.mark.gate("overlay_routing")
def test_overlay_routing(variant, donor, models, gatehouse, gate, policy, receipt):
    spec = variant.model
    hf = models.hf(spec)
    for rel in sorted(r for r in hf.manifest["files"] if r.endswith(".safetensors")):
        i = hf.identity(rel)
        receipt.pin_identity("weights", i["path"], i["sha256"], i["bytes"])
    evidence, reused = overlay_routing.for_model(models, spec, gatehouse.campaign, policy)
    receipt.set(parameters={"donor": donor.id, "layer": evidence["layer"], "num_layers": evidence["num_layers"],
                            "hidden_size": evidence["hidden_size"], "prompt_tokens": evidence["prompt_tokens"],
                            "rank": evidence["rank_requested"], "subspaces": evidence["subspaces"],
                            "features": "backbone hidden state (PyTorch, model weights), mean over tokens"})
    receipt.note("prompts_sha256", evidence["prompts"])   # the pinned prompts: fit and held-out, per side
    receipt.note("texts", evidence["texts"])
    receipt.note("evidence_reused", reused)
    for name, s in evidence["seconds"].items():
        receipt.measure(f"{name}_seconds", s, "s")
    (receipt.evidence_dir / "routes.json").write_text(json.dumps(
        {side: [{"sha256": h, "route": r, "errors": e} for h, r, e in
                zip(evidence["prompts"]["judge"][side], evidence["routes"][side], evidence["errors"][side])]
         for side in evidence["routes"]}, indent=1, sort_keys=True))
    verdict = receipt.decide(gate.decide(gate.evidence.pick(evidence), policy))
    assert verdict.passed, verdict.render()
