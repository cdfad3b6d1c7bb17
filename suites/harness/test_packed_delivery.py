"""Packed delivery (harness/export/packed.py, web/ort-bench.js): the weights ship as 4-bit / 8-bit codes and are
expanded at load into the fp32 graph's external data. The Python expansion equals the data file; ONNX Runtime runs
the graph on it; the page's expansion in Chromium has the same SHA-256 (the page refuses to load otherwise), and a
damaged pack is refused by name."""

import json
from pathlib import Path

import numpy as np
import pytest

from harness.browser.driver import Browser, BrowserError
from harness.browser.server import StaticServer
from harness.export import packed

WEB = Path(__file__).resolve().parents[2] / "web"


def _toy(tmp_path: Path, lattice: bool):
    """A graph with an embedding Gather and two MatMuls (one linear on a Q4_1 lattice when ``lattice``)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(11)
    codes = rng.integers(-126, 127, (40, 2, 32))
    codes[:, :, 0] = 127                                                       # a GGUF Q8_0 block: max |q| = 127
    d8 = rng.uniform(0.001, 0.01, (40, 2, 1)).astype(np.float16).astype(np.float64)
    emb = (codes * d8).reshape(40, 64).astype(np.float32)
    w1 = rng.standard_normal((32, 64)) * 0.05                                  # (N, K)
    if lattice:
        q = rng.integers(0, 16, (32, 2, 32))
        q[..., 0], q[..., 1] = 0, 15                  # as GGUF's Q4_1 writes a block: min and max are codes 0 and 15
        d = np.float16(0.01) * np.ones((32, 2, 1))
        m = rng.uniform(-0.15, -0.01, (32, 2, 1)).astype(np.float16).astype(np.float64)
        w1 = (d.astype(np.float64) * q + m).reshape(32, 64)
    w2 = rng.standard_normal((48, 32)) * 0.05
    g = helper.make_graph(
        [helper.make_node("Gather", ["emb", "ids"], ["x"], axis=0),
         helper.make_node("MatMul", ["x", "w1"], ["h"]),
         helper.make_node("MatMul", ["h", "w2"], ["y"])], "toy",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, "s"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "s", 48])],
        [numpy_helper.from_array(emb, "emb"), numpy_helper.from_array(w1.T.astype(np.float32), "w1"),
         numpy_helper.from_array(w2.T.astype(np.float32), "w2")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    out = tmp_path / "art"
    index = packed.pack(model, out, 32, "lattice")
    import onnx

    onnx.save_model(model, str(out / "onnx" / "model.onnx"))
    return out, index, (emb, w1, w2)


@pytest.mark.parametrize("lattice", [True, False])
def test_the_pack_expands_to_the_graphs_data_and_onnxruntime_runs_it(tmp_path, lattice):
    import onnxruntime as ort

    out, index, (emb, w1, w2) = _toy(tmp_path, lattice)
    data = (out / "onnx" / "model.onnx.data").read_bytes()
    assert packed.expand(index, (out / "onnx" / "pack.bin").read_bytes()) == data
    enc = {t["name"]: t["encoding"] for t in index["tensors"]}
    assert enc == {"emb": "q8_zp", "w1": "q4_1" if lattice else "q4_zp", "w2": "q4_zp"}
    assert index["pack_bytes"] < index["data_bytes"] / 3
    s = ort.InferenceSession(str(out / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    y = s.run(None, {"ids": np.array([[3, 7]], np.int64)})[0]
    t = {t["name"]: t for t in index["tensors"]}

    def stored(name, shape):
        off, n = t[name]["data"]
        return np.frombuffer(data, "<f4", count=n // 4, offset=off).reshape(shape)

    e, a, b = stored("emb", (40, 64)), stored("w1", (64, 32)), stored("w2", (32, 48))
    assert np.allclose(y[0], e[[3, 7]] @ a @ b, atol=1e-5)
    assert np.array_equal(e, emb)                      # the 8-bit embedding on its lattice is exact
    if lattice:                                         # a Q4_1 block with fp16 scale and offset is exact
        assert np.array_equal(a, w1.T.astype(np.float32))


@pytest.mark.browser
def test_the_page_expands_the_pack_bit_for_bit_and_refuses_a_damaged_one(tmp_path):
    if not (WEB / "node_modules" / "onnxruntime-web" / "package.json").is_file():
        pytest.fail("web/node_modules is missing; run web/setup.sh")
    out, index, _ = _toy(tmp_path, lattice=True)
    with StaticServer({"web": WEB, "art": out}, tmp_path / "server.log") as server, \
            Browser(tmp_path / "b.jsonl") as browser:
        page = browser.open(server.url("web/ort.html"))
        cfg = {"model": server.url("art/onnx/model.onnx"), "numThreads": 2, "kvHeads": 1, "headDim": 1,
               "pack": server.url("art/onnx/pack.json"), "downloadPrefix": "/art/"}
        info, _ = page.call("load", cfg, timeout_s=60)
        page.close()
        assert info["packed"]["data_sha256"] == index["data_sha256"]
        assert info["download_bytes"] < index["data_bytes"]           # the pack, not the expanded weights
        raw = bytearray((out / "onnx" / "pack.bin").read_bytes())
        raw[index["tensors"][1]["codes"][0]] ^= 0x11                   # one code of w1 changed
        (out / "onnx" / "pack.bin").write_bytes(bytes(raw))
        page = browser.open(server.url("web/ort.html"))
        with pytest.raises(BrowserError, match="packed expansion: SHA-256 .* differs from the graph's data"):
            page.call("load", cfg, timeout_s=60)
        page.close()
    assert json.loads((out / "onnx" / "pack.json").read_text())["version"] == packed.PACK_VERSION
