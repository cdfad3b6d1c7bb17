"""A 4-bit skill (issue 34, harness/overlay/qat.py): a donor trained through the backbone's q4 encoding.

The forward pass of a ``quantized = "q4"`` donor sees each trained tensor rounded exactly as the overlay encoder
(harness/overlay/encode.py) will round it for the q4 graph, with a straight-through gradient; the donor saved is
that rounded model, so its q4 overlay is the model the loss saw. A plain donor's is not: re-encoding rounds its
fine-tune away. Checked on the CI model and its real q4 graph, and the campaign key's parse and refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness.domain import Variant
from harness.errors import CampaignError
from harness.fields import Where
from harness.overlay import build as overlay_build
from harness.overlay import donor, donor_training, encode, qat

ROOT = Path(__file__).resolve().parents[2]
LAYER = 1


# -- the lattice the forward pass rounds to is the encoder's ----------------------------------------------
@pytest.mark.parametrize("kind", ["q4_1", "rtn"])
def test_the_straight_through_rounding_is_the_overlay_encoders(kind):
    import torch

    rng = np.random.default_rng(3)
    w = (rng.standard_normal((8, 96)) * 0.05).astype(np.float32)
    w[0, :32] = np.abs(w[0, :32])          # a block without negative weights (rtn: the range still holds 0)
    w[1, 32:64] = 0.01                     # a constant block
    names = ("x.qweight", "x.scales", "x.zero_points") + (("x.offsets",) if kind == "q4_1" else ())
    enc = encode.Encoding("x", kind, 4, qat.BLOCK, names)
    expected = encode.dequantize(enc, encode.encode(enc, w), *w.shape)
    got = qat.rounded(torch.from_numpy(w), kind).numpy()
    assert np.abs(got - expected).max() <= 1e-6 * np.abs(w).max()
    assert np.abs(got - w).max() > 1e-3      # it does round
    assert qat.lattice_of(w) == "rtn" and qat.lattice_of(got if kind == "q4_1" else w) == kind


# -- training on the CI model ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ci(models, campaign):
    return next(m for m in campaign.models if m.source == "train")


@pytest.fixture(scope="module")
def trained(ci, models, campaign, tmp_path_factory):
    """A plain and a q4-trained donor of the CI model's layer-1 FFN, the same seed and steps."""
    cfg = donor.parse_overlay_table(_shipped(), Where("default.toml", "overlay"), ROOT / "campaigns")
    text = donor.read_domain(cfg.domain_train, cfg.domain_package)
    root = tmp_path_factory.mktemp("qat")
    kw = dict(families="ffn", layers=(LAYER,), steps=4, lr=1e-3, seq_len=32, batch_size=4, seed=campaign.seed,
              threads=campaign.threads, log_every=1)
    hf = models.hf(ci).path
    return hf, text, {q: (donor_training.train_donor(hf, root / str(q), text, quantized=q, **kw), root / str(q))
                      for q in (None, "q4")}


def _tensors(path: Path) -> dict:
    from safetensors.numpy import load_file

    return load_file(str(path / "model.safetensors"))


