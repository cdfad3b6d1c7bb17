"""Write a Llama-family decoder (Llama, Mistral, Qwen2) straight to ONNX with ONNX Runtime's fused decoder operators.

The traced exporter (``graph.py``) spells attention out with plain tensor ops: about 2,600 nodes for
SmolLM2, the KV cache concatenated (copied) every step, rotary computed per call.  This builder writes
the graph node by node from the Hugging Face weights instead:

* ``GroupQueryAttention`` (com.microsoft) per layer on one packed QKV projection, rotary inside the
  kernel from cos/sin tables at the cache slot (``position_ids`` is accepted and not read: rotary is
  relative, so left-padded rows attend the same), the padding mask as ``attention_bias``;
  past and present may be one buffer (``past_present_share_buffer``), so a caller that binds a
  preallocated cache never copies it;
* ``SimplifiedLayerNormalization`` / ``SkipSimplifiedLayerNormalization`` for the RMS norms and the
  residual adds;
* one packed gate/up projection per MLP;
* linear weights as plain fp32 ``MatMul`` or as ``MatMulNBits`` (8 or 4 bits, blocks of 32 along K,
  asymmetric, round to nearest), ``accuracy_level`` chosen by the campaign.

Inputs and outputs are the transformers.js layout the rest of Gatehouse uses (``input_ids``,
``attention_mask``, ``position_ids``, ``past_key_values.{i}.key|value`` -> ``logits``,
``present.{i}.key|value``), so every gate, lane and the browser page run it unchanged.

The config is read by :mod:`.shapes`; the linears, their block quantization and the node bookkeeping are
:mod:`.matmulnbits`'; this module lays out the decoder's graph and calibrates its bias correction.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .matmulnbits import MS, GraphBuilder
from .shapes import Shapes, shapes_of

LINEAR_BITS = (32, 8, 4)   # 32: fp32 MatMul


def _bias(state: dict[str, np.ndarray], name: str) -> np.ndarray | None:
    b = state.get(f"{name}.bias")
    return None if b is None else np.asarray(b, np.float32)


def _qkv_bias(state: dict[str, np.ndarray], a: str, s: Shapes) -> np.ndarray | None:
    """The packed projection's bias (Qwen2, Llama with attention_bias): q, k and v concatenated, a
    missing one as zeros; None when none of the three has a bias."""
    parts = [_bias(state, f"{a}.{x}_proj") for x in "qkv"]
    if all(p is None for p in parts):
        return None
    sizes = (s.heads * s.head_dim, s.kv_heads * s.head_dim, s.kv_heads * s.head_dim)
    return np.concatenate([np.zeros(n, np.float32) if p is None else p for p, n in zip(parts, sizes)])


def check_weights(state: dict[str, np.ndarray], s: Shapes) -> None:
    """Refuses a state dict with parameters the graph would not use (an MLP or head bias, an extra
    norm): a silently dropped weight is a wrong model, not a smaller one."""
    known = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}
    for i in range(s.layers):
        p = f"model.layers.{i}"
        known |= {f"{p}.input_layernorm.weight", f"{p}.post_attention_layernorm.weight"}
        known |= {f"{p}.self_attn.{x}_proj.{kind}" for x in "qkvo" for kind in ("weight", "bias")}
        known |= {f"{p}.mlp.{x}_proj.weight" for x in ("gate", "up", "down")}
    unknown = sorted(set(state) - known)
    if unknown:
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        raise ValueError(f"the fused exporter does not write the parameters {unknown[:5]}{more}")


def _call_inputs(b: GraphBuilder, s: Shapes) -> None:
    """The tensors every call shares: the total length, ``seqlens_k``, the padding bias and the rotary tables."""
    from onnx import TensorProto

    # --- shared per-call tensors: total length, seqlens_k, padding bias ---
    b.init("const.one_i64", np.array([1], np.int64))
    b.init("const.zero_i64", np.array([0], np.int64))
    b.node("Shape", ["attention_mask"], ["mask_shape"])
    b.node("Gather", ["mask_shape", "const.one_i64"], ["total_len_1d"], axis=0)          # [1]
    b.node("Shape", ["input_ids"], ["ids_shape"])
    b.node("Gather", ["ids_shape", "const.zero_i64"], ["batch_1d"], axis=0)             # [1]
    b.node("Gather", ["ids_shape", "const.one_i64"], ["seq_1d"], axis=0)                # [1]
    b.node("Cast", ["total_len_1d"], ["total_len_i32_1d"], to=TensorProto.INT32)
    b.node("Squeeze", ["total_len_i32_1d"], ["total_sequence_length"])                  # scalar int32
    # Every row's cache holds total_len slots (left padding included); the bias masks the padding.
    b.node("Sub", ["total_len_i32_1d", b.init("const.one_i32", np.array([1], np.int32))], ["last_i32_1d"])
    b.node("Expand", ["last_i32_1d", "batch_1d"], ["seqlens_k"])                        # [B] int32
    b.node("Equal", ["attention_mask", b.init("const.zero_mask", np.array(0, np.int64))], ["mask_off"])
    b.node("Where", ["mask_off", b.init("const.neg", np.array(np.finfo(np.float32).min, np.float32)),
                     b.init("const.zero_f", np.array(0.0, np.float32))], ["bias_bt"])
    b.node("Unsqueeze", ["bias_bt", b.init("const.axes12", np.array([1, 2], np.int64))], ["bias_b11t"])
    b.node("Concat", ["batch_1d", "const.one_i64", "seq_1d", "total_len_1d"], ["bias_shape"], axis=0)
    b.node("Expand", ["bias_b11t", "bias_shape"], ["attention_bias"])                  # [B, 1, S, T]
    inv = 1.0 / (s.theta ** (np.arange(0, s.head_dim, 2, dtype=np.float64) / s.head_dim))
    ang = np.arange(s.max_positions, dtype=np.float64)[:, None] * inv[None, :]
    b.init("cos_cache", np.cos(ang).astype(np.float32))
    b.init("sin_cache", np.sin(ang).astype(np.float32))


def _layer(b: GraphBuilder, state: dict[str, np.ndarray], s: Shapes, i: int, resid: str, pending: str | None,
           bits: int, window: int, calibration: dict[str, dict] | None) -> tuple[str, str]:
    """Decoder layer ``i``: its input norm (with the previous layer's residual add), packed QKV, attention,
    output projection, post-attention norm and SiLU-gated MLP.  Returns (residual, output) names."""
    p = f"model.layers.{i}"
    w_in = b.init(f"{p}.input_layernorm.weight", state[f"{p}.input_layernorm.weight"].astype(np.float32))
    if pending is None:
        b.node("SimplifiedLayerNormalization", [resid, w_in], [f"{p}/h"], axis=-1, epsilon=s.eps, stash_type=1)
    else:
        b.node("SkipSimplifiedLayerNormalization", [pending, resid, w_in], [f"{p}/h", "", "", f"{p}/resid_in"],
               domain=MS, epsilon=s.eps)
        resid = f"{p}/resid_in"
    a = f"{p}.self_attn"
    qkv = np.concatenate([state[f"{a}.q_proj.weight"], state[f"{a}.k_proj.weight"], state[f"{a}.v_proj.weight"]])
    mu = (calibration or {}).get
    b.linear(f"{p}/h", qkv, bits, f"{a}.qkv_proj", stats=mu(f"{a}.q_proj"), bias=_qkv_bias(state, a, s))
    b.node("GroupQueryAttention",
           [f"{a}.qkv_proj/out", "", "", f"past_key_values.{i}.key", f"past_key_values.{i}.value", "seqlens_k",
            "total_sequence_length", "cos_cache", "sin_cache", "", "attention_bias"],
           [f"{a}/out", f"present.{i}.key", f"present.{i}.value"], domain=MS,
           num_heads=s.heads, kv_num_heads=s.kv_heads, do_rotary=1, rotary_interleaved=0,
           scale=float(1.0 / np.sqrt(s.head_dim)), local_window_size=int(window))
    b.linear(f"{a}/out", state[f"{a}.o_proj.weight"], bits, f"{a}.o_proj", stats=mu(f"{a}.o_proj"),
             bias=_bias(state, f"{a}.o_proj"))
    w_post = b.init(f"{p}.post_attention_layernorm.weight",
                    state[f"{p}.post_attention_layernorm.weight"].astype(np.float32))
    b.node("SkipSimplifiedLayerNormalization", [f"{a}.o_proj/out", resid, w_post],
           [f"{p}/h2", "", "", f"{p}/resid_mid"], domain=MS, epsilon=s.eps)
    resid = f"{p}/resid_mid"
    m = f"{p}.mlp"
    gate_up = np.concatenate([state[f"{m}.gate_proj.weight"], state[f"{m}.up_proj.weight"]])
    b.linear(f"{p}/h2", gate_up, bits, f"{m}.gate_up_proj", stats=mu(f"{m}.gate_proj"))
    b.node("Split", [f"{m}.gate_up_proj/out", b.init(f"{m}.split", np.array([s.intermediate] * 2, np.int64))],
           [f"{m}/gate", f"{m}/up"], axis=-1)
    b.node("Sigmoid", [f"{m}/gate"], [f"{m}/gate_sig"])
    b.node("Mul", [f"{m}/gate", f"{m}/gate_sig"], [f"{m}/silu"])
    b.node("Mul", [f"{m}/silu", f"{m}/up"], [f"{m}/act"])
    pending = b.linear(f"{m}/act", state[f"{m}.down_proj.weight"], bits, f"{m}.down_proj",
                       stats=mu(f"{m}.down_proj"))
    return resid, pending


def _head(b: GraphBuilder, state: dict[str, np.ndarray], s: Shapes, embed: np.ndarray, resid: str, pending: str,
          head_bits: int, head_level: int | None, calibration: dict[str, dict] | None) -> None:
    """The final norm and the language-model head (a tied fp32 head reads the embedding matrix once)."""
    w_norm = b.init("model.norm.weight", state["model.norm.weight"].astype(np.float32))
    b.node("SkipSimplifiedLayerNormalization", [pending, resid, w_norm], ["final/h", "", "", ""], domain=MS,
           epsilon=s.eps)
    head = state.get("lm_head.weight", state["model.embed_tokens.weight"])
    if head_bits == 32 and np.array_equal(head, embed):
        # tied head at fp32: one copy of the matrix in the file; ONNX Runtime folds the Transpose at load
        b.node("Transpose", ["model.embed_tokens.weight"], ["lm_head.weight_t"], perm=[1, 0])
        b.node("MatMul", ["final/h", "lm_head.weight_t"], ["logits"])
    else:
        b.linear("final/h", head, head_bits, "lm_head", out="logits", level=head_level,
                 stats=(calibration or {}).get("lm_head"))


def _model(b: GraphBuilder, s: Shapes, opset: int):
    """The ModelProto around the builder's nodes: the transformers.js inputs and outputs, the opsets, the props."""
    from onnx import TensorProto, helper

    f = TensorProto.FLOAT
    past_axes = ["batch_size", s.kv_heads, "past_sequence_length", s.head_dim]
    present_axes = ["batch_size", s.kv_heads, "total_sequence_length", s.head_dim]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"]),
              helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch_size", "sequence_length"])]
    outputs = [helper.make_tensor_value_info("logits", f, ["batch_size", "sequence_length", s.vocab])]
    for i in range(s.layers):
        for kv in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_key_values.{i}.{kv}", f, past_axes))
            outputs.append(helper.make_tensor_value_info(f"present.{i}.{kv}", f, present_axes))
    graph = helper.make_graph(b.nodes, "gatehouse-fused-llama", inputs, outputs, b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)],
                              producer_name="gatehouse.fused")
    model.ir_version = 8  # what opset 17 needs; onnx's newest IR is more than onnxruntime-web reads
    helper.set_model_props(model, {"gatehouse.kv": "share", "gatehouse.layout": "fused"})
    return model


