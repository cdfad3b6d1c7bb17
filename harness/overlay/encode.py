"""A donor's weight in the backbone's own encoding of that linear, read from the backbone graph itself.

The fused exporter (:mod:`harness.export.fused`) writes each linear ``L`` (``model.layers.i.mlp.gate_up_proj``,
``...down_proj``, ``...self_attn.qkv_proj``, ``...o_proj``) one of four ways; :func:`encoding_of` tells
which from the graph's initializers and the MatMulNBits node, and :func:`encode` writes the donor's
weight the same way, into initializers of the same names, dtypes and shapes:

- ``fp32``: ``L.weight`` (K, N) = wᵀ;
- ``rtn``: MatMulNBits round-to-nearest blocks (``L.qweight``, ``L.scales``, ``L.zero_points``), with
  ``L.bias_correction`` = (w − deq(w)) · E[x] when the backbone has one (E[x] from
  :func:`harness.export.fused.calibrate` on the donor: the overlaid model, since the donor differs from the
  backbone only in the replaced tensors);
- ``q4_1``: the GGUF Q4_1 lattice (w = d·q + m per block: ``L.qweight`` with zero points 0, ``L.scales`` = d,
  ``L.offsets`` = mᵀ), the donor's blocks quantized to that lattice;
- ``q8_0``: the GGUF Q8_0 lattice at 8 bits (zero points 128, d = max|w| / 127 per block).

A linear written any other way (a bias beside bias correction, another op) is refused by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..export import matmulnbits
from .fileformat import OverlayError

MS = "com.microsoft"


@dataclass(frozen=True)
class Encoding:
    linear: str
    kind: str             # fp32 | rtn | q4_1 | q8_0
    bits: int
    block: int
    names: tuple[str, ...]  # the initializers the encoding writes


def _inits(model) -> dict[str, Any]:
    return {i.name: i for i in model.graph.initializer}


def encoding_of(model, linear: str) -> Encoding:
    """How the backbone ``model`` (an ONNX ModelProto) encodes ``linear``."""
    from onnx import numpy_helper

    inits = _inits(model)
    if f"{linear}.weight" in inits:
        return Encoding(linear, "fp32", 32, 0, (f"{linear}.weight",))
    node = next((n for n in model.graph.node if n.op_type == "MatMulNBits" and len(n.input) > 1
                 and n.input[1] == f"{linear}.qweight"), None)
    if node is None:
        raise OverlayError(f"{linear}: the backbone graph has neither {linear}.weight nor a MatMulNBits on "
                           f"{linear}.qweight: an encoding the overlay cannot write")
    attrs = {a.name: a.i for a in node.attribute}
    bits, block = int(attrs["bits"]), int(attrs["block_size"])
    names = [f"{linear}.qweight", f"{linear}.scales", f"{linear}.zero_points"]
    if f"{linear}.offsets" in inits:
        return Encoding(linear, "q4_1", bits, block, (*names, f"{linear}.offsets"))
    if f"{linear}.bias" in inits:
        raise OverlayError(f"{linear}: the backbone linear has its own bias ({linear}.bias); overlays of biased "
                           f"linears are not supported")
    zp = numpy_helper.to_array(inits[f"{linear}.zero_points"])
    if bits == 8 and zp.size and np.all(zp == 128):
        return Encoding(linear, "q8_0", bits, block, tuple(names))
    if f"{linear}.bias_correction" in inits:
        names.append(f"{linear}.bias_correction")
    return Encoding(linear, "rtn", bits, block, tuple(names))


def _q4_1(w: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GGUF Q4_1 blocks of ``w`` (N, K): codes (N, K) in 0..15, d and m (N, K/block), w ~= d * q + m."""
    n, k = w.shape
    b = w.reshape(n, k // block, block).astype(np.float64)
    lo, hi = b.min(-1), b.max(-1)
    d = (hi - lo) / 15.0
    d = np.where(d == 0, 1.0, d)
    q = np.clip(np.rint((b - lo[..., None]) / d[..., None]), 0, 15)
    return q.reshape(n, k).astype(np.uint8), d.astype(np.float32), lo.astype(np.float32)


def _q8_0(w: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n, k = w.shape
    b = w.reshape(n, k // block, block).astype(np.float64)
    d = np.abs(b).max(-1) / 127.0
    d = np.where(d == 0, 1.0, d)
    q = np.clip(np.rint(b / d[..., None]), -127, 127) + 128
    return q.reshape(n, k).astype(np.uint8), d.astype(np.float32), np.full((n, k // block), 128, np.uint8)


def encode(enc: Encoding, w: np.ndarray, mean: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The initializers of ``enc.names`` for the donor weight ``w`` (N, K, torch layout); ``mean`` is the
    calibration E[x] (K,) a ``rtn`` encoding with bias correction needs."""
    w = np.asarray(w, np.float32)
    if enc.kind == "fp32":
        return {enc.names[0]: np.ascontiguousarray(w.T)}
    n, k = w.shape
    if k % enc.block:
        raise OverlayError(f"{enc.linear}: K={k} is not a multiple of the backbone's block size {enc.block}")
    if enc.kind == "q4_1":
        q, d, m = _q4_1(w, enc.block)
        packed, s, z = matmulnbits.pack_matmul_nbits(q, d, np.zeros((n, k // enc.block), np.uint8), 4, enc.block)
        return dict(zip(enc.names, (packed, s, z, np.ascontiguousarray(m.T))))
    if enc.kind == "q8_0":
        q, d, z = _q8_0(w, enc.block)
        return dict(zip(enc.names, matmulnbits.pack_matmul_nbits(q, d, z, 8, enc.block)))
    codes, scale, zero = matmulnbits.quantize_blocks(w, enc.bits, enc.block)
    out = dict(zip(enc.names[:3], matmulnbits.pack_matmul_nbits(codes, scale, zero, enc.bits, enc.block)))
    if len(enc.names) == 4:
        if mean is None:
            raise OverlayError(f"{enc.linear}: the backbone applies bias correction; the donor's calibration mean "
                               f"is needed to encode it")
        deq = matmulnbits.dequantize_blocks(codes, scale, zero, enc.block)
        out[enc.names[3]] = ((w.astype(np.float64) - deq) @ mean.astype(np.float64)).astype(np.float32)
    return out


def dequantize(enc: Encoding, inits: Mapping[str, np.ndarray], n: int, k: int) -> np.ndarray:
    """The weight (N, K) the backbone's initializers of ``enc`` hold (for the delta rule)."""
    if enc.kind == "fp32":
        return np.asarray(inits[enc.names[0]], np.float32).T
    nb = k // enc.block
    packed = np.asarray(inits[enc.names[0]]).reshape(n, nb, -1)
    if enc.bits == 4:
        codes = np.empty((n, nb, enc.block), np.uint8)
        codes[..., 0::2], codes[..., 1::2] = packed & 0x0F, packed >> 4
    else:
        codes = packed
    scale = np.asarray(inits[enc.names[1]], np.float64).reshape(n, nb)
    zp_raw = np.asarray(inits[enc.names[2]]).reshape(n, -1)
    if enc.bits == 4:
        zp = np.empty((n, zp_raw.shape[1] * 2), np.uint8)
        zp[:, 0::2], zp[:, 1::2] = zp_raw & 0x0F, zp_raw >> 4
        zp = zp[:, :nb]
    else:
        zp = zp_raw
    w = (codes.astype(np.float64) - zp[..., None]) * scale[..., None]
    if enc.kind == "q4_1":
        w = w + np.asarray(inits[enc.names[3]], np.float64).T[..., None]
    return w.reshape(n, k).astype(np.float32)
