"""Linear layers as ONNX Runtime's ``MatMulNBits``: asymmetric round-to-nearest block quantization, the exact
GGUF Q8_0 and Q4_1 lattices, MatMulNBits' packing, and :class:`GraphBuilder`, which collects a graph's nodes
and initializers and writes each linear as fp32 ``MatMul`` or ``MatMulNBits`` (with bias correction when the
linear has calibration statistics).  The fused exporter (:mod:`.fused`) writes its graphs through it."""

from __future__ import annotations

import numpy as np

MS = "com.microsoft"


def quantize_blocks(w: np.ndarray, bits: int, block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Asymmetric round-to-nearest block quantization of ``w`` (N, K) along K.

    Returns (codes (N, K) uint8, scales (N, K/block) float32, zero points (N, K/block) uint8) with
    ``w ~= (codes - zero) * scale``; the block's range always includes 0, so the zero point is exact.
    """
    n, k = w.shape
    if k % block:
        raise ValueError(f"K={k} is not a multiple of the block size {block}")
    levels = (1 << bits) - 1
    b = w.reshape(n, k // block, block).astype(np.float64)
    lo = np.minimum(b.min(axis=2), 0.0)
    hi = np.maximum(b.max(axis=2), 0.0)
    scale = (hi - lo) / levels
    scale = np.where(scale == 0, 1.0, scale)
    zero = np.clip(np.rint(-lo / scale), 0, levels)
    codes = np.clip(np.rint(b / scale[..., None] + zero[..., None]), 0, levels)
    return (codes.reshape(n, k).astype(np.uint8), scale.astype(np.float32), zero.astype(np.uint8))


def q8_0_lattice(w: np.ndarray, block: int, tol: float = 1e-3):
    """8-bit codes for weights that are a dequantized GGUF Q8_0 (``d * q``, integer |q| <= 127 per block
    of 32, the block's largest |w| at |q| = 127): codes q + 128, zero point 128, scale d, exact. None
    when any block is not on such a lattice."""
    n, k = w.shape
    if k % block:
        return None
    b = w.reshape(n, k // block, block).astype(np.float64)
    amax = np.abs(b).max(axis=2)
    d = np.where(amax > 0, amax / 127.0, 1.0)
    q = b / d[..., None]
    r = np.rint(q)
    if np.abs(q - r).max() > tol:
        return None
    return ((r + 128).reshape(n, k).astype(np.uint8), d.astype(np.float32), np.full(d.shape, 128, np.uint8))


def dequantize_blocks(codes: np.ndarray, scale: np.ndarray, zero: np.ndarray, block: int) -> np.ndarray:
    n, k = codes.shape
    c = codes.reshape(n, k // block, block).astype(np.float32)
    return ((c - zero[..., None].astype(np.float32)) * scale[..., None]).reshape(n, k)


def pack_matmul_nbits(codes: np.ndarray, scale: np.ndarray, zero: np.ndarray, bits: int, block: int):
    """MatMulNBits' B (N, K/block, block*bits/8), scales (N*K/block,) and zero points."""
    n, k = codes.shape
    nb = k // block
    c = codes.reshape(n, nb, block)
    if bits == 8:
        return c.copy(), scale.reshape(-1), zero.reshape(-1)
    if bits != 4:
        raise ValueError(f"bits must be 4 or 8, got {bits}")
    packed = (c[..., 0::2] | (c[..., 1::2] << 4)).astype(np.uint8)
    z = zero if nb % 2 == 0 else np.concatenate([zero, np.zeros((n, 1), np.uint8)], axis=1)
    zp = (z[:, 0::2] | (z[:, 1::2] << 4)).astype(np.uint8)
    return packed, scale.reshape(-1), zp.reshape(-1)


class GraphBuilder:
    """A graph's nodes and initializers in the order they are written, and its linears."""

    def __init__(self, block: int, accuracy_level: int, lattice: bool = False, quantizer=None,
                 bias_correction: bool = True, exact_q8: bool = False):
        from onnx import helper, numpy_helper

        self.h, self.nh = helper, numpy_helper
        self.block, self.accuracy_level = block, accuracy_level
        self.nodes: list = []
        self.inits: list = []
        self.errors = {"max_abs": 0.0, "weights": 0, "lattice": 0}
        self.lattice = lattice
        # quantizer(name, w, bits, stats) -> (codes, scale, zero) for a weight on no exact lattice (a recipe's
        # rounding, harness/export/recipes.py); None: round to nearest (quantize_blocks)
        self.quantizer = quantizer
        self.bias_correction = bias_correction   # add (W - Wq) @ E[x] back when the linear has calibration stats
        self.exact_q8 = exact_q8                 # write Q8_0-lattice weights exactly at 8 bits even without lattice

    def init(self, name: str, array: np.ndarray) -> str:
        self.inits.append(self.nh.from_array(np.ascontiguousarray(array), name))
        return name

    def node(self, op: str, inputs: list[str], outputs: list[str], domain: str = "", **attrs) -> list[str]:
        self.nodes.append(self.h.make_node(op, inputs, outputs, name=f"{op}_{len(self.nodes)}", domain=domain, **attrs))
        return outputs

    def _exact_lattice(self, x: str, w: np.ndarray, name: str, out: str, level: int | None,
                       bias: np.ndarray | None = None) -> bool:
        """A GGUF Q4_1 block exactly: MatMulNBits(x; q, d, zp=0) + blocksum(x) @ M (M: the offsets)."""
        from . import lattice

        rec = lattice.recover(w, self.block)
        if rec is None:
            return False
        q, d, m = rec
        n, k = w.shape
        nb = k // self.block
        packed, sc, zp = pack_matmul_nbits(q.reshape(n, k), d, np.zeros((n, nb), np.uint8), 4, self.block)
        self.errors["lattice"] += 1
        self.errors["weights"] += 1
        extra = [] if bias is None else ["", self.init(f"{name}.bias", bias.astype(np.float32))]  # (g_idx), bias
        self.node("MatMulNBits", [x, self.init(f"{name}.qweight", packed), self.init(f"{name}.scales", sc),
                                  self.init(f"{name}.zero_points", zp), *extra], [f"{name}/main"], domain=MS,
                  K=k, N=n, bits=4, block_size=self.block,
                  accuracy_level=self.accuracy_level if level is None else level)
        shape = self.init(f"{name}.blocks", np.array([0, 0, nb, self.block], np.int64))
        self.node("Reshape", [x, shape], [f"{name}/xb"])
        self.node("ReduceSum", [f"{name}/xb", self.init(f"{name}.axis", np.array([-1], np.int64))],
                  [f"{name}/bsum"], keepdims=0)
        self.node("MatMul", [f"{name}/bsum", self.init(f"{name}.offsets", np.ascontiguousarray(m.T))],
                  [f"{name}/offset"])
        self.node("Add", [f"{name}/main", f"{name}/offset"], [out])
        return True

    def linear(self, x: str, w: np.ndarray, bits: int, name: str, out: str | None = None,
               level: int | None = None, stats: dict[str, np.ndarray] | None = None,
               bias: np.ndarray | None = None) -> str:
        """y = x @ w.T (+ bias) for a torch-layout weight ``w`` (N, K) and an optional bias (N,).

        The bias is an Add after the fp32 MatMul, MatMulNBits' own bias input otherwise (summed with
        the bias correction when both apply); without one the nodes are those of a bias-free linear."""
        out = out or f"{name}/out"
        n, k = w.shape
        if bias is not None and bias.shape != (n,):
            raise ValueError(f"{name}: bias of shape {bias.shape} for a weight of shape {w.shape}")
        if bits == 32:
            if bias is None:
                self.node("MatMul", [x, self.init(f"{name}.weight", w.T.astype(np.float32))], [out])
            else:
                self.node("MatMul", [x, self.init(f"{name}.weight", w.T.astype(np.float32))], [f"{name}/matmul"])
                self.node("Add", [f"{name}/matmul", self.init(f"{name}.bias", bias.astype(np.float32))], [out])
            return out
        if bits == 4 and self.lattice:
            done = self._exact_lattice(x, w, name, out, level, bias=bias)
            if done:
                return out
        exact = q8_0_lattice(w, self.block) if bits == 8 and (self.lattice or self.exact_q8) else None
        if exact is not None:
            codes, scale, zero = exact
        elif self.quantizer is not None:
            codes, scale, zero = self.quantizer(name, w, bits, stats)
        else:
            codes, scale, zero = quantize_blocks(w, bits, self.block)
        self.errors["lattice"] += exact is not None
        deq = dequantize_blocks(codes, scale, zero, self.block)
        self.errors["max_abs"] = max(self.errors["max_abs"], float(np.abs(deq - w).max()))
        self.errors["weights"] += 1
        packed, s, z = pack_matmul_nbits(codes, scale, zero, bits, self.block)
        extra = []
        # (the fixed q4/q8 graphs add a zero correction to exact Q8_0 weights too: kept, their bytes are pinned)
        if stats is not None and self.bias_correction and (exact is None or not self.exact_q8):
            # bias correction: the rounding's mean effect on the output, (W - Wq) @ E[x], added back
            correction = (w.astype(np.float64) - deq) @ stats["mean"].astype(np.float64)
            if bias is None:
                extra = ["", self.init(f"{name}.bias_correction", correction.astype(np.float32))]  # (g_idx), bias
            else:  # the layer's own bias plus the correction, one input
                extra = ["", self.init(f"{name}.bias", (bias.astype(np.float64) + correction).astype(np.float32))]
        elif bias is not None:
            extra = ["", self.init(f"{name}.bias", bias.astype(np.float32))]
        self.node("MatMulNBits", [x, self.init(f"{name}.qweight", packed), self.init(f"{name}.scales", s),
                                  self.init(f"{name}.zero_points", z), *extra], [out], domain=MS,
                  K=k, N=n, bits=bits, block_size=self.block,
                  accuracy_level=self.accuracy_level if level is None else level)
        return out