def _first_batch_loss(hf: Path, text: str, replaced: dict, seed: int) -> float:
    """The loss of the donor's first batch (4 windows of 32) on the backbone with ``replaced`` tensors."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ids = donor_training._tokenize(AutoTokenizer.from_pretrained(hf), text)
    batch = torch.from_numpy(donor_training._windows(ids, 32, "domain", seed)[:4])
    model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
    with torch.no_grad():
        for n, v in replaced.items():
            dict(model.named_parameters())[n].copy_(torch.from_numpy(v))
        logits = model(input_ids=batch[:, :-1], use_cache=False).logits
        per_row = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch[:, 1:], reduction="none").mean(1)
    return float(per_row.mean())


def test_a_q4_donor_is_what_its_q4_overlay_ships_and_a_plain_donor_is_not(trained, ci, models):
    import onnx

    _, _, runs = trained
    graph = onnx.load(str(models.graph(Variant(ci, "q4"))[0]), load_external_data=False)
    (plain, plain_dir), (q4, q4_dir) = runs[None], runs["q4"]
    assert plain["quantized"] is None and q4["quantized"]["scheme"] == "q4"
    for linear, parts, _ in overlay_build.LINEARS["ffn"]:
        enc = encode.encoding_of(graph, f"model.layers.{LAYER}.{linear}")
        names = [f"model.layers.{LAYER}.{p}.weight" for p in parts]
        assert {q4["quantized"]["lattice"][n] for n in names} == {enc.kind}   # the q4 graph's own lattice
        for path, fixed in ((q4_dir, True), (plain_dir, False)):
            w = np.concatenate([_tensors(path)[n] for n in names])
            enc3 = encode.Encoding(enc.linear, enc.kind, enc.bits, enc.block, enc.names[:3])  # no bias correction
            error = np.abs(encode.dequantize(enc3, encode.encode(enc3, w), *w.shape) - w).max()
            assert (error <= 1e-6) if fixed else (error > 1e-3), (path.name, linear, error)
    assert all(v > 0 for v in q4["quantized"]["codes_changed"].values())
    saved = json.loads((q4_dir / "donor.json").read_text())
    assert saved["quantized"] == q4["quantized"]


def test_the_q4_donors_loss_sees_the_rounded_weights(trained, ci, models, campaign):
    import torch

    hf, text, runs = trained
    backbone = _tensors(hf)
    names = runs["q4"][0]["tensors"]
    rounded = {n: qat.rounded(torch.from_numpy(backbone[n]), "rtn").numpy() for n in names}
    plain_first, q4_first = runs[None][0]["loss_first_step"], runs["q4"][0]["loss_first_step"]
    assert q4_first == pytest.approx(_first_batch_loss(hf, text, rounded, campaign.seed), abs=1e-5)
    assert plain_first == pytest.approx(_first_batch_loss(hf, text, {}, campaign.seed), abs=1e-5)
    assert abs(q4_first - plain_first) > 1e-4


def test_train_donor_refuses_an_unknown_scheme(trained, tmp_path):
    hf, text, _ = trained
    with pytest.raises(ValueError, match=r"quantized must be one of \('q4',\) or None, got 'q3'"):
        donor_training.train_donor(hf, tmp_path / "x", text, families="ffn", layers=(0,), steps=1, lr=1e-3,
                                   seq_len=32, seed=0, quantized="q3")


# -- the campaign key ----------------------------------------------------------------------------------------
def _shipped() -> dict:
    import tomllib

    return tomllib.loads((ROOT / "campaigns" / "default.toml").read_text())["overlay"]


def _parse(**donor_keys):
    raw = {"domain_train": [{"path": "t.txt", "sha256": "a" * 64}], "domain_heldout": [{"path": "h.txt", "sha256": "b" * 64}],
           "donors": [{"id": "d", "model": "ci-tiny", **donor_keys}]}
    return donor.parse_overlay_table(raw, Where("campaigns/x.toml", "overlay"), Path("/c"), ("ci-tiny",)).donors[0]


def test_quantized_parses_and_defaults_to_a_plain_donor():
    assert _parse(quantized="q4").quantized == "q4"
    assert _parse().quantized is None


@pytest.mark.parametrize("value, problem", [
    ("q8", "expected one of q4, got 'q8'"),
    ("Q4", "expected one of q4, got 'Q4'"),
    ("", "expected a non-empty string, got ''"),
    (4, "expected a non-empty string, got 4"),
    (True, "expected a non-empty string, got True"),
])
def test_quantized_refusals_name_file_field_and_value(value, problem):
    with pytest.raises(CampaignError) as e:
        _parse(quantized=value)
    assert str(e.value) == f"campaigns/x.toml: overlay.donors[0].quantized: {problem}"


def test_quantized_is_refused_beside_a_donor_from_disk():
    with pytest.raises(CampaignError) as e:
        _parse(path="donors/x", sha256="a" * 64, quantized="q4")
    assert str(e.value).startswith("campaigns/x.toml: overlay.donors[0].quantized: donor 'd' is read from path; "
                                   "quantized trains a donor here and cannot be given with path")
