"""Build one recipe's graph (harness/recipes.py): the fused decoder with the recipe's rounding.

Every recipe writes the fused graph (``fused.build_graph``) with MatMulNBits linears at the recipe's bits,
block size and accuracy level; the output head at its own precision (an 8-bit head holding a GGUF Q8_0
embedding is written exactly whatever the method). The methods differ only in how a weight becomes
(codes, scale, integer zero point):

* ``rtn``      block min/max round to nearest (symmetric: llama.cpp's Q4_0/Q8_0 convention, the signed
               largest value at -2^(bits-1)); optional bias correction;
* ``lattice``  the fixed q4's exact GGUF lattices (Q4_1 codes plus a block-sum offset term);
* ``lattice-zp`` a GGUF Q4_1 block's own codes and scale with the nearest integer zero point, no offset term
               (each block shifted by at most half a step; bias correction adds the mean effect back);
* ``lsq``      per block, candidate scales around the block's range, each refit by weighted least squares
               for its integer zero point and re-rounded, keeping the one with the smallest
               sum_k E[x_k^2] (w_k - w'_k)^2 (the expected output error of a diagonal input covariance);
* ``gptq``     error feedback (Frantar et al., GPTQ): columns in order, each column's rounding error spread
               over the later columns of the row through the Cholesky factor of the inverse of the dampened
               E[x x^T]; each block's scale and zero point from ``lsq`` on the block as it stands when reached;
* ``ort-*``    ONNX Runtime's own quantizer (``MatMulNBitsQuantizer`` with ``RTNWeightOnlyQuantConfig``,
               ``KQuantWeightOnlyQuantConfig`` or ``HQQWeightOnlyQuantConfig``) over the fp32 graph's linear
               MatMuls, the head written by Gatehouse as above; every MatMulNBits then gets the recipe's
               accuracy level.

Calibration statistics come from the campaign's training corpus only (never the held-out text).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from .params import HEAD_BITS

GRAPH = "onnx/model.onnx"   # a recipe's export directory: one graph, plus the config and tokenizer files


# -- rounding methods: (N, K) float weights -> (codes (N, K) uint8, scale (N, nb) f32, zero (N, nb) uint8) ----------
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
    from .fused import quantize_blocks

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


def quantizer_for(recipe, calibration: dict[str, dict] | None):
    """The fused builder's ``quantizer(name, w, bits, stats)`` for a recipe's own methods (None: lattice)."""
    method, block, sym = recipe.method, recipe.block_size, recipe.symmetric

    def q(name, w, bits, stats):
        if method in ("lsq", "gptq") and stats is None:
            raise ValueError(f"{name}: {method} needs calibration statistics for this linear")
        if method == "lsq":
            return lsq(w, bits, block, sym, np.diag(stats["hessian"]))
        if method == "gptq":
            return gptq(w, bits, block, sym, stats["hessian"], recipe.damp)
        if method == "lattice-zp":
            found = lattice_zp(w, bits, block)
            if found is not None:
                return found
        return rtn(w, bits, block, sym)

    return None if method == "lattice" else q


# -- ONNX Runtime's own quantizers ---------------------------------------------------------------------------
def ort_quantize(model, recipe, head_names: set[str]):
    """Quantize the fp32 MatMuls with an initializer weight (the head excluded) by ONNX Runtime's quantizer."""
    import logging

    from onnxruntime.quantization import matmul_nbits_quantizer as mnq

    logging.getLogger().setLevel(logging.WARNING)
    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    if recipe.method == "ort-rtn":
        algo = mnq.RTNWeightOnlyQuantConfig()
    elif recipe.method == "ort-kquant":
        algo = mnq.KQuantWeightOnlyQuantConfig()
    elif recipe.method == "ort-hqq":
        algo = mnq.HQQWeightOnlyQuantConfig(block_size=recipe.block_size, bits=recipe.bits)
    else:
        raise ValueError(f"not an ONNX Runtime method: {recipe.method}")
    # neural_compressor's graph walk (RTN, k-quant) starts at every graph input and fails on one nothing reads
    # (the fused graph's position_ids): set such inputs aside and put them back in place afterwards
    used = {i for n in model.graph.node for i in n.input}
    inputs = list(model.graph.input)
    unused = [i for i in inputs if i.name not in used]
    for i in unused:
        model.graph.input.remove(i)
    inits = {i.name for i in model.graph.initializer}
    exclude = [n.name for n in model.graph.node if n.op_type == "MatMul"
               and (n.output[0] == "logits" or n.input[1] not in inits or n.name in head_names)]
    quantizer = mnq.MatMulNBitsQuantizer(model, bits=recipe.bits, block_size=recipe.block_size,
                                         is_symmetric=recipe.symmetric, accuracy_level=recipe.accuracy_level or None,
                                         nodes_to_exclude=exclude, algo_config=algo)
    try:
        quantizer.process()
    except ValueError as exc:   # ORT 1.32: ceil(K / block) odd breaks RTN-asym, k-quant and GPTQ (DEVELOPERS.md)
        raise ValueError(f"ONNX Runtime's {recipe.method} quantizer failed at block size {recipe.block_size}: {exc} "
                         f"(ONNX Runtime 1.32 fails when a layer's K / block_size is odd; use block 16 or 32)") from exc
    out = quantizer.model.model
    if unused:
        kept = list(out.graph.input)
        del out.graph.input[:]
        by_name = {i.name: i for i in kept}
        out.graph.input.extend([by_name.get(i.name, i) for i in inputs])
    for node in out.graph.node:   # the recipe's accuracy level on every MatMulNBits the quantizer wrote
        if node.op_type == "MatMulNBits" and node.name not in head_names:
            for a in node.attribute:
                if a.name == "accuracy_level":
                    a.i = recipe.accuracy_level
                    break
            else:
                from onnx import helper

                node.attribute.append(helper.make_attribute("accuracy_level", recipe.accuracy_level))
    return out, {"excluded": exclude}