def build_graph(state: dict[str, np.ndarray], s: Shapes, bits: int, head_bits: int, block: int = 32,
                accuracy_level: int = 4, opset: int = 17, head_level: int | None = None,
                calibration: dict[str, dict] | None = None, lattice: bool = False, quantizer=None,
                bias_correction: bool | None = None, exact_q8: bool = False):
    """The ONNX ModelProto for one variant; ``state`` maps HF parameter names to float32 arrays.

    ``calibration`` (from :func:`calibrate`) turns on bias correction for every round-to-nearest
    linear; ``lattice`` writes weights that lie on a GGUF lattice exactly: Q4_1 at 4 bits (their own
    codes and scales, zero point 0, plus a block-sum offset term: 4 more nodes per linear) and Q8_0
    at 8 bits (codes + 128, zero point 128)."""
    if bits not in LINEAR_BITS or head_bits not in LINEAR_BITS:
        raise ValueError(f"bits and head_bits must be one of {LINEAR_BITS}, got {bits}, {head_bits}")
    check_weights(state, s)
    windows = s.windows or (-1,) * s.layers
    if len(windows) != s.layers:
        raise ValueError(f"{len(windows)} attention windows for {s.layers} layers")
    b = GraphBuilder(block, accuracy_level, lattice, quantizer=quantizer,
                     bias_correction=calibration is not None if bias_correction is None else bias_correction,
                     exact_q8=exact_q8)
    _call_inputs(b, s)
    embed = state["model.embed_tokens.weight"].astype(np.float32)
    b.node("Gather", [b.init("model.embed_tokens.weight", embed), "input_ids"], ["x0"], axis=0)
    resid, pending = "x0", None
    for i in range(s.layers):
        resid, pending = _layer(b, state, s, i, resid, pending, bits, windows[i], calibration)
    _head(b, state, s, embed, resid, pending, head_bits, head_level, calibration)
    model = _model(b, s, opset)
    ops = op_counts(b.nodes)
    info = {"bits": bits, "head_bits": head_bits, "block_size": block, "accuracy_level": accuracy_level,
            "head_accuracy_level": accuracy_level if head_level is None else head_level,
            "nodes": len(b.nodes), "op_types": ops,
            "quantized_weights": b.errors["weights"], "lattice_weights": b.errors["lattice"],
            "bias_correction": bool(calibration is not None and b.bias_correction),
            "max_abs_weight_error": round(b.errors["max_abs"], 8)}
    return model, info


