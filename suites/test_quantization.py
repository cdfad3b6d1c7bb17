"""Gate 2, quantization loss: held-out loss, perplexity and KL divergence of q8/q4 against fp32."""

import json

import pytest

from harness import corpus
from harness.evidence import quantization as evidence
from harness.gates import quantization as rule
from harness.session import PEER_GENAI, Variant


@pytest.mark.gate("quantization", dtypes=("q8", "q4"))
def test_quantization_loss(variant, models, campaign, receipt):
    _quantization_gate(variant, models, campaign, receipt, campaign.policy["quantization"]["max_relative_increase"][variant.dtype])


@pytest.mark.native
@pytest.mark.gate("quantization", peer=PEER_GENAI)
def test_quantization_loss_peer_ortgenai(variant, models, campaign, receipt):
    """ORT-GenAI's int4 build against our fp32 graph of the same HF directory, at q4's limit."""
    _quantization_gate(variant, models, campaign, receipt, campaign.policy["quantization"]["max_relative_increase"]["q4"])


def _quantization_gate(variant, models, campaign, receipt, limit):
    policy = campaign.policy["quantization"]
    reference = Variant(variant.model, "fp32")
    _, fp_identity = models.graph(reference)
    models.pin_graph(receipt, variant)
    receipt.pin_identity("reference_graph", fp_identity["path"], fp_identity["sha256"], fp_identity["bytes"])
    receipt.set(parameters={"context": variant.model.eval_context, "max_tokens": policy["max_tokens"],
                            "scored": "second half of each window", "corpus": corpus.identity(
                                campaign.corpus_package, campaign.corpus_heldout)},
                policy={"max_relative_increase": limit})
    ids = models.heldout_ids(variant.model)
    found = evidence.collect(models.decoder(reference), models.decoder(variant), ids,
                             variant.model.eval_context, policy["max_tokens"])
    (receipt.evidence_dir / "per_token.json").write_text(json.dumps(found))
    summary = rule.summarize(found)
    receipt.note("summary", summary)
    verdict = receipt.decide(rule.decide(summary, limit))
    assert verdict.passed, verdict.render()
