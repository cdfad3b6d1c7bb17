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
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

MS = "com.microsoft"
LINEAR_BITS = (32, 8, 4)   # 32: fp32 MatMul
ARCHITECTURES = ("llama", "mistral", "qwen2")   # config model_type values this builder writes


@dataclass(frozen=True)
class Shapes:
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    eps: float
    theta: float
    max_positions: int
    # per layer: GroupQueryAttention's local_window_size, -1 for full causal attention (every layer of
    # a Llama; Mistral's and Qwen2's sliding-window layers attend to their last sliding_window keys)
    windows: tuple[int, ...] = ()


def _refuse(field: str, value, why: str):
    raise ValueError(f"config {field} = {value!r}: {why}")


def rope_theta(cfg) -> float:
    """The rotary base; refuses every rotary variant but the default one, naming the field."""
    for field in ("rope_parameters", "rope_scaling"):
        rope = getattr(cfg, field, None) or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type not in ("default", None):
            _refuse(f"{field}.rope_type", rope_type, "only the default rotary embedding is supported")
        if float(rope.get("partial_rotary_factor", 1.0)) != 1.0:
            _refuse(f"{field}.partial_rotary_factor", rope["partial_rotary_factor"], "partial rotary is not supported")
    if float(getattr(cfg, "partial_rotary_factor", None) or 1.0) != 1.0:
        _refuse("partial_rotary_factor", cfg.partial_rotary_factor, "partial rotary is not supported")
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    return float(rope.get("rope_theta") or getattr(cfg, "rope_theta", None) or 10000.0)


def attention_windows(cfg) -> tuple[int | None, ...]:
    """Per layer: the sliding window (attend to the last ``sliding_window`` keys, the query's own
    included, as transformers' sliding-window mask does) or None for full causal attention, the way
    transformers reads the config of each architecture:

    * Mistral slides on every layer when ``sliding_window`` is set (``layer_types`` is ignored);
    * Qwen2 on the layers its ``layer_types`` call "sliding_attention" (the config sets
      ``sliding_window`` to None unless ``use_sliding_window``);
    * Llama never slides (a ``sliding_window`` field in a Llama config is ignored).

    A window that is not smaller than ``max_position_embeddings`` never masks a position the rotary
    table covers: None."""
    layers = cfg.num_hidden_layers
    model_type = getattr(cfg, "model_type", None)
    window = getattr(cfg, "sliding_window", None)
    if model_type == "llama" or window is None:
        return (None,) * layers
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        _refuse("sliding_window", window, "a sliding window must be a positive integer")
    types = ["sliding_attention"] * layers
    if model_type == "qwen2":
        types = list(getattr(cfg, "layer_types", None) or types)
        if len(types) != layers:
            _refuse("layer_types", types, f"{len(types)} entries for {layers} layers")
        for t in types:
            if t not in ("full_attention", "sliding_attention"):
                _refuse("layer_types", t, "only full_attention and sliding_attention layers are supported")
    if window >= int(cfg.max_position_embeddings):
        return (None,) * layers
    return tuple(window if t == "sliding_attention" else None for t in types)


def shapes_of(cfg) -> Shapes:
    model_type = getattr(cfg, "model_type", None)
    if model_type not in ARCHITECTURES:
        _refuse("model_type", model_type, f"the exporters write {', '.join(ARCHITECTURES)} decoders only")
    theta = rope_theta(cfg)
    if getattr(cfg, "mlp_bias", False):
        _refuse("mlp_bias", cfg.mlp_bias, "MLP biases are not supported by the fused exporter")
    act = getattr(cfg, "hidden_act", "silu")
    if act not in ("silu", "swish"):   # transformers' "swish" is SiLU
        _refuse("hidden_act", act, "the fused exporter writes SiLU-gated MLPs only")
    heads = cfg.num_attention_heads
    # GroupQueryAttention's local_window_size is the number of keys a query sees, its own included:
    # transformers' sliding_window itself (measured against PyTorch, prefill and one-token steps)
    windows = tuple(-1 if w is None else w for w in attention_windows(cfg))
    return Shapes(layers=cfg.num_hidden_layers, hidden=cfg.hidden_size, intermediate=cfg.intermediate_size,
                  heads=heads, kv_heads=getattr(cfg, "num_key_value_heads", None) or heads,
                  head_dim=getattr(cfg, "head_dim", None) or cfg.hidden_size // heads, vocab=cfg.vocab_size,
                  eps=float(cfg.rms_norm_eps), theta=theta, max_positions=int(cfg.max_position_embeddings),
                  windows=windows)


