"""The weight rounding of the quantization recipes: round-to-nearest, the loss-aware grid search (LSQ-style),
GPTQ's error feedback and the Q4_1 lattice with a zero point, each on blocks of ``block`` weights along K.

Pure NumPy, below both the recipe builder (:mod:`harness.export.recipes`) and the packed encoding
(:mod:`harness.export.packed`), which both round with it.
"""

from __future__ import annotations

import numpy as np


def _blocks(w: np.ndarray, block: int) -> np.ndarray:
    n, k = w.shape
    if k % block:
        raise ValueError(f"K={k} is not a multiple of the block size {block}")
    return w.reshape(n, k // block, block).astype(np.float64)


def _round(b: np.ndarray, scale: np.ndarray, zero: np.ndarray, levels: int) -> np.ndarray:
    return np.clip(np.rint(b / scale[..., None] + zero[..., None]), 0, levels)


def _out(codes: np.ndarray, scale: np.ndarray, zero: np.ndarray, shape) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return codes.reshape(shape).astype(np.uint8), scale.astype(np.float32), zero.astype(np.uint8)


def rtn(w: np.ndarray, bits: int, block: int, symmetric: bool = False):
    """Round to nearest: asymmetric is the fused exporter's own ``quantize_blocks``; symmetric puts each block's
    signed largest value at -2^(bits-1) (llama.cpp's Q4_0 / Q8_0 convention)."""
    from .matmulnbits import quantize_blocks

    if not symmetric:
        return quantize_blocks(w, bits, block)
    levels, half = (1 << bits) - 1, 1 << (bits - 1)
    b = _blocks(w, block)
    idx = np.abs(b).argmax(axis=2)
    signed = np.take_along_axis(b, idx[..., None], axis=2)[..., 0]
    scale = signed / -half
    scale = np.where(scale == 0, 1.0, scale)
    zero = np.full(scale.shape, half, np.float64)
    return _out(_round(b, scale, zero, levels), scale, zero, w.shape)


def _lsq_blocks(b: np.ndarray, h: np.ndarray, bits: int, symmetric: bool, grid: int = 41):
    """Best (scale, zero, codes) per block of ``b`` (N, nb, B) under weights ``h`` (nb, B) (or (N, nb, B))."""
    levels = (1 << bits) - 1
    h = np.broadcast_to(h, b.shape)
    lo = np.minimum(b.min(axis=2), 0.0)
    hi = np.maximum(b.max(axis=2), 0.0)
    best_err = np.full(b.shape[:2], np.inf)
    best_s = np.ones(b.shape[:2])
    best_z = np.zeros(b.shape[:2])
    half = 1 << (bits - 1)
    amax = np.abs(b).max(axis=2)
    for f in np.linspace(0.60, 1.40, grid):   # a block whose codes do not span the range needs f > 1
        if symmetric:
            s0 = np.where(amax > 0, amax * f / (half - 0.5), 1.0)
            z = np.full(s0.shape, float(half))
        else:
            s0 = np.where(hi > lo, (hi - lo) * f / levels, 1.0)
            z = np.clip(np.rint(-lo / s0), 0, levels)
        q = _round(b, s0, z, levels)
        d = q - z[..., None]
        den = (h * d * d).sum(axis=2)
        s = np.where(den > 0, (h * b * d).sum(axis=2) / np.where(den > 0, den, 1.0), s0)
        s = np.where(np.abs(s) > 1e-30, s, s0)
        q = _round(b, s, z, levels)            # re-round at the refit scale
        err = (h * (b - (q - z[..., None]) * s[..., None]) ** 2).sum(axis=2)
        better = err < best_err
        best_err = np.where(better, err, best_err)
        best_s = np.where(better, s, best_s)
        best_z = np.where(better, z, best_z)
    return best_s, best_z, _round(b, best_s, best_z, levels)


def lsq(w: np.ndarray, bits: int, block: int, symmetric: bool, importance: np.ndarray):
    """``importance``: E[x_k^2] per input column (K,)."""
    b = _blocks(w, block)
    h = np.maximum(importance.astype(np.float64), 1e-12).reshape(b.shape[1], block)
    scale, zero, codes = _lsq_blocks(b, h, bits, symmetric)
    return _out(codes, scale, zero, w.shape)


def gptq(w: np.ndarray, bits: int, block: int, symmetric: bool, hessian: np.ndarray, damp: float = 0.01):
    """GPTQ with one quantization group per block (no reordering)."""
    levels = (1 << bits) - 1
    n, k = w.shape
    if k % block:
        raise ValueError(f"K={k} is not a multiple of the block size {block}")
    W = w.astype(np.float64).copy()
    H = hessian.astype(np.float64).copy()
    dead = np.diag(H) <= 0
    H[dead, dead] = 1.0
    W[:, dead] = 0.0
    H += damp * np.mean(np.diag(H)) * np.eye(k)
    Hinv = np.linalg.cholesky(np.linalg.inv(H)).T      # upper triangular: the GPTQ update rows
    nb = k // block
    codes = np.zeros((n, k))
    scales = np.zeros((n, nb))
    zeros = np.zeros((n, nb))
    diag = np.diag(H)
    for g in range(nb):
        a, e = g * block, (g + 1) * block
        s, z, _ = _lsq_blocks(W[:, a:e][:, None, :], diag[a:e][None, None, :], bits, symmetric)
        s, z = s[:, 0], z[:, 0]
        scales[:, g], zeros[:, g] = s, z
        err = np.zeros((n, block))
        for j in range(a, e):
            q = np.clip(np.rint(W[:, j] / s + z), 0, levels)
            codes[:, j] = q
            wq = (q - z) * s
            e_j = (W[:, j] - wq) / Hinv[j, j]
            W[:, j + 1:e] -= np.outer(e_j, Hinv[j, j + 1:e])
            err[:, j - a] = e_j
        W[:, e:] -= err @ Hinv[a:e, e:]
    return codes.astype(np.uint8), scales.astype(np.float32), zeros.astype(np.uint8)


def lattice_zp(w: np.ndarray, bits: int, block: int):
    """A Q4_1 block ``d * q + m`` as MatMulNBits codes ``q``, scale ``d`` and the integer zero point nearest to
    ``-m / d`` (a block whose offset needs a zero point outside 0..15, all of one sign, is rounded to nearest);
    None when ``w`` is not on a 4-bit lattice."""
    from . import lattice

    if bits != 4:
        return None
    rec = lattice.recover(w, block)
    if rec is None:
        return None
    q, d, m = rec
    z = np.rint(-m / np.where(d == 0, 1.0, d))
    ok = (z >= 0) & (z <= 15)
    n, k = w.shape
    codes, scale, zero = rtn(w, bits, block)
    codes = codes.reshape(q.shape)
    codes[ok] = q[ok]
    scale = np.where(ok, d, scale)
    zero = np.where(ok, np.clip(z, 0, 15), zero)
    return codes.reshape(n, k).astype(np.uint8), scale.astype(np.float32), zero.astype(np.uint8)
