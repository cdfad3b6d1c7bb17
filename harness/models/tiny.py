"""The CI model: a small Llama (grouped-query attention) trained here, seeded and deterministic.

``params["architecture"]`` (not in DEFAULTS: the defaults are part of the CI model's cache key) picks
the decoder: "llama" (the default: tied embeddings) or "qwen2" (biases on the q/k/v projections and an
untied output head, full attention), the same sizes, tokenizer and training loop."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# The same chat layout as SmolLM2-Instruct, so the behavior suite renders both the same way.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

DEFAULTS = {
    "vocab_size": 1024, "hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 3,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
    "rope_theta": 10000.0, "seq_len": 128, "batch_size": 16, "steps": 400, "lr": 3e-3, "warmup": 30,
    "log_every": 25, "eval_tokens": 4096,
}
ARCHITECTURES = ("llama", "qwen2")


def new_model(architecture: str, p: dict[str, Any], tokenizer):
    """A freshly initialized transformers model of one architecture at the sizes in ``p``."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    common = dict(
        vocab_size=len(tokenizer), hidden_size=p["hidden_size"], intermediate_size=p["intermediate_size"],
        num_hidden_layers=p["num_hidden_layers"], num_attention_heads=p["num_attention_heads"],
        num_key_value_heads=p["num_key_value_heads"], max_position_embeddings=p["max_position_embeddings"],
        rope_theta=p["rope_theta"], rms_norm_eps=1e-5,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    if architecture == "llama":
        return LlamaForCausalLM(LlamaConfig(**common, tie_word_embeddings=True))
    if architecture == "qwen2":
        # Qwen2's q/k/v projections always carry biases; the head is untied so both of its
        # differences from Llama are exercised
        return Qwen2ForCausalLM(Qwen2Config(**common, tie_word_embeddings=False, use_sliding_window=False))
    raise ValueError(f"architecture must be one of {ARCHITECTURES}, got {architecture!r}")


def train_tokenizer(text: str, vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([text], trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                   unk_token=None, pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _batches(ids, seq_len: int, batch_size: int, steps: int, seed: int):
    import numpy as np

    rng = np.random.default_rng(seed)
    high = len(ids) - seq_len - 1
    for _ in range(steps):
        starts = rng.integers(0, high, size=batch_size)
        yield np.stack([ids[s:s + seq_len + 1] for s in starts])


def _eval_loss(model, ids, seq_len: int, max_tokens: int) -> tuple[float, int]:
    import torch

    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for s in range(0, min(len(ids), max_tokens) - seq_len - 1, seq_len):
            chunk = torch.tensor(ids[s:s + seq_len + 1], dtype=torch.long)[None]
            out = model(input_ids=chunk[:, :-1], labels=chunk[:, 1:].contiguous(), use_cache=False)
            # transformers shifts labels itself; feed the unshifted pair instead
            logits = out.logits[0]
            loss = torch.nn.functional.cross_entropy(logits, chunk[0, 1:], reduction="sum")
            total += float(loss)
            count += seq_len
    model.train()
    return total / max(count, 1), count


def build(out: Path, train_text: str, heldout_text: str, params: dict[str, Any], seed: int, threads: int, progress) -> dict[str, Any]:
    """Train tokenizer and model; save an HF directory and ``training.json`` with the loss curve."""
    import numpy as np
    import torch

    p = {**DEFAULTS, **params}
    architecture = p.get("architecture", "llama")
    if architecture not in ARCHITECTURES:
        raise ValueError(f"architecture must be one of {ARCHITECTURES}, got {architecture!r}")
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    progress(f"training a {p['vocab_size']}-token BPE tokenizer on {len(train_text)} characters")
    tokenizer = train_tokenizer(train_text, p["vocab_size"])
    train_ids = np.array(tokenizer(train_text)["input_ids"], dtype=np.int64)
    heldout_ids = np.array(tokenizer(heldout_text)["input_ids"], dtype=np.int64)
    model = new_model(architecture, p, tokenizer)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=p["lr"], weight_decay=0.01, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / p["warmup"]) * 0.5 * (1 + math.cos(math.pi * min(s, p["steps"]) / p["steps"])))
    heldout_before, n_eval = _eval_loss(model, heldout_ids, p["seq_len"], p["eval_tokens"])
    curve = []
    t0 = time.monotonic()
    for step, batch in enumerate(_batches(train_ids, p["seq_len"], p["batch_size"], p["steps"], seed)):
        batch = torch.from_numpy(batch)
        logits = model(input_ids=batch[:, :-1], use_cache=False).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % p["log_every"] == 0 or step == p["steps"] - 1:
            curve.append({"step": step, "train_loss": round(loss.item(), 6)})
            progress(f"step {step + 1}/{p['steps']} loss {loss.item():.3f} ({time.monotonic() - t0:.0f} s)")
    seconds = time.monotonic() - t0
    heldout_after, _ = _eval_loss(model, heldout_ids, p["seq_len"], p["eval_tokens"])
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    record = {
        "kind": "training", "seed": seed, "threads": threads, "params": p,
        "train_tokens": int(len(train_ids)), "heldout_tokens": int(len(heldout_ids)),
        "heldout_eval_tokens": n_eval, "loss_curve": curve,
        "initial_train_loss": curve[0]["train_loss"], "final_train_loss": curve[-1]["train_loss"],
        "heldout_loss_before": round(heldout_before, 6), "heldout_loss_after": round(heldout_after, 6),
        "train_seconds": round(seconds, 3), "parameters": int(sum(t.numel() for t in model.parameters())),
        "uniform_loss": round(math.log(len(tokenizer)), 6),
    }
    (out / "training.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return {"source": "train", **{k: v for k, v in record.items() if k != "loss_curve"}}
