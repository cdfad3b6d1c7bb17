"""Known damage for the behavior rule's calibration: a PyTorch model with noise on its linear weights, or with its
last decoder layers removed, and the held-out loss that says how much damage was done.

Each function returns a new model and leaves the given one untouched; the noise is seeded, so a damaged model
is the same on every machine with the same weights.
"""

from __future__ import annotations

import copy
from typing import Sequence

import numpy as np


def noisy(model, sigma: float, seed: int):
    """A copy of ``model`` with Gaussian noise of ``sigma`` times each decoder linear weight's own standard
    deviation added to it (embedding and output head untouched, so the vocabulary stays aligned)."""
    import torch

    if not sigma > 0:
        raise ValueError(f"noise sigma must be positive, got {sigma!r}")
    out = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, module in out.model.layers.named_modules():
            if isinstance(module, torch.nn.Linear):
                w = module.weight
                w.add_(torch.randn(w.shape, generator=gen, dtype=w.dtype) * (sigma * float(w.std())))
    return out.eval()


def truncated(model, drop: int = 1):
    """A copy of ``model`` without its last ``drop`` decoder layers (the final norm and head kept)."""
    import torch

    layers = len(model.model.layers)
    if not 0 < drop < layers:
        raise ValueError(f"can drop 1..{layers - 1} of {layers} layers, not {drop!r}")
    out = copy.deepcopy(model)
    keep = layers - drop
    out.model.layers = torch.nn.ModuleList(list(out.model.layers)[:keep])
    out.config.num_hidden_layers = keep
    if getattr(out.config, "layer_types", None):
        out.config.layer_types = list(out.config.layer_types)[:keep]
    return out.eval()


def heldout_loss(model, ids: Sequence[int], context: int, max_tokens: int) -> float:
    """Mean next-token loss (nats) of ``model`` over non-overlapping windows of ``context`` held-out ids, scoring
    each window's second half (as the quantization gate does), up to ``max_tokens`` scored tokens."""
    import torch

    losses: list[float] = []
    scored = 0
    with torch.no_grad():
        for start in range(0, len(ids) - context + 1, context):
            window = torch.tensor([list(ids[start:start + context])])
            logits = model(input_ids=window).logits[0, :-1].float()
            nll = torch.nn.functional.cross_entropy(logits, window[0, 1:], reduction="none")
            half = nll[context // 2:]
            losses.extend(half.tolist())
            scored += half.numel()
            if scored >= max_tokens:
                break
    if not losses:
        raise ValueError(f"{len(ids)} held-out ids do not fill one window of {context}")
    return float(np.mean(losses[:max_tokens]))
