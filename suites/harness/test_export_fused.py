"""The fused exporter on a small random Llama: block quantization and MatMulNBits packing against a
real onnxruntime run, and the fused decoder against PyTorch (full recompute, one-token steps with the
cache, a left-padded batch, and the in-place cache binding the native probe uses)."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from harness.export import fused, matmulnbits, onnx_export, shapes

BLOCK = 32


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 4), st.sampled_from([4, 8]), st.floats(1e-3, 10.0), st.integers(0, 2**31 - 1))
def test_block_quantization_error_is_at_most_half_a_step(rows, blocks, bits, spread, seed):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((rows, blocks * BLOCK)) * spread).astype(np.float32)
    codes, scale, zero = matmulnbits.quantize_blocks(w, bits, BLOCK)
    assert codes.max() <= (1 << bits) - 1 and zero.max() <= (1 << bits) - 1
    back = matmulnbits.dequantize_blocks(codes, scale, zero, BLOCK)
    step = np.repeat(scale, BLOCK, axis=1)
    assert np.all(np.abs(back - w) <= step * 0.5 + 1e-6 * np.abs(w).max())
    # zero is on the grid: a block's exact zeros stay exact
    w[:, :3] = 0.0
    codes, scale, zero = matmulnbits.quantize_blocks(w, bits, BLOCK)
    assert np.all(matmulnbits.dequantize_blocks(codes, scale, zero, BLOCK)[:, :3] == 0.0)


def test_quantization_refuses_a_ragged_k():
    with pytest.raises(ValueError, match="multiple of the block size"):
        matmulnbits.quantize_blocks(np.zeros((2, 40), np.float32), 4, BLOCK)


@pytest.mark.parametrize("bits,blocks", [(4, 3), (4, 4), (8, 3)])
def test_matmulnbits_packing_matches_onnxruntime(bits, blocks):
    import onnxruntime as ort
    from onnx import TensorProto, helper

    rng = np.random.default_rng(bits * 10 + blocks)
    n, k = 24, blocks * BLOCK
    w = rng.standard_normal((n, k)).astype(np.float32)
    b = matmulnbits.GraphBuilder(BLOCK, accuracy_level=0)
    b.linear("x", w, bits, "w", out="y")
    graph = helper.make_graph(b.nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, n])], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(matmulnbits.MS, 1)])
    x = rng.standard_normal((2, k)).astype(np.float32)
    y = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    codes, scale, zero = matmulnbits.quantize_blocks(w, bits, BLOCK)
    want = x @ matmulnbits.dequantize_blocks(codes, scale, zero, BLOCK).T
    assert np.abs(y - want).max() <= 1e-4 * np.abs(want).max()


def _run_linear(b, x, k, n):
    import onnxruntime as ort
    from onnx import TensorProto, helper

    graph = helper.make_graph(b.nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, n])], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(matmulnbits.MS, 1)])
    return ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]


def _q4_1(n, k, seed):
    rng = np.random.default_rng(seed)
    q = rng.integers(0, 16, (n, k // BLOCK, BLOCK))
    q[..., 0], q[..., 1] = 0, 15
    d = rng.uniform(1e-3, 2e-2, (n, k // BLOCK, 1)).astype(np.float16).astype(np.float32)
    m = rng.normal(-0.05, 0.05, (n, k // BLOCK, 1)).astype(np.float16).astype(np.float32)
    return (d * q + m).reshape(n, k).astype(np.float32)


def test_q4_1_lattice_weights_are_written_exactly():
    w = _q4_1(40, 96, 5)
    x = np.random.default_rng(6).standard_normal((1, 2, 96)).astype(np.float32)
    exact = matmulnbits.GraphBuilder(BLOCK, accuracy_level=0, lattice=True)
    exact.linear("x", w, 4, "w", out="y")
    assert exact.errors["lattice"] == 1 and [n.op_type for n in exact.nodes][0] == "MatMulNBits"
    want = x @ w.T
    assert np.abs(_run_linear(exact, x, 96, 40) - want).max() <= 1e-5 * np.abs(want).max()
    rtn = matmulnbits.GraphBuilder(BLOCK, accuracy_level=0)
    rtn.linear("x", w, 4, "w", out="y")
    assert np.abs(_run_linear(rtn, x, 96, 40) - want).max() > 1e-3 * np.abs(want).max()   # the shift it avoids


def test_q8_0_lattice_is_exact_and_other_weights_are_not_mistaken_for_one():
    rng = np.random.default_rng(7)
    q = rng.integers(-127, 128, (16, 64))
    q[:, 0], q[:, 32] = 127, -127
    d = np.repeat(rng.uniform(1e-3, 1e-2, (16, 2)).astype(np.float16).astype(np.float32), BLOCK, axis=1)
    w = (d * q).astype(np.float32)
    codes, scale, zero = matmulnbits.q8_0_lattice(w, BLOCK)
    assert np.abs(matmulnbits.dequantize_blocks(codes, scale, zero, BLOCK) - w).max() <= 1e-7
    assert matmulnbits.q8_0_lattice(rng.standard_normal((16, 64)).astype(np.float32), BLOCK) is None


def test_bias_correction_removes_the_mean_output_error():
    rng = np.random.default_rng(8)
    w = rng.standard_normal((32, 64)).astype(np.float32)
    x = (rng.standard_normal((1, 2, 64)) * 0.1 + 3.0).astype(np.float32)   # inputs with a large mean
    mean = np.full(64, 3.0, np.float32)
    plain, corrected = matmulnbits.GraphBuilder(BLOCK, 0), matmulnbits.GraphBuilder(BLOCK, 0)
    plain.linear("x", w, 4, "w", out="y")
    corrected.linear("x", w, 4, "w", out="y", stats={"mean": mean})
    want = x @ w.T
    err_plain = np.abs(_run_linear(plain, x, 64, 32) - want).mean()
    err_corr = np.abs(_run_linear(corrected, x, 64, 32) - want).mean()
    assert err_corr < 0.2 * err_plain


@pytest.fixture(scope="module")
def tiny():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg).eval()
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    return model, cfg, state


def _session(state, cfg, bits, head_bits=None, level=0):
    import onnxruntime as ort

    model, info = fused.build_graph(state, shapes.shapes_of(cfg), bits, head_bits or bits, BLOCK, level)
    return ort.InferenceSession(model.SerializeToString()), info


def _torch_logits(model, ids, mask=None):
    import torch

    with torch.no_grad():
        t = torch.tensor(ids)
        m = torch.tensor(mask) if mask is not None else torch.ones_like(t)
        return model(input_ids=t, attention_mask=m, use_cache=False).logits.numpy()


def _empty_past(cfg, batch):
    return {f"past_key_values.{i}.{kv}": np.zeros((batch, 2, 0, 16), np.float32)
            for i in range(cfg.num_hidden_layers) for kv in ("key", "value")}


def _feed(ids, mask, past):
    mask = np.asarray(mask, np.int64)
    pos = np.clip(np.cumsum(mask, axis=1) - 1, 0, None)[:, -len(ids[0]):]
    return {"input_ids": np.asarray(ids, np.int64), "attention_mask": mask, "position_ids": pos, **past}


def _next_past(sess, out):
    names = [o.name for o in sess.get_outputs()]
    return {n.replace("present", "past_key_values"): v for n, v in zip(names, out) if n.startswith("present")}


def test_fused_fp32_matches_pytorch_full_and_incremental(tiny):
    model, cfg, state = tiny
    sess, info = _session(state, cfg, 32)
    assert info["op_types"]["GroupQueryAttention"] == 2 and "MatMulNBits" not in info["op_types"]
    ids = np.random.default_rng(1).integers(0, 96, (1, 12)).tolist()
    want = _torch_logits(model, ids)
    full = sess.run(None, _feed(ids, [[1] * 12], _empty_past(cfg, 1)))
    assert np.abs(full[0] - want).max() < 1e-4
    # prefill 7, then one token at a time with the returned cache
    out = sess.run(None, _feed([ids[0][:7]], [[1] * 7], _empty_past(cfg, 1)))
    steps = [out[0][:, -1]]
    for t in range(7, 12):
        out = sess.run(None, _feed([[ids[0][t]]], [[1] * (t + 1)], _next_past(sess, out)))
        steps.append(out[0][:, -1])
    assert np.abs(np.stack(steps, 1) - want[:, 6:]).max() < 1e-4


def test_left_padded_batch_matches_each_row_alone(tiny):
    model, cfg, state = tiny
    sess, _ = _session(state, cfg, 32)
    rng = np.random.default_rng(2)
    a, b = rng.integers(0, 96, 10).tolist(), rng.integers(0, 96, 6).tolist()
    ids, mask = [a, [0] * 4 + b], [[1] * 10, [0] * 4 + [1] * 6]
    out = sess.run(None, _feed(ids, mask, _empty_past(cfg, 2)))
    alone = sess.run(None, _feed([b], [[1] * 6], _empty_past(cfg, 1)))
    assert np.abs(out[0][1, 4:] - alone[0][0]).max() < 1e-4
    # two decode steps: the padded row still equals the row alone
    nxt = [[5], [7]]
    mask = [m + [1] for m in mask]
    out = sess.run(None, _feed(nxt, mask, _next_past(sess, out)))
    alone = sess.run(None, _feed([[7]], [[1] * 7], _next_past(sess, alone)))
    assert np.abs(out[0][1] - alone[0][0]).max() < 1e-4
    assert np.abs(out[0][1, -1] - _torch_logits(model, [b + [7]])[0, -1]).max() < 1e-4


def test_in_place_cache_binding_equals_returned_caches(tiny):
    """The probe binds one preallocated buffer as both past and present (kv share): same logits."""
    import onnxruntime as ort

    _, cfg, state = tiny
    sess, _ = _session(state, cfg, 32)
    ids = np.random.default_rng(3).integers(0, 96, 9).tolist()
    cap = 9
    bufs = {f"{i}.{kv}": np.zeros((1, 2, cap, 16), np.float32) for i in range(2) for kv in ("key", "value")}
    got = []
    for start, n in ((0, 5), (5, 1), (6, 1), (7, 1), (8, 1)):
        binding = sess.io_binding()
        feed = _feed([ids[start:start + n]], [[1] * (start + n)], {})
        for name, value in feed.items():
            binding.bind_cpu_input(name, value)
        for key, buf in bufs.items():
            ov = ort.OrtValue.ortvalue_from_numpy(buf)
            binding.bind_ortvalue_input(f"past_key_values.{key}", ov)
            binding.bind_ortvalue_output(f"present.{key}", ov)
        binding.bind_output("logits")
        sess.run_with_iobinding(binding)
        got.append(binding.copy_outputs_to_cpu()[-1][0, -1])  # outputs in binding order: logits last
    full = sess.run(None, _feed([ids], [[1] * 9], _empty_past(cfg, 1)))[0][0]
    assert np.abs(np.stack(got) - full[[4, 5, 6, 7, 8]]).max() < 1e-4


@pytest.mark.parametrize("bits,tol", [(8, 0.05), (4, 0.5)])
def test_quantized_variants_stay_near_fp32_and_are_row_independent(tiny, bits, tol):
    _, cfg, state = tiny
    ref, _ = _session(state, cfg, 32)
    sess, info = _session(state, cfg, bits, level=4)
    assert info["op_types"]["MatMulNBits"] == 2 * 4 + 1 and info["quantized_weights"] == 9  # qkv, o, gate_up, down; head
    ids = np.random.default_rng(4).integers(0, 96, (1, 8)).tolist()
    want = ref.run(None, _feed(ids, [[1] * 8], _empty_past(cfg, 1)))[0]
    full = sess.run(None, _feed(ids, [[1] * 8], _empty_past(cfg, 1)))
    assert 0 < np.abs(full[0] - want).max() < tol
    # the last row computed alone (one-token step on the cache) equals the same row in the full call
    pre = sess.run(None, _feed([ids[0][:7]], [[1] * 7], _empty_past(cfg, 1)))
    step = sess.run(None, _feed([ids[0][7:]], [[1] * 8], _next_past(sess, pre)))
    assert np.abs(step[0][0, -1] - full[0][0, -1]).max() < 1e-4


def test_tied_fp32_head_is_stored_once(tiny):
    _, cfg, state = tiny
    model, info = fused.build_graph(state, shapes.shapes_of(cfg), 32, 32)
    names = [t.name for t in model.graph.initializer]
    assert "model.embed_tokens.weight" in names and "lm_head.weight" not in names
    assert {p.key: p.value for p in model.metadata_props}["gatehouse.kv"] == "share"


@pytest.mark.parametrize("params,match", [
    ({"graph": "fused", "q4_symmetric": False, "q8_accuracy_level": 7}, "accuracy level 0..4"),
    ({"graph": "traced", "bias_correction": True}, "fused graph only"),
    ({"graph": "fused", "q4_symmetric": True}, "asymmetric"),
    ({"graph": "traced", "q4_head": "q8"}, "fused graph only"),
    ({"graph": "wide"}, "one of"),
])
def test_export_parameters_are_checked(params, match):
    with pytest.raises(ValueError, match=match):
        onnx_export.check_params({**onnx_export.EXPORT_DEFAULTS, **params})


def test_fault_injection_needs_the_traced_exporter():
    with pytest.raises(ValueError, match="traced exporter only"):
        onnx_export.check_params({**onnx_export.EXPORT_DEFAULTS, "graph": "fused", "q4_symmetric": False},
                                 fault="ignore_attention_mask")
