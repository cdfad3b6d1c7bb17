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
from .rounding import gptq, lattice_zp, lsq, rtn
from .shapes import shapes_of

GRAPH = "onnx/model.onnx"   # a recipe's export directory: one graph, plus the config and tokenizer files


# -- rounding methods: (N, K) float weights -> (codes (N, K) uint8, scale (N, nb) f32, zero (N, nb) uint8) ----------
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
    s = shapes_of(cfg)
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

    from . import fused
    from . import packed

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
