"""Gate 3, behavior parity: scripted scenario rates of a candidate against its reference, with a margin.

The reference of a quantized graph is the fp32 graph of the same model; the reference of the fp32
graph is the PyTorch model it was exported from.  Both run the same rendered suite under the same
sampling contract (greedy and seeded-sampled, one CPU sampler), so they differ only by their logits.
"""

import shutil
from pathlib import Path

import pytest

from harness.behavior import evaluate
from harness.errors import EvidenceError
from harness.hashing import sha256_file
from harness.models import params
from harness.gates import behavior as rule
from harness.session import PEER_GENAI, Variant


def _metrics(policy):
    return {"minimum": list(policy.get("minimum", [])), "maximum": list(policy.get("maximum", []))}


@pytest.mark.gate("behavior", dtypes=("fp32", "q8", "q4"))
def test_behavior_parity(variant, models, behavior, campaign, receipt):
    _behavior_gate(variant, models, behavior, campaign, receipt)


@pytest.mark.native
@pytest.mark.gate("behavior", peer=PEER_GENAI)
def test_behavior_parity_peer_ortgenai(variant, models, behavior, campaign, receipt):
    """ORT-GenAI's int4 build against our fp32 graph, like q4."""
    _behavior_gate(variant, models, behavior, campaign, receipt)


def _behavior_gate(variant, models, behavior, campaign, receipt):
    policy = campaign.policy["behavior"]
    rendered, contract = behavior.suite(variant.model), behavior.contract(variant.model)
    receipt.set(parameters={"suite": rendered.describe(), "contract": contract.as_dict(),
                            "contract_sha256": contract.sha256,
                            "agreement_tokens": policy["agreement_tokens"],
                            "reference": "pytorch" if variant.dtype == "fp32" else "fp32 graph"},
                policy={"margin": policy["margin"], "margins": policy.get("margins", {}), **_metrics(policy)})
    receipt.pin(rendered.suite.path, "scenario_suite")
    models.pin_graph(receipt, variant)

    cand_art, cand, cand_rows = behavior.evaluate(variant)
    if variant.dtype == "fp32":
        ref_art, ref, ref_rows = behavior.evaluate(None, variant.model)
    else:
        ref_variant = Variant(variant.model, "fp32")
        _, ref_identity = models.graph(ref_variant)
        receipt.pin_identity("reference_graph", ref_identity["path"], ref_identity["sha256"], ref_identity["bytes"])
        ref_art, ref, ref_rows = behavior.evaluate(ref_variant)
    receipt.pin(cand_art.path / "report.json", "behavior_report")
    receipt.pin(cand_art.path / "transcripts.jsonl", "transcripts")
    receipt.pin(ref_art.path / "report.json", "reference_behavior_report")
    # transcripts for review, beside the receipt
    for name, art in (("candidate", cand_art), ("reference", ref_art)):
        for f in ("report.json", "transcripts.jsonl"):
            shutil.copyfile(art.path / f, receipt.evidence_dir / f"{name}-{f}")

    # agreement with the reference's ids needs both transcripts: add it to both reports' rates
    modes = tuple(contract.modes)
    agree = evaluate.agreement(ref_rows, cand_rows, policy["agreement_tokens"], modes)
    self_agree = evaluate.agreement(ref_rows, ref_rows, policy["agreement_tokens"], modes)
    cand = rule.with_agreement(cand, agree)
    ref = rule.with_agreement(ref, self_agree)

    receipt.note("behavior", {"quality_index": cand["quality_index"], "reference_quality_index": ref["quality_index"],
                              "categories": cand["categories"], "rate_counts": cand["rate_counts"],
                              "reference_rate_counts": ref["rate_counts"], "timing": cand["timing"],
                              "reference_timing": ref["timing"], "evaluation_cached": cand_art.hit})
    receipt.measure("parameters", params.count(models.hf(variant.model).path), "parameters")
    receipt.measure("quality_index", cand["quality_index"], "points/100")
    receipt.measure("evaluation_seconds", cand["timing"]["seconds"], "s")
    if "greedy" in cand["timing"].get("modes", {}):
        receipt.measure("greedy_evaluation_seconds", cand["timing"]["modes"]["greedy"]["seconds"], "s")
    receipt.measure("generated_tokens", cand["timing"]["generated_tokens"], "tokens")
    verdict = rule.decide(ref, cand, policy)
    published = policy.get("published", {}).get(variant.model.id)
    if published:
        verdict = rule.combine(verdict, _published(published, cand, cand_rows, policy, receipt))
    verdict = receipt.decide(verdict)
    assert verdict.passed, verdict.render()


def _published(entry, cand, cand_rows, policy, receipt):
    """Zero-margin comparison against a published reference report pinned by SHA-256 in the campaign."""
    path = Path(entry["report"])
    if not path.is_file() or sha256_file(path) != entry["sha256"]:
        raise EvidenceError(f"{path}: the published behavior report is missing or differs from its pinned SHA-256 "
                            f"{entry['sha256'][:12]}")
    receipt.pin(path, "published_behavior_report")
    pub, pub_rows = evaluate.load(path.parent)
    modes, n = tuple(pub["contract"]["modes"]), policy["agreement_tokens"]
    pub = rule.with_agreement(pub, evaluate.agreement(pub_rows, pub_rows, n, modes))
    cand = rule.with_agreement(cand, evaluate.agreement(pub_rows, cand_rows, n, modes))
    return rule.decide(pub, cand, {**_metrics(policy), "margin": 0}, published=True)
