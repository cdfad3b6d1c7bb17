"""The architectures Gatehouse's exporter writes, checked on a ``config.json`` before anything is built."""

from __future__ import annotations

from typing import Any

# model_type -> what it covers. The exporter (harness/export/) writes RMSNorm, rotary, grouped-query
# attention and a SwiGLU MLP; Qwen2 adds biases on q/k/v and an untied output head.
SUPPORTED = {
    "llama": "the Llama family (Llama, SmolLM, TinyLlama)",
    "mistral": "Mistral-style grouped-query attention",
    "qwen2": "Qwen2 (biases on q/k/v, untied output head)",
}
# GGUF's general.architecture names for the same
GGUF_ARCHITECTURES = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2"}


def problems(config: dict[str, Any]) -> list[str]:
    """What in ``config`` (a parsed config.json) the exporter cannot write, each naming the field and value."""
    out = []
    model_type = config.get("model_type")
    if model_type not in SUPPORTED:
        archs = config.get("architectures")
        out.append(f"model_type {model_type!r} (architectures {archs!r}) is not supported; supported: "
                   + "; ".join(f"{k} ({v})" for k, v in SUPPORTED.items()))
        return out
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"):
        v = config.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            out.append(f"{key} is {v!r}; expected a positive integer")
    rope = config.get("rope_scaling") or config.get("rope_parameters") or {}
    rope_type = rope.get("rope_type", rope.get("type")) if isinstance(rope, dict) else rope
    if rope_type not in (None, "default"):
        out.append(f"rope scaling type {rope_type!r} is not supported (only plain rotary)")
    if config.get("mlp_bias"):
        out.append("mlp_bias is true; the exporter writes MLPs without biases")
    act = config.get("hidden_act", "silu")
    if act not in ("silu", "swish"):
        out.append(f"hidden_act {act!r} is not supported (only silu)")
    return out
