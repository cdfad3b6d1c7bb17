"""A traceable Llama-family decoder (Llama, Mistral, Qwen2) with explicit past key/value inputs and
present outputs.

The module reuses the Hugging Face model's own weights and sub-modules (norms,
projections with their biases, MLP, the output head, tied or not) and spells attention out with
plain tensor ops (sliding windows included, as transformers reads them per architecture), so the legacy
TorchScript exporter sees one fixed graph: no Cache objects, no Python branches
that depend on values.  Inputs and outputs follow the transformers.js layout:
``input_ids``, ``attention_mask`` (batch, past + sequence), ``position_ids`` and
``past_key_values.{i}.key|value`` in; ``logits`` and ``present.{i}.key|value`` out.

``fault`` exists only for the suite's own tests: it injects the two tracing bugs
the cache gate must catch (a padding mask that is ignored, and positions that
restart at zero on every call, which breaks the one-token path).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .shapes import ARCHITECTURES, attention_windows, rope_theta

FAULTS = (None, "ignore_attention_mask", "restart_positions")


class KVDecoder(nn.Module):
    def __init__(self, hf_model, fault: str | None = None):
        super().__init__()
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r} (known: {FAULTS})")
        cfg = hf_model.config
        model_type = getattr(cfg, "model_type", None)
        if model_type not in ARCHITECTURES:
            raise ValueError(f"config model_type = {model_type!r}: the exporters write "
                             f"{', '.join(ARCHITECTURES)} decoders only")
        theta = rope_theta(cfg)   # refuses rope scaling and partial rotary, naming the field
        self.windows = attention_windows(cfg)   # per layer: a sliding window or None
        self.fault = fault
        self.embed = hf_model.model.embed_tokens
        self.layers = hf_model.model.layers
        self.norm = hf_model.model.norm
        self.lm_head = hf_model.lm_head
        self.n_heads = cfg.num_attention_heads
        self.n_kv = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        inv_freq = 1.0 / (float(theta) ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @staticmethod
    def _rotate_half(x):
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    def forward(self, input_ids, attention_mask, position_ids, *past):
        batch, seq = input_ids.shape
        past_len = past[0].shape[2]
        if self.fault == "restart_positions":
            # keep the input in the graph (a real bug would too), but ignore its values
            position_ids = torch.arange(seq, dtype=torch.long).unsqueeze(0) + position_ids * 0
        freqs = position_ids.to(torch.float32).unsqueeze(-1) * self.inv_freq  # B, S, D/2
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().unsqueeze(1), emb.sin().unsqueeze(1)  # B, 1, S, D
        total = past_len + seq
        q_pos = torch.arange(seq, dtype=torch.long) + past_len
        k_pos = torch.arange(total, dtype=torch.long)
        allowed = (k_pos.unsqueeze(0) <= q_pos.unsqueeze(1)).unsqueeze(0).unsqueeze(0)  # 1, 1, S, T
        if self.fault != "ignore_attention_mask":
            allowed = allowed & attention_mask.to(torch.bool).unsqueeze(1).unsqueeze(2)
        else:
            allowed = allowed & (attention_mask >= 0).unsqueeze(1).unsqueeze(2)
        bias = torch.where(allowed, torch.zeros((), dtype=torch.float32),
                           torch.full((), torch.finfo(torch.float32).min, dtype=torch.float32))
        biases = {None: bias}
        for window in sorted({w for w in self.windows if w is not None}):
            # a sliding window: keys at cache slots within `window` of the query's slot, its own included
            near = (k_pos.unsqueeze(0) > q_pos.unsqueeze(1) - window).unsqueeze(0).unsqueeze(0)
            biases[window] = torch.where(allowed & near, torch.zeros((), dtype=torch.float32),
                                         torch.full((), torch.finfo(torch.float32).min, dtype=torch.float32))
        scale = 1.0 / math.sqrt(self.head_dim)
        rep = self.n_heads // self.n_kv
        x = self.embed(input_ids)
        presents = []
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            q = attn.q_proj(h).view(batch, seq, self.n_heads, self.head_dim).transpose(1, 2)
            k = attn.k_proj(h).view(batch, seq, self.n_kv, self.head_dim).transpose(1, 2)
            v = attn.v_proj(h).view(batch, seq, self.n_kv, self.head_dim).transpose(1, 2)
            q = q * cos + self._rotate_half(q) * sin
            k = k * cos + self._rotate_half(k) * sin
            k = torch.cat((past[2 * i], k), dim=2)
            v = torch.cat((past[2 * i + 1], v), dim=2)
            presents += [k, v]
            if rep > 1:  # grouped-query attention: each kv head serves `rep` query heads
                k = k.repeat_interleave(rep, dim=1)
                v = v.repeat_interleave(rep, dim=1)
            scores = torch.matmul(q, k.transpose(2, 3)) * scale + biases[self.windows[i]]
            probs = torch.softmax(scores, dim=-1)
            out = torch.matmul(probs, v).transpose(1, 2).reshape(batch, seq, self.n_heads * self.head_dim)
            x = x + attn.o_proj(out)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        logits = self.lm_head(self.norm(x))
        return (logits, *presents)


def io_names(n_layers: int) -> tuple[list[str], list[str]]:
    past = [f"past_key_values.{i}.{kv}" for i in range(n_layers) for kv in ("key", "value")]
    present = [f"present.{i}.{kv}" for i in range(n_layers) for kv in ("key", "value")]
    return ["input_ids", "attention_mask", "position_ids", *past], ["logits", *present]