def quantize_blocks(w: np.ndarray, bits: int, block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Asymmetric round-to-nearest block quantization of ``w`` (N, K) along K.

    Returns (codes (N, K) uint8, scales (N, K/block) float32, zero points (N, K/block) uint8) with
    ``w ~= (codes - zero) * scale``; the block's range always includes 0, so the zero point is exact.
    """
    n, k = w.shape
    if k % block:
        raise ValueError(f"K={k} is not a multiple of the block size {block}")
    levels = (1 << bits) - 1
    b = w.reshape(n, k // block, block).astype(np.float64)
    lo = np.minimum(b.min(axis=2), 0.0)
    hi = np.maximum(b.max(axis=2), 0.0)
    scale = (hi - lo) / levels
    scale = np.where(scale == 0, 1.0, scale)
    zero = np.clip(np.rint(-lo / scale), 0, levels)
    codes = np.clip(np.rint(b / scale[..., None] + zero[..., None]), 0, levels)
    return (codes.reshape(n, k).astype(np.uint8), scale.astype(np.float32), zero.astype(np.uint8))


def q8_0_lattice(w: np.ndarray, block: int, tol: float = 1e-3):
    """8-bit codes for weights that are a dequantized GGUF Q8_0 (``d * q``, integer |q| <= 127 per block
    of 32, the block's largest |w| at |q| = 127): codes q + 128, zero point 128, scale d, exact. None
    when any block is not on such a lattice."""
    n, k = w.shape
    if k % block:
        return None
    b = w.reshape(n, k // block, block).astype(np.float64)
    amax = np.abs(b).max(axis=2)
    d = np.where(amax > 0, amax / 127.0, 1.0)
    q = b / d[..., None]
    r = np.rint(q)
    if np.abs(q - r).max() > tol:
        return None
    return ((r + 128).reshape(n, k).astype(np.uint8), d.astype(np.float32), np.full(d.shape, 128, np.uint8))


def dequantize_blocks(codes: np.ndarray, scale: np.ndarray, zero: np.ndarray, block: int) -> np.ndarray:
    n, k = codes.shape
    c = codes.reshape(n, k // block, block).astype(np.float32)
    return ((c - zero[..., None].astype(np.float32)) * scale[..., None]).reshape(n, k)


def pack_matmul_nbits(codes: np.ndarray, scale: np.ndarray, zero: np.ndarray, bits: int, block: int):
    """MatMulNBits' B (N, K/block, block*bits/8), scales (N*K/block,) and zero points."""
    n, k = codes.shape
    nb = k // block
    c = codes.reshape(n, nb, block)
    if bits == 8:
        return c.copy(), scale.reshape(-1), zero.reshape(-1)
    if bits != 4:
        raise ValueError(f"bits must be 4 or 8, got {bits}")
    packed = (c[..., 0::2] | (c[..., 1::2] << 4)).astype(np.uint8)
    z = zero if nb % 2 == 0 else np.concatenate([zero, np.zeros((n, 1), np.uint8)], axis=1)
    zp = (z[:, 0::2] | (z[:, 1::2] << 4)).astype(np.uint8)
    return packed, scale.reshape(-1), zp.reshape(-1)


class _Builder:
    def __init__(self, block: int, accuracy_level: int, lattice: bool = False, quantizer=None,
                 bias_correction: bool = True, exact_q8: bool = False):
        from onnx import helper, numpy_helper

        self.h, self.nh = helper, numpy_helper
        self.block, self.accuracy_level = block, accuracy_level
        self.nodes: list = []
        self.inits: list = []
        self.errors = {"max_abs": 0.0, "weights": 0, "lattice": 0}
        self.lattice = lattice
        # quantizer(name, w, bits, stats) -> (codes, scale, zero) for a weight on no exact lattice (a recipe's
        # rounding, harness/export/recipes.py); None: round to nearest (quantize_blocks)
        self.quantizer = quantizer
        self.bias_correction = bias_correction   # add (W - Wq) @ E[x] back when the linear has calibration stats
        self.exact_q8 = exact_q8                 # write Q8_0-lattice weights exactly at 8 bits even without lattice

    def init(self, name: str, array: np.ndarray) -> str:
        self.inits.append(self.nh.from_array(np.ascontiguousarray(array), name))
        return name

    def node(self, op: str, inputs: list[str], outputs: list[str], domain: str = "", **attrs) -> list[str]:
        self.nodes.append(self.h.make_node(op, inputs, outputs, name=f"{op}_{len(self.nodes)}", domain=domain, **attrs))
        return outputs

    def _exact_lattice(self, x: str, w: np.ndarray, name: str, out: str, level: int | None,
                       bias: np.ndarray | None = None) -> bool:
        """A GGUF Q4_1 block exactly: MatMulNBits(x; q, d, zp=0) + blocksum(x) @ M (M: the offsets)."""
        from . import lattice

        rec = lattice.recover(w, self.block)
        if rec is None:
            return False
        q, d, m = rec
        n, k = w.shape
        nb = k // self.block
        packed, sc, zp = pack_matmul_nbits(q.reshape(n, k), d, np.zeros((n, nb), np.uint8), 4, self.block)
        self.errors["lattice"] += 1
        self.errors["weights"] += 1
        extra = [] if bias is None else ["", self.init(f"{name}.bias", bias.astype(np.float32))]  # (g_idx), bias
        self.node("MatMulNBits", [x, self.init(f"{name}.qweight", packed), self.init(f"{name}.scales", sc),
                                  self.init(f"{name}.zero_points", zp), *extra], [f"{name}/main"], domain=MS,
                  K=k, N=n, bits=4, block_size=self.block,
                  accuracy_level=self.accuracy_level if level is None else level)
        shape = self.init(f"{name}.blocks", np.array([0, 0, nb, self.block], np.int64))
        self.node("Reshape", [x, shape], [f"{name}/xb"])
        self.node("ReduceSum", [f"{name}/xb", self.init(f"{name}.axis", np.array([-1], np.int64))],
                  [f"{name}/bsum"], keepdims=0)
        self.node("MatMul", [f"{name}/bsum", self.init(f"{name}.offsets", np.ascontiguousarray(m.T))],
                  [f"{name}/offset"])
        self.node("Add", [f"{name}/main", f"{name}/offset"], [out])
        return True

    def linear(self, x: str, w: np.ndarray, bits: int, name: str, out: str | None = None,
               level: int | None = None, stats: dict[str, np.ndarray] | None = None,
               bias: np.ndarray | None = None) -> str:
        """y = x @ w.T (+ bias) for a torch-layout weight ``w`` (N, K) and an optional bias (N,).

        The bias is an Add after the fp32 MatMul, MatMulNBits' own bias input otherwise (summed with
        the bias correction when both apply); without one the nodes are those of a bias-free linear."""
        out = out or f"{name}/out"
        n, k = w.shape
        if bias is not None and bias.shape != (n,):
            raise ValueError(f"{name}: bias of shape {bias.shape} for a weight of shape {w.shape}")
        if bits == 32:
            if bias is None:
                self.node("MatMul", [x, self.init(f"{name}.weight", w.T.astype(np.float32))], [out])
            else:
                self.node("MatMul", [x, self.init(f"{name}.weight", w.T.astype(np.float32))], [f"{name}/matmul"])
                self.node("Add", [f"{name}/matmul", self.init(f"{name}.bias", bias.astype(np.float32))], [out])
            return out
        if bits == 4 and self.lattice:
            done = self._exact_lattice(x, w, name, out, level, bias=bias)
            if done:
                return out
        exact = q8_0_lattice(w, self.block) if bits == 8 and (self.lattice or self.exact_q8) else None
        if exact is not None:
            codes, scale, zero = exact
        elif self.quantizer is not None:
            codes, scale, zero = self.quantizer(name, w, bits, stats)
        else:
            codes, scale, zero = quantize_blocks(w, bits, self.block)
        self.errors["lattice"] += exact is not None
        deq = dequantize_blocks(codes, scale, zero, self.block)
        self.errors["max_abs"] = max(self.errors["max_abs"], float(np.abs(deq - w).max()))
        self.errors["weights"] += 1
        packed, s, z = pack_matmul_nbits(codes, scale, zero, bits, self.block)
        extra = []
        # (the fixed q4/q8 graphs add a zero correction to exact Q8_0 weights too: kept, their bytes are pinned)
        if stats is not None and self.bias_correction and (exact is None or not self.exact_q8):
            # bias correction: the rounding's mean effect on the output, (W - Wq) @ E[x], added back
            correction = (w.astype(np.float64) - deq) @ stats["mean"].astype(np.float64)
            if bias is None:
                extra = ["", self.init(f"{name}.bias_correction", correction.astype(np.float32))]  # (g_idx), bias
            else:  # the layer's own bias plus the correction, one input
                extra = ["", self.init(f"{name}.bias", (bias.astype(np.float64) + correction).astype(np.float32))]
        elif bias is not None:
            extra = ["", self.init(f"{name}.bias", bias.astype(np.float32))]
        self.node("MatMulNBits", [x, self.init(f"{name}.qweight", packed), self.init(f"{name}.scales", s),
                                  self.init(f"{name}.zero_points", z), *extra], [out], domain=MS,
                  K=k, N=n, bits=bits, block_size=self.block,
                  accuracy_level=self.accuracy_level if level is None else level)
        return out


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


def build_graph(state: dict[str, np.ndarray], s: Shapes, bits: int, head_bits: int, block: int = 32,
                accuracy_level: int = 4, opset: int = 17, head_level: int | None = None,
                calibration: dict[str, dict] | None = None, lattice: bool = False, quantizer=None,
                bias_correction: bool | None = None, exact_q8: bool = False):
    """The ONNX ModelProto for one variant; ``state`` maps HF parameter names to float32 arrays.

    ``calibration`` (from :func:`calibrate`) turns on bias correction for every round-to-nearest
    linear; ``lattice`` writes weights that lie on a GGUF lattice exactly: Q4_1 at 4 bits (their own
    codes and scales, zero point 0, plus a block-sum offset term: 4 more nodes per linear) and Q8_0
    at 8 bits (codes + 128, zero point 128)."""
    from onnx import TensorProto, helper

    if bits not in LINEAR_BITS or head_bits not in LINEAR_BITS:
        raise ValueError(f"bits and head_bits must be one of {LINEAR_BITS}, got {bits}, {head_bits}")
    check_weights(state, s)
    windows = s.windows or (-1,) * s.layers
    if len(windows) != s.layers:
        raise ValueError(f"{len(windows)} attention windows for {s.layers} layers")
    b = _Builder(block, accuracy_level, lattice, quantizer=quantizer,
                 bias_correction=calibration is not None if bias_correction is None else bias_correction,
                 exact_q8=exact_q8)
    L = s.layers
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

    embed = state["model.embed_tokens.weight"].astype(np.float32)
    b.node("Gather", [b.init("model.embed_tokens.weight", embed), "input_ids"], ["x0"], axis=0)
    resid, pending = "x0", None
    for i in range(L):
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
               scale=float(1.0 / np.sqrt(s.head_dim)), local_window_size=int(windows[i]))
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

    f = TensorProto.FLOAT
    past_axes = ["batch_size", s.kv_heads, "past_sequence_length", s.head_dim]
    present_axes = ["batch_size", s.kv_heads, "total_sequence_length", s.head_dim]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"]),
              helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch_size", "sequence_length"])]
    outputs = [helper.make_tensor_value_info("logits", f, ["batch_size", "sequence_length", s.vocab])]
    for i in range(L):
        for kv in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_key_values.{i}.{kv}", f, past_axes))
            outputs.append(helper.make_tensor_value_info(f"present.{i}.{kv}", f, present_axes))
    graph = helper.make_graph(b.nodes, "gatehouse-fused-llama", inputs, outputs, b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)],
                              producer_name="gatehouse.fused")
    model.ir_version = 8  # what opset 17 needs; onnx's newest IR is more than onnxruntime-web reads
    helper.set_model_props(model, {"gatehouse.kv": "share", "gatehouse.layout": "fused"})
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
