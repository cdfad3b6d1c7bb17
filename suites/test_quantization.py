"""Gate 2, quantization loss: held-out loss, perplexity and KL divergence of q8/q4 against fp32.

Parametrized over q8, q4 and ORT-GenAI's int4 build (held to q4's limit), from the registry.
"""

import json
from pathlib import Path

import pytest

from harness import corpus, runtime, stats
from harness.domain import Variant
from harness.evidence import quantization as evidence
from harness.gates import quantization


@pytest.mark.gate("quantization")
def test_quantization_loss(variant, models, campaign, policy, gate, receipt):
    reference = Variant(variant.model, "fp32")
    _, fp_identity = models.graph(reference)
    models.pin_graph(receipt, variant)
    receipt.record_session(models.session_settings(variant))
    receipt.pin_identity("reference_graph", fp_identity["path"], fp_identity["sha256"], fp_identity["bytes"])
    receipt.set(parameters={"context": variant.model.eval_context, "max_tokens": policy.max_tokens,
                            "scored": "second half of each window", "policy_dtype": variant.policy_dtype,
                            "corpus": corpus.identity(campaign.corpus_package, campaign.corpus_heldout),
                            "bootstrap": "whole held-out windows resampled with replacement, percentile interval"},
                 seeds={"bootstrap": campaign.seed})
    ids = models.heldout_ids(variant.model)
    label = f"quantization {variant.id}: held-out windows"

    def run():
        return evidence.collect(models.decoder(reference), models.decoder(variant), ids, variant.model.eval_context,
                                policy.max_tokens, what=label)

    def build(out, progress):
        (out / "per_token.json").write_text(json.dumps(run()))
        return {}

    # a cached evaluation, keyed by both graphs' content (any source), the held-out ids, the window and ORT's version
    art = models.evaluation("quantization", [reference, variant],
                            {"heldout_ids_sha256": models.heldout_sha256(variant.model),
                             "context": variant.model.eval_context, "max_tokens": policy.max_tokens},
                            [Path(evidence.__file__), Path(runtime.__file__), Path(stats.__file__)], build, label)
    found = json.loads((art.path / "per_token.json").read_text())
    receipt.note("evaluation_cached", art.hit)
    (receipt.evidence_dir / "per_token.json").write_text(json.dumps(found))
    receipt.note("summary", quantization.summarize(found))
    # the figures carry the block-bootstrap intervals (loss_increase_low/_high, kld_mean_low/_high, ...)
    verdict = receipt.decide(gate.decide(gate.evidence.pick(found, policy_dtype=variant.policy_dtype,
                                                         bootstrap_seed=campaign.seed), policy))
    assert verdict.passed, verdict.render()
