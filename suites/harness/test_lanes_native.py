"""The native lanes through the one loop on a small synthetic decoder graph: the probe process and Python
onnxruntime agree with OrtDecoder.greedy, interleave, and a probe that refuses a request (or never starts)
becomes a failed lane while the other lane goes on."""

import numpy as np
import pytest

from harness import workload as workloads
from harness.lanes import measure, run_lane
from harness.runtime import OrtDecoder
from harness.throughput import lanes, probe

import toy_decoder  # suites/harness/toy_decoder.py

VOCAB, DIM = 16, 4
pytestmark = pytest.mark.native


def _decoder_graph(path):
    """logits = embed(ids) @ W + (sum over the cache of keys) @ W; present = concat(past, embed(ids))."""
    from onnx import helper

    rng = np.random.default_rng(1)
    tensors = {"E": rng.standard_normal((VOCAB, DIM)).astype(np.float32),
               "W": rng.standard_normal((DIM, VOCAB)).astype(np.float32)}
    body = [helper.make_node("MatMul", ["x", "W"], ["own"]), helper.make_node("MatMul", ["ctx", "W"], ["mix"]),
            helper.make_node("Add", ["own", "mix"], ["logits"])]
    toy_decoder.save(path, tensors, body, vocab=VOCAB, dim=DIM, name="lanes-test")


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
