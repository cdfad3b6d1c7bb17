"""Gate 3, behavior parity: a candidate's scenario cases against its reference's, counted case by case.

The reference of a quantized graph (or ORT-GenAI's int4 build) is the fp32 graph of the same model;
the reference of the fp32 graph is the PyTorch model it was exported from.  Both run the same rendered
suite under the same sampling contract (greedy and seeded-sampled, one CPU sampler), so they differ
only by their logits.  The default rule (``rule = "paired"``) counts each metric's lost and gained cases and
fails only a drop the paired test calls real at the policy's confidence (Holm across the metrics); a sampled
metric that fails on the campaign's seed is confirmed on ``confirm_seeds`` more seeds (both sides evaluated
again, sampled mode only) and fails only when the pooled flips fail too.  The receipt's ``behavior.paired``
block holds every metric's counts, interval and decision.

With a published reference (``[policy.behavior.published.<model>]``) the candidate is also compared,
as paired inference at zero margin, with a report pinned by SHA-256 that must have measured the pinned
published graph; the ``published-paired-inference`` record goes into the receipt and its evidence.
"""

import json

import pytest

from harness.behavior import evaluate
from harness.domain import Variant
from harness.behavior.rates import published_record
from harness.gates.behavior import needs_confirmation, paired_record
from harness.models import params


@pytest.mark.slow   # cold: a PyTorch reference and an evaluation per graph
@pytest.mark.gate("behavior")
def test_behavior_parity(variant, models, behavior, policy, gate, receipt):
    if variant.dtype == "fp32" and not variant.model.has_weights:
        pytest.skip(f"{variant.model.path}: fp32's reference is the PyTorch model, and this onnx source has no "
                    f"Hugging Face weights (name them with hf = \"...\" in the campaign)")
    rendered, contract = behavior.suite(variant.model), behavior.contract(variant.model)
    receipt.set(parameters={"suite": rendered.describe(), "contract": contract.as_dict(),
                            "contract_sha256": contract.sha256,
                            "reference": "pytorch" if variant.dtype == "fp32" else "fp32 graph"})
    receipt.pin(rendered.suite.path, "scenario_suite")
    models.pin_graph(receipt, variant)
    receipt.record_session(models.session_settings(variant))

    cand_art, cand, cand_rows = behavior.evaluate(variant)
    ref_variant = None
    if variant.dtype == "fp32":
        ref_art, ref, ref_rows = behavior.evaluate(None, variant.model)
    else:
        ref_variant = Variant(variant.model, "fp32")
        _, ref_identity = models.graph(ref_variant)
        receipt.pin_identity("reference_graph", ref_identity["path"], ref_identity["sha256"], ref_identity["bytes"])
        ref_art, ref, ref_rows = behavior.evaluate(ref_variant)
    behavior.record_pair(receipt, cand_art, ref_art)

    found = gate.evidence.pick(evaluate.comparison(ref, ref_rows, cand, cand_rows, policy.agreement_tokens,
                                                   tuple(contract.modes)))
    if needs_confirmation(found, policy):
        print(f"\n{variant.id}: a sampled metric failed on the campaign's seed; confirming on "
              f"{policy.confirm_seeds} more seeds")
        found = found.with_(pooled_flips=behavior.confirmation(
            variant, None if variant.dtype == "fp32" else ref_variant, found.flips, policy.confirm_seeds,
            policy.agreement_tokens))
    published = policy.published.get(variant.model.id)
    if published:
        found = found.with_(published=behavior.published(published, cand, cand_rows, policy.agreement_tokens))
        receipt.pin(behavior.published_path(published), "published_behavior_report")
        receipt.set(parameters={"published_graph_sha256": published.graph_sha256})
    cand = found.candidate
    receipt.record_behavior({"quality_index": cand["quality_index"],
                             "reference_quality_index": found.reference["quality_index"],
                             "categories": cand["categories"], "rate_counts": cand["rate_counts"],
                             "reference_rate_counts": found.reference["rate_counts"], "timing": cand["timing"],
                             "reference_timing": found.reference["timing"], "evaluation_cached": cand_art.hit,
                             "paired": paired_record(found, policy) if policy.rule == "paired" else None})
    if variant.model.has_weights:
        receipt.measure("parameters", params.count(models.hf(variant.model).path), "parameters")
    receipt.measure("quality_index", cand["quality_index"], "points/100")
    receipt.measure("evaluation_seconds", cand["timing"]["seconds"], "s")
    receipt.measure("generated_tokens", cand["timing"]["generated_tokens"], "tokens")
    verdict = receipt.decide(gate.decide(found, policy))
    if published:
        record = published_record(verdict, published.graph_sha256)
        receipt.note("published_paired_inference", record)
        (receipt.evidence_dir / "published-paired-inference.json").write_text(json.dumps(record, indent=1))
    assert verdict.passed, verdict.render()
