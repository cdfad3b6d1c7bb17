"""The models' own receipts: the CI model's training curve, and each tier's export layout."""

import json

import pytest

from harness.domain import GRAPH_FILES
from harness.gates.export import REQUIRED_FILES, ExportEvidence


@pytest.mark.gate("training")
@pytest.mark.ci
def test_ci_model_training(models, campaign, gate, policy, receipt):
    """The CI model is trained, not random: its loss must fall well below the uniform loss."""
    spec = next((m for m in campaign.models if m.source == "train"), None)
    if spec is None:
        pytest.skip("the campaign has no trained model")
    hf = models.hf(spec)
    record = json.loads((hf.path / "training.json").read_text())
    receipt.set(variant={"model": spec.id, "dtype": None}, parameters=record["params"], seeds={"train": record["seed"]})
    receipt.pin(hf.path / "model.safetensors", "weights")
    for name in ("initial_train_loss", "final_train_loss", "heldout_loss_before", "heldout_loss_after", "uniform_loss"):
        receipt.measure(name, record[name], "nats_per_token", record["heldout_eval_tokens"] if "heldout" in name else None)
    receipt.measure("train_seconds", record["train_seconds"], "s")
    receipt.measure("parameters", record["parameters"], "count")
    receipt.note("loss_curve", record["loss_curve"])
    verdict = receipt.decide(gate.decide(gate.evidence.pick(record), policy))
    assert verdict.passed, verdict.render()


@pytest.mark.gate("export")
@pytest.mark.parametrize("tier", [pytest.param("ci", marks=pytest.mark.ci),
                                  pytest.param("benchmark", marks=pytest.mark.benchmark)])
def test_export_layout(tier, models, campaign, gate, policy, receipt):
    """Each export is in the transformers.js layout with export.json listing every file's SHA-256."""
    spec = next((m for m in campaign.models if m.tier == tier), None)
    if spec is None:
        pytest.skip(f"the campaign has no {tier}-tier model")
    if spec.source == "onnx":
        pytest.skip(f"model {spec.id} is an existing export ({spec.path}): Gatehouse built nothing to check")
    art = models.export(spec)
    receipt.set(variant={"model": spec.id, "dtype": None})
    record = json.loads((art.path / "export.json").read_text())
    if spec.source == "gguf":
        receipt.note("gguf_sha256", spec.sha256)
    files = {}
    for rel in GRAPH_FILES.values():
        ident = art.identity(rel)
        receipt.pin_identity(rel, ident["path"], ident["sha256"], ident["bytes"])
        files[rel] = ident["sha256"]
    files.update({name: "present" for name in REQUIRED_FILES if (art.path / name).is_file()})
    receipt.note("export", {k: record[k] for k in ("params", "quantization", "seconds", "graph")})
    verdict = receipt.decide(gate.decide(ExportEvidence(record, files), policy))
    assert verdict.passed, verdict.render()
