"""The native probe's protocol on small synthetic graphs: greedy ids equal a numpy reference, results
stream one per request, and every error is a JSON line naming the request with a non-zero exit."""

import json
import shutil
import subprocess

import numpy as np
import pytest

from harness.throughput import probe

VOCAB, DIM = 16, 4
pytestmark = pytest.mark.native


def _decoder_graph(path, with_past=True):
    """logits = embed(ids) @ W + (sum over the cache of keys) @ W; present = concat(past, embed(ids))."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    emb = rng.standard_normal((VOCAB, DIM)).astype(np.float32)
    w = rng.standard_normal((DIM, VOCAB)).astype(np.float32)
    inits = [numpy_helper.from_array(emb, "E"), numpy_helper.from_array(w, "W"),
             numpy_helper.from_array(np.asarray([1], np.int64), "axis1"),
             numpy_helper.from_array(np.asarray([2], np.int64), "axis2")]
    nodes = [helper.make_node("Gather", ["E", "input_ids"], ["x"]),                 # (1, S, D)
             helper.make_node("Unsqueeze", ["x", "axis1"], ["x4"]),                  # (1, 1, S, D)
             helper.make_node("MatMul", ["x", "W"], ["own"])]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, "s"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, "t"]),
              helper.make_tensor_value_info("position_ids", TensorProto.INT64, [1, "s"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, "s", VOCAB])]
    if with_past:
        for kind in ("key", "value"):
            nodes.append(helper.make_node("Concat", [f"past_key_values.0.{kind}", "x4"], [f"present.0.{kind}"], axis=2))
            inputs.append(helper.make_tensor_value_info(f"past_key_values.0.{kind}", TensorProto.FLOAT, [1, 1, "p", DIM]))
            outputs.append(helper.make_tensor_value_info(f"present.0.{kind}", TensorProto.FLOAT, [1, 1, "t", DIM]))
        nodes += [helper.make_node("ReduceSum", ["present.0.key", "axis2"], ["ctx4"], keepdims=1),  # (1, 1, 1, D)
                  helper.make_node("Squeeze", ["ctx4", "axis1"], ["ctx"]),                          # (1, 1, D)
                  helper.make_node("MatMul", ["ctx", "W"], ["mix"]),
                  helper.make_node("Add", ["own", "mix"], ["logits"])]
    else:
        nodes.append(helper.make_node("Identity", ["own"], ["logits"]))
    graph = helper.make_graph(nodes, "probe-test", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return emb, w


def _reference(emb, w, prompt, n):
    keys = [emb[t] for t in prompt]
    out = []
    logits = emb[prompt[-1]] @ w + np.sum(keys, axis=0) @ w
    for _ in range(n):
        tok = int(np.argmax(logits))
        out.append(tok)
        keys.append(emb[tok])
        logits = emb[tok] @ w + np.sum(keys, axis=0) @ w
    return out


@pytest.fixture(scope="module")
def binary():
    return probe.ensure_built()


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    path = tmp_path_factory.mktemp("probe") / "decoder.onnx"
    return path, _decoder_graph(path)


def _run(binary, graph_path, stdin, *args):
    r = subprocess.run([str(binary), "--graph", str(graph_path), *args], input=stdin, capture_output=True, text=True,
                       timeout=60)
    return r.returncode, [json.loads(l) for l in r.stdout.splitlines()], [json.loads(l) for l in r.stderr.splitlines()]


def test_greedy_ids_match_the_reference_and_the_load_receipt(binary, graph):
    path, (emb, w) = graph
    reqs = [{"id": "a", "prompt_ids": [1, 2, 3], "max_new_tokens": 6, "mode": "greedy", "stop_ids": [], "threads": 1},
            {"id": 7, "prompt_ids": [5], "max_new_tokens": 4}]
    rc, out, err = _run(binary, path, json.dumps(reqs), "--threads", "1", "--max-seq", "16")
    assert rc == 0, (out, err)
    assert [o["id"] for o in out] == ["a", 7]
    assert out[0]["generated_ids"] == _reference(emb, w, [1, 2, 3], 6)
    assert out[1]["generated_ids"] == _reference(emb, w, [5], 4)
    first = out[0]
    assert first["prompt_tokens"] == 3 and first["generated_tokens"] == 6 and first["decode_tokens"] == 5
    assert first["total_ms"] >= first["prefill_ms"] and len(first["token_ms"]) == 6
    load = err[0]
    assert load["event"] == "load" and load["threads"] == 1 and load["kv_mode"] == "concat"
    import hashlib
    import onnxruntime

    assert load["graph_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert load["runtime_version"] == onnxruntime.__version__
    assert "libonnxruntime" in load["runtime_library"]


def test_stop_ids_end_a_generation(binary, graph):
    path, (emb, w) = graph
    ref = _reference(emb, w, [1, 2, 3], 6)
    rc, out, _ = _run(binary, path, json.dumps([{"prompt_ids": [1, 2, 3], "max_new_tokens": 6, "stop_ids": [ref[1]]}]))
    assert rc == 0 and out[0]["generated_ids"] == ref[:ref.index(ref[1]) + 1]


def test_requests_stream_one_at_a_time(binary, graph):
    path, _ = graph
    with probe.ProbeProcess(binary, path, threads=1, max_seq=16) as p:
        a = p.generate([1, 2], 3, threads=1)
        b = p.generate([1, 2], 3, threads=1)
    assert a["ids"] == b["ids"] and p.proc.returncode == 0


@pytest.mark.parametrize("stdin,needle", [
    ('[{"prompt_ids": [1, 99], "max_new_tokens": 2}]', "prompt_ids[1] = 99 is out of range [0, 16)"),
    ('[{"prompt_ids": [1, -1], "max_new_tokens": 2}]', "out of range"),
    ('[{"prompt_ids": [1], "max_new_tokens": 2}, {"prompt_ids": [1]}]', "request 1: missing field max_new_tokens"),
    ('[{"prompt_ids": [1], "max_new_tokens": 2, "mode": "beam"}]', "mode 'beam' is not supported"),
    ('[{"prompt_ids": [1], "max_new_tokens": 2, "threads": 3}]', "threads 3 differs"),
    ('[{"prompt_ids": [1], "max_new_tokens": 20}]', "exceeds --max-seq 16"),
    ('[{"prompt_ids": [1.5], "max_new_tokens": 2}]', "is not an integer"),
    ('[{"prompt_ids": [1], "max_new_tokens": 2} {', "after request 0"),
    ('[{"prompt_ids": [1], "max_new_tokens": 2}, {"prompt_ids": [1, ', "malformed JSON"),
    ('{"prompt_ids": [1]}', "expected '['"),
    ('[[1, 2]]', "request 0 is not a JSON object"),
])
def test_malformed_requests_are_json_errors_naming_the_request(binary, graph, stdin, needle):
    path, _ = graph
    rc, out, _ = _run(binary, path, stdin, "--threads", "1", "--max-seq", "16")
    assert rc == 2
    err = out[-1]
    assert needle in err["error"] and err["stage"] == "request" and "index" in err


def test_a_graph_without_the_expected_inputs_is_a_load_error(binary, tmp_path):
    path = tmp_path / "no-past.onnx"
    _decoder_graph(path, with_past=False)
    rc, out, _ = _run(binary, path, "[]")
    assert rc == 3 and out[0]["stage"] == "load" and "past_key_values.*" in out[0]["error"]
    rc, out, _ = _run(binary, tmp_path / "missing.onnx", "[]")
    assert rc == 3 and "cannot open" in out[0]["error"]
    rc, out, _ = _run(binary, path, "[]", "--threads", "zero")
    assert rc == 3 and "--threads" in out[0]["error"]


def test_probe_process_raises_the_json_error(binary, graph):
    path, _ = graph
    with probe.ProbeProcess(binary, path, threads=1, max_seq=16) as p:
        with pytest.raises(probe.ProbeError, match="out of range"):
            p.generate([1, 500], 2, threads=1)


def test_the_source_stamp_covers_the_shared_headers(binary, monkeypatch, tmp_path):
    """native/setup.sh stamped the binary with the hash sources_sha256 computes, and an edit to a header of
    native/common/ changes that hash (so the probe is rebuilt, not run from stale headers)."""
    assert (probe.BUILD / "SOURCES.sha256").read_text().strip() == probe.sources_sha256()
    before = probe.sources_sha256()
    common = tmp_path / "common"
    shutil.copytree(probe.COMMON, common)
    monkeypatch.setattr(probe, "COMMON", common)
    assert probe.sources_sha256() == before
    (common / "json.hpp").write_text((common / "json.hpp").read_text() + "\n")
    assert probe.sources_sha256() != before
