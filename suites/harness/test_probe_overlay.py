"""Skill overlays in the native probe (``--overlay``) on a real decoder graph and real ONNX Runtime: the overlaid
probe generates what Python onnxruntime generates with ``SessionOptions.add_initializer`` of the same tensors
(an fp32 MatMul weight and a 4-bit MatMulNBits ``B``, which ONNX Runtime prepacks at session creation), not
what the backbone generates; the graph's bytes never change; and an overlay for another backbone, a truncated or
corrupt file, an unknown dtype or initializer name, and an initializer the graph optimizer folds away (which ONNX
Runtime would ignore silently) are each refused at load naming the file and the tensor or field."""

from __future__ import annotations

import hashlib
import json
import struct

import numpy as np
import pytest

from harness.errors import HarnessError
from harness.export.matmulnbits import pack_matmul_nbits, quantize_blocks
from harness.throughput import probe
from harness.throughput.lanes import ProbeLane

import toy_decoder  # suites/harness/toy_decoder.py

pytestmark = pytest.mark.native
VOCAB, DIM, BLOCK = 64, 32, 16
PROMPT, NEW = [3, 17, 42, 5, 9], 12


def _graph(path) -> dict[str, np.ndarray]:
    """A decoder: h = embed(ids) + sum of the cached keys; h += tanh(MatMulNBits(h)) (4 bits, blocks of 16,
    accuracy level 4 as the q4 exports); logits = h @ W + bias, where bias = Neg(nbias) is folded by the graph
    optimizer into a new constant (so an override of ``nbias`` never reaches the session). Returns the tensors."""
    from onnx import helper

    rng = np.random.default_rng(11)
    codes, scale, zero = quantize_blocks(rng.standard_normal((DIM, DIM)).astype(np.float32) / np.sqrt(DIM), 4, BLOCK)
    packed, scales, zeros = pack_matmul_nbits(codes, scale, zero, 4, BLOCK)
    t = {"E": rng.standard_normal((VOCAB, DIM)).astype(np.float32),
         "W": rng.standard_normal((DIM, VOCAB)).astype(np.float32),
         "mlp.qweight": packed, "mlp.scales": scales, "mlp.zero_points": zeros,
         "nbias": (0.1 * rng.standard_normal(VOCAB)).astype(np.float32)}
    body = [helper.make_node("Add", ["x", "ctx"], ["h0"]),
            helper.make_node("MatMulNBits", ["h0", "mlp.qweight", "mlp.scales", "mlp.zero_points"], ["m"],
                             domain="com.microsoft", K=DIM, N=DIM, bits=4, block_size=BLOCK, accuracy_level=4),
            helper.make_node("Tanh", ["m"], ["tm"]), helper.make_node("Add", ["h0", "tm"], ["h1"]),
            helper.make_node("MatMul", ["h1", "W"], ["raw"]), helper.make_node("Neg", ["nbias"], ["bias"]),
            helper.make_node("Add", ["raw", "bias"], ["logits"])]
    toy_decoder.save(path, t, body, vocab=VOCAB, dim=DIM, name="overlay-test", microsoft=True)
    return t


def _sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write(path, tensors: dict[str, np.ndarray], backbone: str) -> None:
    from safetensors.numpy import save_file

    save_file(tensors, str(path), metadata={"gatehouse_overlay": "1", "backbone_sha256": backbone, "skill": "test"})


