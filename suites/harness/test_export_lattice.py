"""The exact 4-bit lattice rewrite: recovery of Q4_1-style blocks and a real onnxruntime run of the rewrite."""

import numpy as np
import pytest

from harness.export import lattice


def q41_weights(n=64, k=128, seed=0, full_range=True):
    rng = np.random.default_rng(seed)
    q = rng.integers(0, 16, size=(n, k // 32, 32))
    if full_range:
        q[..., 0], q[..., 1] = 0, 15
    d = rng.uniform(1e-3, 2e-2, size=(n, k // 32, 1)).astype(np.float16).astype(np.float32)
    m = rng.normal(0, 0.05, size=(n, k // 32, 1)).astype(np.float16).astype(np.float32)
    return (d * q + m).reshape(n, k).astype(np.float32)


@pytest.mark.parametrize("full_range", [True, False])
def test_recover_is_exact_on_a_lattice(full_range):
    wt = q41_weights(full_range=full_range)
    q, d, m = lattice.recover(wt, 32)
    recon = (d[..., None] * q + m[..., None]).reshape(wt.shape)
    assert q.max() <= 15 and np.abs(recon - wt).max() <= 1e-6 * np.abs(wt).max()


def test_recover_refuses_float_weights_and_ragged_blocks():
    rng = np.random.default_rng(1)
    assert lattice.recover(rng.normal(size=(8, 64)).astype(np.float32), 32) is None
    assert lattice.recover(q41_weights(k=128)[:, :96 + 8], 32) is None


def test_rewrite_runs_in_onnxruntime_and_matches_the_float_matmul():
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    wt = q41_weights(n=48, k=96, seed=3)                     # [N, K]
    w = np.ascontiguousarray(wt.T)                            # MatMul B is [K, N]
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="/mm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", 96])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "s", 48])],
                          [numpy_helper.from_array(w, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    out, stats = lattice.rewrite(model, 32, 0)
    assert stats["exact"] == 1 and stats["left"] == [] and stats["max_abs_reconstruction_error"] < 1e-6
    assert [n.op_type for n in out.graph.node] == ["MatMulNBits", "Reshape", "ReduceSum", "MatMul", "Add"]
    sess = ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(4).normal(size=(2, 5, 96)).astype(np.float32)
    y = sess.run(None, {"x": x})[0]
    assert np.abs(y - x @ w).max() <= 1e-4 * np.abs(x @ w).max()
