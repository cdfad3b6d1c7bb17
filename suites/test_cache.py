"""Gate 1, cache allclose: incremental decoding with past key/values against full recompute and PyTorch.

Parametrized over every variant and ORT-GenAI's int4 build (held to q4's tolerance), from the registry.
"""

import json
from pathlib import Path

import pytest

from harness import ortsession, runtime, stats
from harness.evidence import cache as evidence
from harness.export import dequant_twin
from harness.gates.cache import ROUNDING_ALLOWANCE
from harness.hashing import sha256_bytes, sha256_json


def cached_evidence(models, variant, policy):
    """(evidence, hit): :func:`evidence.gather` on ``variant``, a cached evaluation (``models.evaluation``) keyed by the
    graph's content (any source), the held-out ids, the policy's steps and lengths, the dtype whose reference rule
    applies, the PyTorch reference's weights by content and torch's version, ONNX Runtime's version and the threads,
    and the sources that compute it: a warm campaign re-decides on the recorded comparisons instead of running them
    again (11-20 s per SmolLM2 graph)."""
    from importlib.metadata import version

    spec = variant.model
    ids = models.heldout_ids(spec)
    reference = ({"hf_files_sha256": sha256_json(models.hf(spec).manifest["files"]), "torch": version("torch")}
                 if spec.has_weights else None)

    def build(out, progress):
        (out / "cache_evidence.json").write_text(json.dumps(evidence.gather(models, variant, policy)))
        return {}

    art = models.evaluation("cache_evidence", [variant],
                            {"heldout_ids_sha256": sha256_bytes(json.dumps(ids).encode()), "steps": policy.steps,
                             "prompt_lengths": list(policy.prompt_lengths), "pad_lengths": list(policy.pad_lengths),
                             "dtype": variant.dtype, "policy_dtype": variant.policy_dtype, "torch_reference": reference},
                            [Path(evidence.__file__), Path(runtime.__file__), Path(stats.__file__),
                             Path(dequant_twin.__file__), Path(ortsession.__file__)], build, f"cache {variant.id}: comparisons")
    return json.loads((art.path / "cache_evidence.json").read_text()), art.hit


@pytest.mark.gate("cache")
def test_cache_allclose(variant, models, campaign, policy, gate, receipt):
    receipt.set(parameters={"threads": campaign.threads, "policy_dtype": variant.policy_dtype},
                policy={"rule": "max|a-b| <= atol + rtol*max|ref|; greedy agreement (a flip between logits closer "
                                "than the bound is a tie); graphs that quantize activations at run time: gated on their "
                                f"full-precision twin (activation quantization removed), else allowed "
                                f"{ROUNDING_ALLOWANCE:g}x the rounding measured between two row sets"})
    models.pin_graph(receipt, variant)
    receipt.record_session(models.session_settings(variant))
    found, hit = cached_evidence(models, variant, policy)
    receipt.note("evaluation_cached", hit)
    receipt.set(parameters={"fp32_compute_twin": found["fp32_compute_twin"]})
    receipt.note("cases", found["cases"])
    receipt.note("activation_quantization", found["activation_quantization"])
    verdict = receipt.decide(gate.decide(gate.evidence.pick(found), policy))
    assert verdict.passed, verdict.render()