def _raw(path, header: dict, data: bytes, length: int | None = None) -> None:
    """A hand-made overlay file: the header as given (corruptions included), ``length`` overriding its length."""
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + data)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("overlay")
    graph = root / "decoder.onnx"
    tensors = _graph(graph)
    rng = np.random.default_rng(5)
    new_codes = rng.integers(0, 16, size=(DIM, DIM)).astype(np.uint8)
    qweight = pack_matmul_nbits(new_codes, np.ones((DIM, DIM // BLOCK), np.float32),
                                np.zeros((DIM, DIM // BLOCK), np.uint8), 4, BLOCK)[0]
    assert qweight.shape == tensors["mlp.qweight"].shape and qweight.dtype == np.uint8
    replacements = {"W": {"W": rng.standard_normal((DIM, VOCAB)).astype(np.float32)},
                    "mlp.qweight": {"mlp.qweight": qweight}}
    return {"root": root, "graph": graph, "sha": _sha256(graph), "tensors": tensors, "replacements": replacements}


@pytest.fixture(scope="module")
def binary():
    return probe.ensure_built()


def _probe_ids(binary, graph, overlay=None) -> tuple[list[int], dict]:
    with probe.ProbeProcess(binary, graph, threads=1, max_seq=64, overlay=overlay) as p:
        return p.generate(PROMPT, NEW, 1)["ids"], p.load


def _python_ids(graph, replacements: dict[str, np.ndarray] | None) -> list[int]:
    """Greedy decoding with Python onnxruntime, the overlay applied by ``SessionOptions.add_initializer``."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = 1, 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    values = [(name, ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(a)))
              for name, a in (replacements or {}).items()]
    for name, value in values:
        so.add_initializer(name, value)
    session = ort.InferenceSession(str(graph), so, providers=["CPUExecutionProvider"])
    past = {f"past_key_values.0.{k}": np.zeros((1, 1, 0, DIM), np.float32) for k in ("key", "value")}
    ids, feed, out = list(PROMPT), list(PROMPT), []
    while len(out) < NEW:
        n = len(feed)
        logits, key, value = session.run(["logits", "present.0.key", "present.0.value"], {
            "input_ids": np.asarray([feed], np.int64), "attention_mask": np.ones((1, len(ids)), np.int64),
            "position_ids": np.arange(len(ids) - n, len(ids), dtype=np.int64)[None], **past})
        past = {"past_key_values.0.key": key, "past_key_values.0.value": value}
        token = int(np.argmax(logits[0, -1]))
        out.append(token)
        ids.append(token)
        feed = [token]
    return out


@pytest.mark.parametrize("replaced", ["W", "mlp.qweight"])
def test_the_overlaid_probe_generates_what_python_add_initializer_generates(setup, binary, replaced):
    graph, replacement = setup["graph"], setup["replacements"][replaced]
    overlay = setup["root"] / f"{replaced}.overlay.safetensors"
    _write(overlay, replacement, setup["sha"])
    base, base_load = _probe_ids(binary, graph)
    ids, load = _probe_ids(binary, graph, overlay)
    assert base_load["overlay"] is None
    assert base == _python_ids(graph, None)
    assert ids == _python_ids(graph, replacement), "the probe and Python's add_initializer disagree"
    assert ids != base, f"replacing {replaced} changed nothing: the override was not honored"
    assert load["graph_sha256"] == base_load["graph_sha256"] == setup["sha"] == _sha256(graph)
    nbytes = sum(a.nbytes for a in replacement.values())
    assert load["overlay"]["path"] == str(overlay) and load["overlay"]["tensors"] == 1
    assert load["overlay"]["bytes"] == nbytes and load["overlay"]["sha256"] == _sha256(overlay)


def test_an_overlay_for_another_backbone_is_refused_with_both_hashes(setup, binary):
    overlay = setup["root"] / "other.overlay.safetensors"
    other = hashlib.sha256(b"another backbone").hexdigest()
    _write(overlay, setup["replacements"]["W"], other)
    with pytest.raises(probe.ProbeError) as err:
        probe.ProbeProcess(binary, setup["graph"], threads=1, max_seq=64, overlay=overlay)
    msg = str(err.value)
    assert "load error (exit 3)" in msg and str(overlay) in msg and "__metadata__.backbone_sha256" in msg
    assert other in msg and setup["sha"] in msg and "another backbone" in msg


def _good(setup) -> tuple[dict, bytes]:
    w = setup["replacements"]["W"]["W"]
    meta = {"gatehouse_overlay": "1", "backbone_sha256": setup["sha"]}
    header = {"__metadata__": meta, "W": {"dtype": "F32", "shape": [DIM, VOCAB], "data_offsets": [0, w.nbytes]}}
    return header, w.tobytes()


def _bad_files(setup):
    """(case, writer(path), words the refusal names beside the file)."""
    nbias = setup["tensors"]["nbias"]

    def edit(change):
        def write(path):
            header, data = _good(setup)
            change(header, data)   # edits the header in place
            _raw(path, header, data)
        return write

    def truncated(path):
        header, data = _good(setup)
        _raw(path, header, data)
        path.write_bytes(path.read_bytes()[:-100])

    return [
        ("short", lambda p: p.write_bytes(b"\x05\x00\x00"), ["truncated overlay", "3 bytes"]),
        ("header-length", lambda p: _raw(p, *_good(setup), length=1 << 40), ["truncated overlay", "header length"]),
        ("not-json", lambda p: p.write_bytes(struct.pack("<Q", 9) + b"{not json" + b"\0" * 8), ["not JSON"]),
        ("truncated", truncated, ["tensor 'W'", "data_offsets", "overrun"]),
        ("offsets", edit(lambda h, d: h["W"].update(data_offsets=[8, 8 + len(d)])), ["tensor 'W'", "overrun"]),
        ("byte-count", edit(lambda h, d: h["W"].update(shape=[DIM, VOCAB - 1])),
         ["tensor 'W'", "bytes for F32", "expected"]),
        ("dtype", edit(lambda h, d: h["W"].update(dtype="BF16")), ["tensor 'W'", "unknown dtype 'BF16'"]),
        ("format", edit(lambda h, d: h["__metadata__"].pop("gatehouse_overlay")), ["__metadata__.gatehouse_overlay"]),
        ("overlap", edit(lambda h, d: h.update(E={"dtype": "F32", "shape": [4], "data_offsets": [0, 16]})),
         ["tensors 'E' and 'W' overlap"]),
        ("name", edit(lambda h, d: h.update(Wx=h.pop("W"))), ["tensor 'Wx'", "not an initializer of"]),
        ("shape", edit(lambda h, d: h["W"].update(shape=[VOCAB, DIM])),
         ["tensor 'W'", "the graph's initializer is F32 [32, 64]"]),
        ("folded", lambda p: _raw(p, {"__metadata__": {"gatehouse_overlay": "1", "backbone_sha256": setup["sha"]},
                                      "nbias": {"dtype": "F32", "shape": [VOCAB], "data_offsets": [0, nbias.nbytes]}},
                                  (nbias + 1).tobytes()),
         ["tensor 'nbias'", "onnxruntime did not use it", "graph optimizer removed"]),
    ]


def test_a_bad_overlay_is_refused_at_load_naming_the_file_and_the_tensor_or_field(setup, binary):
    for case, write, words in _bad_files(setup):
        path = setup["root"] / f"bad-{case}.safetensors"
        write(path)
        with pytest.raises(probe.ProbeError) as err:
            probe.ProbeProcess(binary, setup["graph"], threads=1, max_seq=64, overlay=path)
        msg = str(err.value)
        assert "load error (exit 3)" in msg and f"{path}: " in msg, (case, msg)
        for w in words:
            assert w in msg, (case, w, msg)
    assert _sha256(setup["graph"]) == setup["sha"]


def test_the_probe_lane_passes_and_records_its_overlay_and_checks_names_first(setup, binary):
    overlay = setup["root"] / "lane.overlay.safetensors"
    _write(overlay, setup["replacements"]["mlp.qweight"], setup["sha"])
    with ProbeLane(binary, setup["graph"], 1, max_seq=64, overlay=overlay) as lane:
        load = lane.load()
        ids = list(lane.generate(PROMPT, NEW).ids)
    assert lane.overlay == overlay and lane.options["overlay"] == overlay
    assert load["overlay"]["path"] == str(overlay)
    assert ids == _python_ids(setup["graph"], setup["replacements"]["mlp.qweight"])

    unknown = setup["root"] / "lane-unknown.safetensors"
    _write(unknown, {"mlp.qweight_typo": setup["replacements"]["mlp.qweight"]["mlp.qweight"]}, setup["sha"])
    lane = ProbeLane(binary, setup["graph"], 1, max_seq=64, overlay=unknown)
    with pytest.raises(HarnessError, match=r"mlp\.qweight_typo"):
        lane.load()
    assert lane.process is None, "the lane started a probe for an overlay it could refuse itself"
