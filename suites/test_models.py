"""The models' own receipts: the CI model's training curve, and the default model's pinned source."""

import json

import pytest

from harness.campaign import GRAPH_FILES


@pytest.mark.gate("training")
@pytest.mark.ci
def test_ci_model_training(models, campaign, receipt):
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
    assert record["final_train_loss"] < 0.6 * record["initial_train_loss"], record["loss_curve"]
    assert record["heldout_loss_after"] < 0.7 * record["heldout_loss_before"]


@pytest.mark.gate("export")
@pytest.mark.parametrize("tier", [pytest.param("ci", marks=pytest.mark.ci),
                                  pytest.param("benchmark", marks=pytest.mark.benchmark)])
def test_export_layout(tier, models, campaign, receipt):
    """Each export is in the transformers.js layout with export.json listing every file's SHA-256."""
    spec = next((m for m in campaign.models if m.tier == tier), None)
    if spec is None:
        pytest.skip(f"the campaign has no {tier}-tier model")
    art = models.export(spec)
    receipt.set(variant={"model": spec.id, "dtype": None})
    record = json.loads((art.path / "export.json").read_text())
    if spec.source == "gguf":
        receipt.note("gguf_sha256", spec.sha256)
    for rel in GRAPH_FILES.values():
        ident = art.identity(rel)
        receipt.pin_identity(rel, ident["path"], ident["sha256"], ident["bytes"])
        assert record["files"][rel]["sha256"] == ident["sha256"]
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (art.path / name).is_file(), name
    assert record["inputs"][:3] == ["input_ids", "attention_mask", "position_ids"]
    assert record["outputs"][0] == "logits" and all(o.startswith("present.") for o in record["outputs"][1:])
    receipt.note("export", {k: record[k] for k in ("params", "quantization", "seconds", "graph")})
