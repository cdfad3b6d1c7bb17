"""The win rule on real probe processes: a candidate graph that is faster because it computes less (its
cache path cut off: a truncated graph) never WINs; the window is INVALID naming the first differing token,
while an A/A window on the same graph keeps identical ids in every wave."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from harness import winrule
from harness.throughput import probe
from harness.throughput.lanes import ProbeLane
from harness.winrule.lane import Schedule, registered, run_window

import toy_decoder  # suites/harness/toy_decoder.py

pytestmark = pytest.mark.native
VOCAB, DIM, LAYERS = 64, 32, 12


def _graph(path, truncated: bool):
    """A decoder whose logits read LAYERS stacked MatMuls over the token and the summed cache; the truncated
    graph keeps the cache outputs but drops the cache path and all but one layer (less work, other tokens)."""
    from onnx import helper

    rng = np.random.default_rng(7)
    tensors = {"E": rng.standard_normal((VOCAB, DIM)).astype(np.float32),
               "W": rng.standard_normal((DIM, VOCAB)).astype(np.float32)}
    tensors.update({f"L{i}": (rng.standard_normal((DIM, DIM)) / np.sqrt(DIM)).astype(np.float32) for i in range(LAYERS)})
    body, h = [], "x"
    if not truncated:
        body.append(helper.make_node("Add", ["x", "ctx"], ["h0"]))
        h = "h0"
    for i in range(1 if truncated else LAYERS):
        body += [helper.make_node("MatMul", [h, f"L{i}"], [f"m{i}"]), helper.make_node("Tanh", [f"m{i}"], [f"t{i}"]),
                 helper.make_node("Add", [h, f"t{i}"], [f"h{i + 1}"])]
        h = f"h{i + 1}"
    body.append(helper.make_node("MatMul", [h, "W"], ["logits"]))
    toy_decoder.save(path, tensors, body, vocab=VOCAB, dim=DIM, name="winrule-test", ctx=not truncated)


REG = winrule.Registration("truncated", 1, ("short", "long"), repeats=2, waves_per_repeat=2,
                           primary=winrule.Metric("decode_tok_s", "tokens/s", True),
                           guards=(winrule.Metric("prefill_ms", "ms", False, 0.5),), seeds="greedy",
                           required_effect=0.02)
SCHEDULE = Schedule.build([int(t) for t in np.random.default_rng(3).integers(0, VOCAB, 400)], {"short": 6, "long": 40},
                          REG.waves)


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    root = tmp_path_factory.mktemp("winrule-real")
    _graph(root / "full.onnx", False)
    _graph(root / "truncated.onnx", True)
    return root / "full.onnx", root / "truncated.onnx"


def _window(graph_paths, configs):
    reg = registered(REG, SCHEDULE)
    binary = probe.ensure_built()
    with contextlib.ExitStack() as stack:
        lanes = []
        for i, g in enumerate(graph_paths):
            lane = stack.enter_context(ProbeLane(binary, g, 1, name=f"s{i}", max_seq=128, kv_heads=1, head_dim=DIM))
            lane.load()
            lanes.append(lane)
        return run_window(reg, lanes, configs, ("s1", "s2", "s3"), SCHEDULE, new_tokens=12, warmup=1,
                          fingerprint=lambda: {"cpu_model": "x"}, commit=None,
                          decide=lambda starts: winrule.decide(starts, reg, winrule.DriftPolicy()),
                          sample_interval_s=0.1)


def test_a_truncated_candidate_never_wins_and_names_the_first_differing_token(graphs):
    full, truncated = graphs
    decision, starts, _ = _window((full, truncated, full), ("graph=full", "graph=truncated", "graph=full"))
    assert decision.verdict == winrule.INVALID, decision.render()
    reason = next(r for r in decision.reasons if "the candidate computes something else" in r)
    assert "greedy ids differ in cell 'short' wave 0 at token" in reason
    print(decision.render())
    assert starts[0].outputs == starts[2].outputs   # the controls repeat themselves


def test_an_aa_window_on_real_processes_keeps_identical_ids(graphs):
    full, _ = graphs
    decision, starts, _ = _window((full, full, full), ("graph=full",) * 3)
    assert decision.verdict != winrule.INVALID and decision.outputs.startswith("identical"), decision.render()
    assert all(len(s.outputs["long"]) == REG.waves for s in starts)
    assert all(s.samples["samples"] >= 2 for s in starts)
