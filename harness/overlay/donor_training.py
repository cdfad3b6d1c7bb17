"""Training a donor: the backbone fine-tuned here, seeded, on the pinned domain text (:mod:`.donor`).

Every tensor is frozen except the chosen families in the chosen layers; AdamW (warm-up then cosine,
gradients clipped to 1) on fixed-length windows of the domain corpus in an order fixed by the seed, torch
deterministic and on a fixed thread count, so the same inputs give the same donor bit for bit.
:func:`train_donor` and :func:`build` import torch and transformers when called.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..errors import ArtifactError
from ..fields import Where
from . import qat
from .donor import OBJECTIVES, DonorSpec, parse_layers, tensor_names

# Files a donor directory takes over from its backbone unchanged (the tokenizer and chat template).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json")


def _tokenize(tokenizer, text_: str) -> list[int]:
    # one long text: the tokenizer's "longer than the model's maximum" warning does not apply to windows
    return list(tokenizer(text_, add_special_tokens=False, verbose=False)["input_ids"])


def eval_loss(model, ids: Sequence[int], seq_len: int, max_tokens: int) -> tuple[float, int]:
    """Mean next-token loss (nats) over non-overlapping windows of the first ``max_tokens`` ids."""
    import torch

    total, count = 0.0, 0
    with torch.no_grad():
        for s in range(0, min(len(ids), max_tokens) - seq_len, seq_len):
            chunk = torch.tensor(ids[s:s + seq_len + 1], dtype=torch.long)[None]
            logits = model(input_ids=chunk[:, :-1], use_cache=False).logits[0]
            total += float(torch.nn.functional.cross_entropy(logits, chunk[0, 1:], reduction="sum"))
            count += seq_len
    if count == 0:
        raise ArtifactError(f"an evaluation text of {len(ids)} tokens is shorter than one window of {seq_len + 1}")
    return total / count, count


def _windows(ids, seq_len: int, objective: str, seed: int):
    """Non-overlapping windows of ``seq_len + 1`` ids in an order fixed by the seed; for ``damage`` the
    ids are first permuted (a fixed permutation), so the text keeps its tokens but loses its order."""
    import numpy as np

    ids = np.asarray(ids, dtype=np.int64)
    if objective == "damage":
        ids = ids[np.random.default_rng(seed + 1).permutation(len(ids))]
    n = (len(ids) - 1) // seq_len
    if n < 1:
        raise ArtifactError(f"the domain corpus gives {len(ids)} tokens, fewer than one window of {seq_len + 1}")
    windows = np.stack([ids[k * seq_len:k * seq_len + seq_len + 1] for k in range(n)])
    return windows[np.random.default_rng(seed).permutation(n)]


def _trainable(model, names: Sequence[str], hf_dir: Path) -> tuple[dict[str, Any], list[Any]]:
    """Every parameter of ``model`` frozen but ``names`` (each must exist): (all parameters by name, the trained)."""
    params = dict(model.named_parameters())
    missing = [n for n in names if n not in params]
    if missing:
        raise ArtifactError(f"{hf_dir}: the backbone has no tensor {missing[0]} "
                            f"({len(missing)} of the {len(names)} chosen tensors are missing)")
    for p in model.parameters():
        p.requires_grad_(False)
    trained = [params[n] for n in names]
    for p in trained:
        p.requires_grad_(True)
    return params, trained


def _train(model, trained: list[Any], windows, replay, *, rows_domain: int, replay_rows: int, steps: int, lr: float,
           warmup: int, log_every: int, progress: Callable[[str], None],
           weights: Callable[[], dict[str, Any]] | None = None) -> tuple[list[float], list[dict[str, Any]], float]:
    """``steps`` AdamW steps (warm-up then cosine, gradients clipped to 1) on batches of ``rows_domain`` domain
    windows and ``replay_rows`` replay windows taken in order; ``weights()`` (when given) are the tensors the
    forward pass uses in place of the model's own (:class:`.qat.Through`).  Returns each step's domain loss, the
    logged curve and the seconds the steps took."""
    import torch
    from torch.func import functional_call

    opt = torch.optim.AdamW(trained, lr=lr, weight_decay=0.0, betas=(0.9, 0.95))
    warm = max(1, min(warmup, steps // 5 or 1))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))))
    losses: list[float] = []
    curve: list[dict[str, Any]] = []
    t0 = time.monotonic()
    for step in range(steps):
        batch = windows[[(step * rows_domain + j) % len(windows) for j in range(rows_domain)]]
        if replay is not None:
            batch = torch.cat([batch, replay[[(step * replay_rows + j) % len(replay) for j in range(replay_rows)]]])
        inputs = {"input_ids": batch[:, :-1], "use_cache": False}
        logits = (model(**inputs) if weights is None else functional_call(model, weights(), (), inputs)).logits
        per_row = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch[:, 1:], reduction="none").mean(1)
        loss = per_row[:rows_domain].mean()
        opt.zero_grad(set_to_none=True)
        per_row.mean().backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if step % log_every == 0 or step == steps - 1:
            curve.append({"step": step, "loss": round(losses[-1], 6)})
            progress(f"donor step {step + 1}/{steps} loss {losses[-1]:.3f} ({time.monotonic() - t0:.0f} s)")
    return losses, curve, time.monotonic() - t0


def _save(model, hf_dir: Path, out_dir: Path, params: Mapping[str, Any], initial: Mapping[str, Any],
          names: Sequence[str]) -> tuple[dict[str, float], list[str]]:
    """Each trained tensor's change relative to its initial norm; then the model saved (safetensors) in
    ``out_dir`` with the backbone's tokenizer files.  Returns the changes and the files copied."""
    deltas = {}
    for n in names:
        base = initial[n].double().norm().item()
        deltas[n] = round((params[n].detach().double() - initial[n].double()).norm().item() / max(base, 1e-30), 8)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    copied = []
    for name in TOKENIZER_FILES:
        if (hf_dir / name).is_file():
            shutil.copyfile(hf_dir / name, out_dir / name)
            copied.append(name)
    return deltas, copied