def build(hf_dir: Path, out: Path, recipe, opset: int, progress, calibration_texts: list[str] | None) -> dict[str, Any]:
    """Write ``out/onnx/model.onnx`` for ``recipe`` from the HF directory; returns the build record."""
    import onnx

    from . import fused

    t0 = time.monotonic()
    progress(f"recipe {recipe.id}: loading the HF weights")
    state, cfg = fused.load_state(hf_dir)
    s = fused.shapes_of(cfg)
    seconds = {"load_s": round(time.monotonic() - t0, 3)}
    calibration = None
    if recipe.calibrated:
        if not calibration_texts:
            raise ValueError(f"recipe {recipe.id}: {recipe.method} needs calibration text (the training corpus)")
        t0 = time.monotonic()
        progress(f"recipe {recipe.id}: calibration statistics on the training corpus (PyTorch)")
        calibration = fused.calibrate(hf_dir, calibration_texts, second_moment=recipe.method in ("lsq", "gptq"))
        seconds["calibration_s"] = round(time.monotonic() - t0, 3)
    if recipe.delivery == "packed":
        return _build_packed(state, s, cfg, out, recipe, opset, progress, seconds)
    ort = recipe.method.startswith("ort-")
    t0 = time.monotonic()
    progress(f"recipe {recipe.id}: writing the graph ({recipe.method}, {recipe.bits}-bit, block {recipe.block_size}, "
             f"head {recipe.head})")
    model, info = fused.build_graph(
        state, s, 32 if ort else recipe.bits, HEAD_BITS[recipe.head], recipe.block_size, recipe.accuracy_level, opset,
        head_level=recipe.head_accuracy_level, calibration=calibration, lattice=recipe.method == "lattice",
        quantizer=quantizer_for(recipe, calibration), bias_correction=recipe.bias_correction, exact_q8=True)
    seconds["graph_s"] = round(time.monotonic() - t0, 3)
    if ort:
        t0 = time.monotonic()
        progress(f"recipe {recipe.id}: ONNX Runtime's {recipe.method[4:]} quantizer on the linear layers")
        heads_named = {n.name for n in model.graph.node if "logits" in n.output}
        model, more = ort_quantize(model, recipe, heads_named)
        info["ort_quantizer"] = more
        info["op_types"] = fused.op_counts(model.graph.node)
        info["nodes"] = len(model.graph.node)
        seconds["ort_quantizer_s"] = round(time.monotonic() - t0, 3)
    path = out / GRAPH
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(path))
    info.update({"layers": s.layers, "kv_heads": s.kv_heads, "head_dim": s.head_dim, "vocab_size": s.vocab})
    if calibration:
        info["calibration_tokens"] = int(next(iter(calibration.values()))["tokens"])
    return {"recipe": recipe.as_dict(), "graph": info, "seconds": seconds}


def _build_packed(state, s, cfg, out: Path, recipe, opset: int, progress, seconds: dict) -> dict[str, Any]:
    """Packed delivery (harness/export/packed.py): the fp32 graph, its weights replaced by their packed values."""
    import onnx

    from . import fused, packed

    t0 = time.monotonic()
    progress(f"recipe {recipe.id}: writing the fp32 graph and packing its weights ({recipe.method}, 4-bit "
             f"block {recipe.block_size}, the embedding 8-bit)")
    model, info = fused.build_graph(state, s, 32, 32, recipe.block_size, 0, opset)
    index = packed.pack(model, out, recipe.block_size, recipe.method)
    onnx.save_model(model, str(out / GRAPH))
    seconds["graph_s"] = round(time.monotonic() - t0, 3)
    info.update({"layers": s.layers, "kv_heads": s.kv_heads, "head_dim": s.head_dim, "vocab_size": s.vocab,
                 "delivery": "packed", "packed_tensors": len(index["tensors"]),
                 "encodings": sorted({t["encoding"] for t in index["tensors"]}),
                 "pack_bytes": index["pack_bytes"], "data_bytes": index["data_bytes"],
                 "graph_bytes": (out / GRAPH).stat().st_size})
    return {"recipe": recipe.as_dict(), "graph": info, "seconds": seconds}
