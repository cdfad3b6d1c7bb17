"""Collect quantization-loss evidence: per-token NLL and KL divergence of a quantized graph against fp32."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..progress import ticker
from ..runtime import OrtDecoder
from ..stats import kl_divergence, token_nll


def chunks(ids: Sequence[int], context: int, max_tokens: int) -> list[list[int]]:
    """Consecutive, non-overlapping windows of ``context`` tokens, at most ``max_tokens`` in all."""
    out = []
    for start in range(0, len(ids) - context + 1, context):
        if (len(out) + 1) * context > max_tokens:
            break
        out.append(list(ids[start:start + context]))
    return out


def collect(reference: OrtDecoder, candidate: OrtDecoder, ids: Sequence[int], context: int,
            max_tokens: int, what: str = "held-out windows") -> dict[str, Any]:
    """Score the second half of each window, as llama.cpp's perplexity tool does.

    The first half of each window is context only, so every scored token sees at
    least ``context // 2`` tokens before it.  Returns per-token arrays (float64
    lists) and the window layout (``window_tokens``: the tokens each window scored, in order, so the rule
    can resample whole windows for its intervals); the rule summarizes them.  ``what`` names the windows
    in the progress lines.
    """
    windows = chunks(ids, context, max_tokens)
    tick = ticker(what, len(windows))
    first = context // 2
    nll_ref, nll_cand, kld, top1, sizes = [], [], [], [], []
    for window in windows:
        ref = reference.full(window)[first:-1]
        cand = candidate.full(window)[first:-1]
        targets = window[first + 1:]
        nll_ref.append(token_nll(ref, targets))
        nll_cand.append(token_nll(cand, targets))
        kld.append(kl_divergence(ref, cand))
        top1.append(np.argmax(ref, axis=-1) == np.argmax(cand, axis=-1))
        sizes.append(len(targets))
        tick(len(top1))
    cat = (lambda parts, dtype=np.float64: np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype))
    return {"context": context, "windows": len(windows), "scored_from": first, "window_tokens": sizes,
            "nll_reference": cat(nll_ref).tolist(), "nll_candidate": cat(nll_cand).tolist(),
            "kld": cat(kld).tolist(), "top1_same": cat(top1, bool).tolist()}
