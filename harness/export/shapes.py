"""A decoder's Hugging Face config read as the shapes the exporters write (:class:`Shapes`), refusing, by
field, what they do not support: architectures other than Llama, Mistral and Qwen2, rotary variants but the
default, partial rotary, MLP biases, activations other than SiLU; per layer the sliding attention window
as transformers reads it for each architecture."""

from __future__ import annotations

from dataclasses import dataclass

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
