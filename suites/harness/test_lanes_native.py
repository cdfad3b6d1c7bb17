"""The native lanes through the one loop on a small synthetic decoder graph: the probe process and Python
onnxruntime agree with OrtDecoder.greedy, interleave, and a probe that refuses a request (or never starts)
becomes a failed lane while the other lane goes on."""

import numpy as np
import pytest

from harness import workload as workloads
from harness.lanes import measure, run_lane
from harness.runtime import OrtDecoder
from harness.throughput import lanes, probe

VOCAB, DIM = 16, 4
pytestmark = pytest.mark.native


def _decoder_graph(path):
    """logits = embed(ids) @ W + (sum over the cache of keys) @ W; present = concat(past, embed(ids))."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((VOCAB, DIM)).astype(np.float32), "E"),
             numpy_helper.from_array(rng.standard_normal((DIM, VOCAB)).astype(np.float32), "W"),
             numpy_helper.from_array(np.asarray([1], np.int64), "axis1"),
             numpy_helper.from_array(np.asarray([2], np.int64), "axis2")]
    nodes = [helper.make_node("Gather", ["E", "input_ids"], ["x"]), helper.make_node("Unsqueeze", ["x", "axis1"], ["x4"]),
             helper.make_node("MatMul", ["x", "W"], ["own"])]
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, [1, d]) for n, d in
              (("input_ids", "s"), ("attention_mask", "t"), ("position_ids", "s"))]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, "s", VOCAB])]
    for kind in ("key", "value"):
        nodes.append(helper.make_node("Concat", [f"past_key_values.0.{kind}", "x4"], [f"present.0.{kind}"], axis=2))
        inputs.append(helper.make_tensor_value_info(f"past_key_values.0.{kind}", TensorProto.FLOAT, [1, 1, "p", DIM]))
        outputs.append(helper.make_tensor_value_info(f"present.0.{kind}", TensorProto.FLOAT, [1, 1, "t", DIM]))
    nodes += [helper.make_node("ReduceSum", ["present.0.key", "axis2"], ["ctx4"], keepdims=1),
              helper.make_node("Squeeze", ["ctx4", "axis1"], ["ctx"]), helper.make_node("MatMul", ["ctx", "W"], ["mix"]),
              helper.make_node("Add", ["own", "mix"], ["logits"])]
    model = helper.make_model(helper.make_graph(nodes, "lanes-test", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    path = tmp_path_factory.mktemp("lanes") / "decoder.onnx"
    _decoder_graph(path)
    return path


@pytest.fixture(scope="module")
def binary():
    return probe.ensure_built()


def _work(cells=None):
    cells = cells or (("short", (1, 2, 3)), ("long", tuple(range(1, 13))))
    return workloads.Workload(tuple(workloads.Cell(n, ids) for n, ids in cells), new_tokens=6, warmup=1, repeats=3,
                              max_repeats=3, cv_limit=1e9, threads=1)


def test_probe_and_python_lanes_interleave_and_agree_with_the_reference(binary, graph):
    work = _work()
    with lanes.ProbeLane(binary, graph, 1, max_seq=32) as p, lanes.PythonOrtLane(graph, 1) as py:
        loads = {"probe": p.load(), "python": py.load()}
        out = measure({"probe": p, "python": py}, work, "interleaved")
        assert p.close() is None                                     # a clean exit
    assert loads["probe"]["threads"] == 1 and loads["python"]["threads"] == 1 and loads["python"]["load_ms"] > 0
    reference = OrtDecoder(graph, 1)
    for name, e in out.items():
        assert e["error"] is None, e["error"]
        for c in work.cells:
            assert e["ids"][c.name] == reference.greedy(list(c.prompt_ids), work.new_tokens - 1)[0], name
            assert e["cells"][c.name]["repeats"] == 3 and e["ids_stable"][c.name]
            assert e["cells"][c.name]["cpu_per_wall"] is not None
    rounds = [r["round"] for r in out["probe"]["raw"]["short"] if not r["warmup"]]
    assert rounds == [1, 2, 3]


def test_a_refused_request_fails_the_probe_lane_only(binary, graph):
    work = _work((("ok", (1, 2)), ("long", tuple(range(1, 15)) * 2)))  # 28 + 6 tokens: over the probe's --max-seq 32
    with lanes.ProbeLane(binary, graph, 1, max_seq=32) as p, lanes.PythonOrtLane(graph, 1) as py:
        p.load(), py.load()
        out = measure({"probe": p, "python": py}, work, "interleaved")
        end = p.close()
    assert "exceeds --max-seq 32" in out["probe"]["error"] and set(out["probe"]["cells"]) == {"ok"}
    assert end and "exited with status" in end
    assert out["python"]["error"] is None and out["python"]["cells"]["long"]["repeats"] == 3


def test_run_lane_records_a_probe_that_cannot_start(binary, tmp_path):
    load, found = run_lane(lanes.ProbeLane(binary, tmp_path / "missing.onnx", 1), _work())
    assert load is None and "cannot open" in found["error"] and found["cells"] == {}
