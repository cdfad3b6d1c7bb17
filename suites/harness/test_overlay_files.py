"""Skill overlays on real graphs: the donor's tensors in the backbone's own encoding, applied by ONNX Runtime at
session creation on an unchanged backbone, and every refusal of a bad overlay with the file and the tensor.

The backbone and the donor here are a small Llama built in the test (the exporter is the real fused exporter;
the donor changes only the FFN weights of two layers), so the overlay's tensors must equal, byte for byte,
the initializers of a graph exported from the donor itself, and at fp32 the overlaid logits must equal the
donor graph's exactly."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from harness.errors import ArtifactError
from harness.hashing import sha256_file
from harness.overlay import build as ob
from harness.overlay import encode, fileformat
from harness.runtime import OrtDecoder

LAYERS = 3


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from harness.export import fused

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg).eval()
    state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    rng = np.random.default_rng(1)
    donor = dict(state)
    for i in (0, 2):   # the donor's fine-tune touched the FFN of layers 0 and 2 only
        for p in ("gate_proj", "up_proj", "down_proj"):
            n = f"model.layers.{i}.mlp.{p}.weight"
            donor[n] = state[n] + 0.3 * np.abs(state[n]).mean() * rng.standard_normal(state[n].shape).astype(np.float32)
    root = tmp_path_factory.mktemp("overlay")
    mean = {f"model.layers.{i}.{k}": {"mean": rng.standard_normal(w).astype(np.float64)}
            for i in range(LAYERS) for k, w in (("self_attn.q_proj", 64), ("self_attn.o_proj", 64),
                                                ("mlp.gate_proj", 64), ("mlp.down_proj", 128))}
    mean["lm_head"] = {"mean": rng.standard_normal(64)}
    graphs = {}
    for kind, kw in {"fp32": dict(bits=32, head_bits=32, accuracy_level=0),
                     "q8": dict(bits=8, head_bits=8, accuracy_level=4, calibration=mean),
                     "q4": dict(bits=4, head_bits=8, accuracy_level=4, calibration=mean)}.items():
        fused.export(state, cfg, root / f"backbone_{kind}.onnx", block=32, opset=17, **kw)
        fused.export(donor, cfg, root / f"donor_{kind}.onnx", block=32, opset=17, **kw)
        graphs[kind] = (root / f"backbone_{kind}.onnx", root / f"donor_{kind}.onnx")
    return state, donor, graphs, mean, root


def _inits(path):
    import onnx
    from onnx import numpy_helper

    return {i.name: numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer}


@pytest.mark.parametrize("kind", ["fp32", "q8", "q4"])
def test_the_overlay_holds_the_donor_in_the_backbones_own_encoding(models, kind):
    state, donor, graphs, mean, root = models
    backbone, donor_graph = graphs[kind]
    before = sha256_file(backbone)
    rec = ob.build(backbone, state, donor, "ffn", range(LAYERS), 1e-3, root / f"{kind}.overlay",
                   calibration=lambda: mean)
    assert sha256_file(backbone) == before == rec["backbone_sha256"]          # the backbone's bytes never change
    assert rec["delta"]["dropped"] == sorted(f"model.layers.1.mlp.{p}.weight" for p in ("down_proj", "gate_proj", "up_proj"))
    assert rec["delta"]["min"] == 0.0 and rec["bytes_saved"] > 0
    overlay = fileformat.read(root / f"{kind}.overlay", before)
    expected = _inits(donor_graph)
    for name, arr in overlay.tensors.items():
        assert np.array_equal(arr, expected[name]), name                       # byte for byte the donor's export
    assert {n.rsplit(".", 2)[0] for n in overlay.tensors} == {f"model.layers.{i}.mlp" for i in (0, 2)}
    ids = list(range(3, 40))
    overlaid = OrtDecoder(backbone, overlay=root / f"{kind}.overlay").full(ids)
    plain = OrtDecoder(backbone).full(ids)
    donor_logits = OrtDecoder(donor_graph).full(ids)
    assert np.abs(plain - donor_logits).max() > 0.05                          # the donor computes something else
    if kind == "fp32":
        assert np.array_equal(overlaid, donor_logits)                        # exactly the donor, applied by ORT
    else:   # the donor graph's other linears carry bias corrections of the same means: identical too
        assert np.abs(overlaid - donor_logits).max() < 1e-4


def test_the_encodings_dequantize_to_the_donor_within_their_step():
    rng = np.random.default_rng(2)
    w = rng.standard_normal((8, 64)).astype(np.float32)
    for kind, bits, tol in (("q4_1", 4, 1 / 15), ("q8_0", 8, 1 / 127), ("rtn", 4, 1 / 15)):
        e = encode.Encoding("x", kind, bits, 32, ("x.qweight", "x.scales", "x.zero_points")
                            + (("x.offsets",) if kind == "q4_1" else ()))
        got = encode.dequantize(e, encode.encode(e, w), 8, 64)
        span = np.ptp(w.reshape(8, 2, 32), axis=-1).max() * (2 if kind == "q8_0" else 1)
        assert np.abs(got - w).max() <= span * tol * 0.5001 + 1e-6, kind


def test_the_delta_rule_keeps_what_changed_and_refuses_an_overlay_that_keeps_nothing():
    rule = ob.delta_rule({"a": 0.0, "b": 0.02, "c": 0.2}, 0.01)
    assert rule["kept"] == ["b", "c"] and rule["dropped"] == ["a"] and rule["median"] == 0.02
    with pytest.raises(fileformat.OverlayError, match="no donor tensor changed by min_delta = 0.5 or more"):
        ob.delta_rule({"a": 0.0, "b": 0.02}, 0.5)
    with pytest.raises(fileformat.OverlayError, match="a different architecture"):
        ob.relative_delta(np.zeros((2, 3)), np.zeros((3, 2)))


def test_bad_overlays_are_refused_naming_the_file_and_the_tensor(models, tmp_path):
    state, donor, graphs, mean, root = models
    backbone, _ = graphs["q4"]
    good = root / "q4.overlay"
    ob.build(backbone, state, donor, "ffn", range(LAYERS), 1e-3, good, calibration=lambda: mean)
    data = good.read_bytes()
    other = graphs["q8"][0]
    with pytest.raises(fileformat.OverlayError, match="encoded for another backbone"):
        OrtDecoder(other, overlay=good)
    cut = tmp_path / "cut.overlay"
    cut.write_bytes(data[:-10])
    with pytest.raises(fileformat.OverlayError, match=r"cut\.overlay: tensor '.*': data_offsets .* fall outside"):
        fileformat.read(cut)
    short = tmp_path / "short.overlay"
    short.write_bytes(data[:5])
    with pytest.raises(fileformat.OverlayError, match="truncated overlay"):
        fileformat.read(short)
    junk = tmp_path / "junk.overlay"
    junk.write_bytes(struct.pack("<Q", 4) + b"nope")
    with pytest.raises(fileformat.OverlayError, match="header is not JSON"):
        fileformat.read(junk)
    overlay = fileformat.read(good)
    renamed = {("model.layers.9.mlp.nothing" if i == 0 else n): a for i, (n, a) in enumerate(overlay.tensors.items())}
    fileformat.write(tmp_path / "renamed.overlay", renamed, overlay.metadata)
    with pytest.raises(fileformat.OverlayError, match="'model.layers.9.mlp.nothing' is not an initializer"):
        OrtDecoder(backbone, overlay=tmp_path / "renamed.overlay")
    name = next(n for n in overlay.tensors if n.endswith(".scales"))
    wrong = {**overlay.tensors, name: overlay.tensors[name].astype(np.float16)}
    fileformat.write(tmp_path / "wrong.overlay", wrong, overlay.metadata)
    with pytest.raises(fileformat.OverlayError, match=f"tensor '{name}' is float16.*an encoding the graph cannot take"):
        OrtDecoder(backbone, overlay=tmp_path / "wrong.overlay")
    with pytest.raises(fileformat.OverlayError, match="unknown tensor family 'mlp'"):
        ob.build(backbone, state, donor, "mlp", [0], 1e-3, tmp_path / "x.overlay")
    assert isinstance(fileformat.OverlayError("x"), ArtifactError)


def test_a_q4_1_lattice_backbone_takes_the_donor_on_its_own_lattice(models, tmp_path):
    """A GGUF-derived backbone (SmolLM2's) holds Q4_1 blocks exactly (MatMulNBits + block-sum offsets); the
    overlay writes the donor's weights to that lattice, and the overlaid graph computes what an fp32 graph
    of the donor's Q4_1-rounded weights computes."""
    from harness.export import fused

    state, donor, _, _, _ = models
    import onnx

    from transformers import LlamaConfig

    cfg = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=True)

    def on_lattice(s):
        out = dict(s)
        for n, w in s.items():
            if n.startswith("model.layers.") and n.endswith("proj.weight"):
                q, d, m = encode._q4_1(w, 32)
                out[n] = (d[..., None].astype(np.float64) * q.reshape(w.shape[0], -1, 32)
                          + m[..., None]).reshape(w.shape).astype(np.float32)
        return out

    lat = on_lattice(state)
    fused.export(lat, cfg, tmp_path / "lattice_q4.onnx", bits=4, head_bits=32, accuracy_level=0, block=32, opset=17,
                 lattice=True)
    backbone = tmp_path / "lattice_q4.onnx"
    assert encode.encoding_of(onnx.load(str(backbone)), "model.layers.0.mlp.gate_up_proj").kind == "q4_1"
    ob.build(backbone, lat, donor, "ffn", range(LAYERS), 1e-3, tmp_path / "lat.overlay")
    rounded = on_lattice({**lat, **{n: w for n, w in donor.items() if ".mlp." in n}})
    fused.export(rounded, cfg, tmp_path / "reference_fp32.onnx", bits=32, head_bits=32, accuracy_level=0, block=32,
                 opset=17)
    ids = list(range(3, 40))
    got = OrtDecoder(backbone, overlay=tmp_path / "lat.overlay").full(ids)
    want = OrtDecoder(tmp_path / "reference_fp32.onnx").full(ids)
    plain = OrtDecoder(backbone).full(ids)
    assert np.abs(plain - want).max() > 0.05
    assert np.abs(got - want).max() < 2e-3, float(np.abs(got - want).max())
