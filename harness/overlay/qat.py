"""Training a donor through the backbone's 4-bit encoding (``quantized = "q4"``, issue 34).

A q4 overlay re-encodes the donor's tensors on the q4 graph's lattice (:mod:`.encode`). A small fine-tune of a
backbone whose weights already sit on that lattice (SmolLM2's GGUF Q4_1 blocks) rounds back to the same codes,
and the q4 overlay loses the skill. Here the forward pass sees each trained tensor *rounded* exactly as the
encoder will round it, with a straight-through gradient to the latent float tensor (``w + (round(w) - w)``,
the difference detached): the loss is the q4 overlay's loss, and a weight's code moves once its latent
crosses a code boundary. When training ends the trained tensors are replaced by their rounded values, so the
donor saved is the model the loss saw, a fixed point of the encoder (its q4 overlay reproduces it).

The lattice of each tensor is the one the q4 export writes (:mod:`harness.export.matmulnbits`, blocks of
``BLOCK`` along K): ``q4_1`` when the backbone tensor lies on a Q4_1 lattice (the exporter's ``lattice``
method writes it exactly; :func:`.encode._q4_1` re-quantizes a donor's blocks by their min and max), ``rtn``
otherwise (:func:`harness.export.matmulnbits.quantize_blocks`: round to nearest, zero in the range). Bias
correction is not modelled: a rounded donor's correction is zero. torch is imported when called.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import ArtifactError
from ..export import lattice
from ..export.params import EXPORT_DEFAULTS
from .donor import QUANTIZED as SCHEMES   # the [[overlay.donors]] quantized values

BLOCK = EXPORT_DEFAULTS["q4_block_size"]  # the q4 graph's blocks along K (the default campaign's [export] too)
LEVELS = 15


def lattice_of(w: np.ndarray, block: int = BLOCK) -> str:
    """How the q4 export encodes the backbone tensor ``w`` (N, K): ``q4_1`` (on a Q4_1 lattice) or ``rtn``."""
    return "q4_1" if lattice.recover(np.asarray(w, np.float32), block) is not None else "rtn"


def quantize(w, kind: str, block: int = BLOCK):
    """(codes, scale, offset) of the torch tensor ``w`` (N, K) in blocks of ``block`` along K, as the encoder
    computes them (float64, round half to even); each (N, K/block, ·). ``rounded = (codes * scale + offset)``."""
    import torch

    n, k = w.shape
    if k % block:
        raise ArtifactError(f"a trained tensor of shape {tuple(w.shape)}: K={k} is not a multiple of the q4 block "
                            f"size {block}")
    b = w.detach().double().reshape(n, k // block, block)
    if kind == "q4_1":
        lo, hi = b.amin(-1, keepdim=True), b.amax(-1, keepdim=True)
        d = (hi - lo) / LEVELS
        d = torch.where(d == 0, torch.ones_like(d), d)
        q = torch.clamp(torch.round((b - lo) / d), 0, LEVELS)
        return q, d.float(), lo.float()
    if kind == "rtn":
        lo, hi = b.amin(-1, keepdim=True).clamp(max=0.0), b.amax(-1, keepdim=True).clamp(min=0.0)
        s = (hi - lo) / LEVELS
        s = torch.where(s == 0, torch.ones_like(s), s)
        z = torch.clamp(torch.round(-lo / s), 0, LEVELS)
        q = torch.clamp(torch.round(b / s + z), 0, LEVELS)
        return q - z, s.float(), torch.zeros_like(s, dtype=torch.float32)
    raise ValueError(f"unknown lattice {kind!r} (q4_1 or rtn)")


def rounded(w, kind: str, block: int = BLOCK):
    """``w`` on its lattice (float32, the weights the q4 graph computes with), no gradient."""
    q, scale, offset = quantize(w, kind, block)
    return (q.float() * scale + offset).reshape(w.shape)


class Through:
    """The trained tensors of one donor seen through the q4 lattice: :meth:`weights` for the forward pass
    (straight-through), :meth:`finish` to leave the rounded values in the model, :meth:`record` for donor.json."""

    def __init__(self, scheme: str, params: Mapping[str, Any], names: Sequence[str], block: int = BLOCK):
        if scheme not in SCHEMES:
            raise ValueError(f"quantized must be one of {SCHEMES}, got {scheme!r}")
        self.scheme, self.block = scheme, block
        self.params = {n: params[n] for n in names}
        self.kinds = {n: lattice_of(p.detach().numpy(), block) for n, p in self.params.items()}
        self.initial = {n: quantize(p, self.kinds[n], block)[0] for n, p in self.params.items()}

    def weights(self) -> dict[str, Any]:
        """Each trained tensor as the forward pass sees it: its rounded value, the gradient straight to the latent."""
        return {n: p + (rounded(p, self.kinds[n], self.block) - p).detach() for n, p in self.params.items()}

    def finish(self) -> None:
        """Replace every trained tensor by its rounded value (the donor saved is what the loss saw)."""
        import torch

        with torch.no_grad():
            for n, p in self.params.items():
                p.copy_(rounded(p, self.kinds[n], self.block))

    def record(self) -> dict[str, Any]:
        """The scheme, the block, each tensor's lattice, and the fraction of its weights whose code (counted from the
        block's zero point) moved from the backbone's."""
        changed = {n: round(float((quantize(p, self.kinds[n], self.block)[0] != self.initial[n]).double().mean()), 8)
                   for n, p in self.params.items()}
        return {"scheme": self.scheme, "block": self.block, "lattice": dict(self.kinds), "codes_changed": changed}