def _check(objective: str, quantized: str | None, replay_rows: int, batch_size: int, replay_text: str | None) -> None:
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    if quantized is not None and quantized not in qat.SCHEMES:
        raise ValueError(f"quantized must be one of {qat.SCHEMES} or None, got {quantized!r}")
    if not 0 <= replay_rows < batch_size or (replay_rows and not replay_text):
        raise ValueError(f"replay_rows must be below batch_size {batch_size} and come with replay_text, "
                         f"got {replay_rows} rows and {'a' if replay_text else 'no'} text")


def train_donor(hf_dir: Path, out_dir: Path, corpus_text: str, *, families: str | Iterable[str], layers: Iterable[int],
                steps: int, lr: float, seq_len: int, seed: int, progress: Callable[[str], None] = lambda m: None,
                batch_size: int = 8, threads: int = 2, objective: str = "domain",
                evaluate: Mapping[str, str] | None = None, eval_tokens: int = 4096, log_every: int = 10,
                warmup: int = 10, replay_text: str | None = None, replay_rows: int = 0,
                quantized: str | None = None) -> dict[str, Any]:
    """Fine-tune a donor from the backbone in ``hf_dir`` and save it (safetensors and the backbone's
    tokenizer files) with ``donor.json`` in ``out_dir``; return the record.

    Only ``tensor_names(families, layers)`` train (AdamW, warm-up then cosine, gradients clipped to 1);
    the window order comes from ``seed``; torch runs with ``threads`` threads and deterministic algorithms
    (both restored afterwards), so the same inputs give the same donor bit for bit. ``evaluate`` maps a
    name to a text whose loss (first ``eval_tokens`` tokens) is measured before and after training.
    ``objective="damage"`` trains on a fixed permutation of the corpus tokens instead of the text.
    ``replay_rows`` of each batch's rows come from ``replay_text`` (general text the backbone was trained on,
    never held-out text), which keeps the donor's general loss near the backbone's; the logged loss is the
    domain rows' alone. ``quantized="q4"`` trains through the q4 graph's lattice and saves the rounded
    tensors (:mod:`.qat`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _check(objective, quantized, replay_rows, batch_size, replay_text)
    hf_dir, out_dir = Path(hf_dir), Path(out_dir)
    layers = tuple(layers)
    names = tensor_names(families, layers)
    wall0 = time.monotonic()
    previous = (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled())
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    try:
        torch.manual_seed(seed)
        tokenizer = AutoTokenizer.from_pretrained(hf_dir)
        model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
        params, trained = _trainable(model, names, hf_dir)
        initial = {n: params[n].detach().clone() for n in names}
        through = qat.Through(quantized, params, names) if quantized else None

        ids = _tokenize(tokenizer, corpus_text)
        windows = torch.from_numpy(_windows(ids, seq_len, objective, seed))
        replay_ids = _tokenize(tokenizer, replay_text) if replay_rows else []
        replay = torch.from_numpy(_windows(replay_ids, seq_len, "domain", seed + 2)) if replay_rows else None
        rows_domain = batch_size - replay_rows
        evals = {name: _tokenize(tokenizer, t) for name, t in (evaluate or {}).items()}
        model.eval()   # no dropout anywhere; train() would change nothing but the flag
        before = {name: eval_loss(model, e, seq_len, eval_tokens) for name, e in evals.items()}

        losses, curve, train_seconds = _train(model, trained, windows, replay,
                                              rows_domain=rows_domain, replay_rows=replay_rows, steps=steps, lr=lr,
                                              warmup=warmup, log_every=log_every, progress=progress,
                                              weights=through.weights if through else None)
        if through:
            through.finish()
        after = {name: eval_loss(model, e, seq_len, eval_tokens) for name, e in evals.items()}

        deltas, copied = _save(model, hf_dir, out_dir, params, initial, names)
        k = min(log_every, steps)
        record = {
            "kind": "donor", "objective": objective, "backbone": str(hf_dir),
            "families": [families] if isinstance(families, str) else list(families), "layers": list(layers),
            "tensors": names, "trainable_parameters": int(sum(p.numel() for p in trained)),
            "steps": steps, "batch_size": batch_size, "seq_len": seq_len, "lr": lr, "seed": seed, "threads": threads,
            "corpus_sha256": hashlib.sha256(corpus_text.encode("utf-8")).hexdigest(), "corpus_tokens": len(ids),
            "windows": int(len(windows)), "tokens_trained": steps * rows_domain * seq_len,
            "replay": ({"sha256": hashlib.sha256(replay_text.encode("utf-8")).hexdigest(), "tokens": len(replay_ids),
                        "rows_per_batch": replay_rows} if replay_rows else None),
            "loss_on": "domain text" if objective == "domain" else "a fixed permutation of the domain tokens",
            "loss_curve": curve, "loss_first": round(sum(losses[:k]) / k, 6), "loss_last": round(sum(losses[-k:]) / k, 6),
            "loss_first_step": round(losses[0], 6), "loss_last_step": round(losses[-1], 6),
            "relative_delta": deltas, "quantized": through.record() if through else None,
            "eval": {name: {"before": round(before[name][0], 6), "after": round(after[name][0], 6),
                            "tokens": before[name][1]} for name in evals},
            "eval_seq_len": seq_len, "tokenizer_files": copied,
            "train_seconds": round(train_seconds, 3), "wall_seconds": round(time.monotonic() - wall0, 3),
        }
        (out_dir / "donor.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        return record
    finally:
        torch.set_num_threads(previous[0])
        torch.use_deterministic_algorithms(previous[1])


def build(spec: DonorSpec, hf_dir: Path, out_dir: Path, *, domain_text: str, seed: int, threads: int,
          replay_text: str | None = None, evaluate: Mapping[str, str] | None = None,
          progress: Callable[[str], None] = lambda m: None, where: Where | None = None) -> dict[str, Any]:
    """One ``[[overlay.donors]]`` entry trained from ``hf_dir``: its layers resolved against the backbone's
    ``config.json``, then :func:`train_donor`. The record adds the donor's id and model."""
    where = where or Where("[overlay]", f"donors[{spec.model}/{spec.id}]")
    try:
        num_layers = json.loads((Path(hf_dir) / "config.json").read_text())["num_hidden_layers"]
    except (OSError, ValueError, KeyError) as exc:
        raise ArtifactError(f"{hf_dir}/config.json: no num_hidden_layers to resolve the donor's layers: {exc}") from exc
    layers = parse_layers(spec.layers, num_layers, where.child("layers"))
    record = train_donor(hf_dir, out_dir, domain_text, families=spec.families, layers=layers, steps=spec.steps,
                         lr=spec.lr, seq_len=spec.seq_len, batch_size=spec.batch_size, seed=seed, threads=threads,
                         objective=spec.objective, replay_text=replay_text if spec.replay_rows else None,
                         replay_rows=spec.replay_rows, evaluate=evaluate, progress=progress, quantized=spec.quantized)
    record = {"donor": spec.id, "model": spec.model, **record}
    (Path(out_dir) / "donor.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record