def op_counts(nodes) -> dict[str, int]:
    """Nodes per op type, sorted by op type (what the export records call ``op_types``)."""
    ops: dict[str, int] = {}
    for n in nodes:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    return dict(sorted(ops.items()))


def load_state(hf_dir: Path) -> tuple[dict[str, np.ndarray], Any]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    state = {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
    return state, model.config


def export(state: dict[str, np.ndarray], cfg, path: Path, bits: int, head_bits: int, block: int,
           accuracy_level: int, opset: int, head_level: int | None = None,
           calibration: dict[str, dict] | None = None, lattice: bool = False) -> dict[str, Any]:
    import onnx

    s = shapes_of(cfg)
    model, info = build_graph(state, s, bits, head_bits, block, accuracy_level, opset, head_level=head_level,
                              calibration=calibration, lattice=lattice)
    path.parent.mkdir(parents=True, exist_ok=True)
    # (onnx.checker does not know ONNX Runtime's SimplifiedLayerNormalization; the session load is the check)
    onnx.save_model(model, str(path))
    info.update({"layers": s.layers, "kv_heads": s.kv_heads, "head_dim": s.head_dim, "vocab_size": s.vocab})
    return info


def calibrate(hf_dir: Path, texts: list[str], max_tokens: int = 2048,
              window: int = 512, second_moment: bool = False) -> dict[str, dict[str, np.ndarray]]:
    """Input statistics of every linear layer over calibration text (PyTorch, fp32): the mean input
    vector, for bias correction; with ``second_moment`` also E[x x^T] (``hessian``, K x K), for the recipes'
    activation-weighted rounding (harness/export/recipes.py)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(hf_dir)
    ids: list[int] = []
    for t in texts:
        ids += tok(t)["input_ids"]
    ids = ids[:max_tokens]
    if not ids:
        raise ValueError("no calibration tokens")
    acc: dict[str, list] = {}
    hooks = []
    for name, mod in model.named_modules():
        if name.endswith(("q_proj", "o_proj", "gate_proj", "down_proj")) or name == "lm_head":
            def hook(m, inp, _out, name=name):
                x = inp[0].reshape(-1, inp[0].shape[-1]).double()
                a = acc.setdefault(name, [0, 0.0, 0.0])
                a[0] += x.shape[0]
                a[1] = a[1] + x.sum(0)
                if second_moment:
                    a[2] = a[2] + x.T @ x
            hooks.append(mod.register_forward_hook(hook))
    with torch.no_grad():
        for i in range(0, len(ids), window):
            model(input_ids=torch.tensor([ids[i:i + window]]), use_cache=False)
    for h in hooks:
        h.remove()
    out = {}
    for name, (n, sx, sxx) in acc.items():
        out[name] = {"mean": (sx / n).numpy(), "tokens": n}
        if second_moment:
            out[name]["hessian"] = (sxx / n).numpy()
    return out
