"""Exact 4-bit export of weights that already lie on a 4-bit lattice (a dequantized GGUF Q4_1).

A Q4_1 block of 32 weights is ``w = d * q + m`` with an integer ``q`` in 0..15 and float ``d``, ``m``.
A MatMulNBits zero point is an integer, so re-quantizing such a block with min/max rounding moves
every weight by up to ``d / 2`` (that is most of the q4 loss of a naive re-export).  Instead, this
module recovers the lattice of each block (its spacing ``d`` and offset ``m``) from the fp32 weights,
writes the exact ``q`` into a MatMulNBits node with zero point 0, and adds the offsets back with a
small block-sum term::

    A @ W  =  MatMulNBits(A; q, d, zp=0)  +  blocksum(A) @ M        (M: [K/32, N], the offsets)

The result reproduces the fp32 graph's weights to float rounding.  Weights not on a lattice (a model
trained in float, or a Q8_0 embedding used as the output head) are left to the ordinary quantizer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

LEVELS = 16


def recover(wt: np.ndarray, block: int, rel_tol: float = 1e-5) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """For ``wt`` of shape [N, K]: (q [N, K/block, block] uint8, d [N, K/block], m [N, K/block]) or None.

    None unless every block's values are ``m + d * q`` with integer q in 0..15 to ``rel_tol``.
    """
    n, k = wt.shape
    if k % block:
        return None
    v = wt.reshape(n, k // block, block).astype(np.float64)
    lo, hi = v.min(-1), v.max(-1)
    span = hi - lo
    s = np.sort(v, axis=-1)
    diffs = np.diff(s, axis=-1)
    scale_ref = np.maximum(np.abs(v).max(-1), 1e-30)
    diffs = np.where(diffs > rel_tol * scale_ref[..., None], diffs, np.inf)
    step = diffs.min(-1)                                   # the smallest spacing between distinct values
    flat = ~np.isfinite(step)                              # a constant block
    steps = np.where(flat, 1.0, np.round(span / np.where(flat, 1.0, step)))
    if np.any(steps > LEVELS - 1):
        return None
    d = np.where(flat, 1.0, span / np.maximum(steps, 1))
    q = np.round((v - lo[..., None]) / d[..., None])
    err = np.abs(lo[..., None] + d[..., None] * q - v).max(-1)
    if np.any(err > rel_tol * scale_ref) or q.min() < 0 or q.max() > LEVELS - 1:
        return None
    return q.astype(np.uint8), d.astype(np.float32), lo.astype(np.float32)


def _rank(model, name: str) -> int | None:
    for vi in list(model.graph.value_info) + list(model.graph.input):
        if vi.name == name and vi.type.tensor_type.HasField("shape"):
            return len(vi.type.tensor_type.shape.dim)
    return None


def rewrite(model, block: int = 32, accuracy_level: int = 0) -> tuple[Any, dict[str, Any]]:
    """Replace every MatMul whose constant weight is on a 4-bit lattice; returns (model, stats).

    ``stats["exact"]`` lists the rewritten weights, ``stats["left"]`` the MatMuls left for the
    ordinary quantizer, ``stats["correction_nodes"]`` the names to exclude from it.
    """
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.shape_inference.infer_shapes(model)
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    new_nodes, exact, left, exclude = [], [], [], []
    used = {}
    max_err = 0.0
    for node in g.node:
        if node.op_type != "MatMul" or node.input[1] not in inits or _rank(model, node.input[0]) != 3:
            if node.op_type == "MatMul":
                left.append(node.name)
            new_nodes.append(node)
            continue
        w = numpy_helper.to_array(inits[node.input[1]])       # [K, N]
        got = recover(w.T, block) if w.ndim == 2 else None
        if got is None:
            left.append(node.name)
            new_nodes.append(node)
            continue
        q, d, m = got
        k, n = w.shape
        nb = k // block
        recon = (d[..., None] * q.astype(np.float32) + m[..., None]).reshape(n, k).T
        max_err = max(max_err, float(np.abs(recon - w).max()))
        packed = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)          # [N, nb, block/2]
        zp = np.zeros(n * ((nb * 4 + 7) // 8), dtype=np.uint8)                  # zero point 0, packed
        base = (node.name or node.output[0]).replace("/", "_").strip("_")
        names = {x: f"lattice/{base}/{x}" for x in ("B", "scales", "zp", "offsets", "shape", "axes", "y4", "r", "s", "y1")}
        g.initializer.extend([numpy_helper.from_array(packed, names["B"]),
                              numpy_helper.from_array(d.reshape(-1), names["scales"]),
                              numpy_helper.from_array(zp, names["zp"]),
                              numpy_helper.from_array(np.ascontiguousarray(m.T), names["offsets"]),   # [nb, N]
                              numpy_helper.from_array(np.asarray([0, 0, nb, block], np.int64), names["shape"]),
                              numpy_helper.from_array(np.asarray([-1], np.int64), names["axes"])])
        a, y = node.input[0], node.output[0]
        corr = f"lattice/{base}/offset_matmul"
        new_nodes += [
            helper.make_node("MatMulNBits", [a, names["B"], names["scales"], names["zp"]], [names["y4"]],
                             name=f"lattice/{base}/nbits", domain="com.microsoft", K=k, N=n, bits=4,
                             block_size=block, accuracy_level=accuracy_level),
            helper.make_node("Reshape", [a, names["shape"]], [names["r"]], name=f"lattice/{base}/blocks"),
            helper.make_node("ReduceSum", [names["r"], names["axes"]], [names["s"]], name=f"lattice/{base}/blocksum",
                             keepdims=0),
            helper.make_node("MatMul", [names["s"], names["offsets"]], [names["y1"]], name=corr),
            helper.make_node("Add", [names["y4"], names["y1"]], [y], name=f"lattice/{base}/add"),
        ]
        exclude.append(corr)
        exact.append(node.input[1])
        used[node.input[1]] = True
    del g.node[:]
    g.node.extend(new_nodes)
    still = {i for nd in g.node for i in nd.input}
    keep = [t for t in g.initializer if t.name in still]
    del g.initializer[:]
    g.initializer.extend(keep)
    del g.value_info[:]
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model, {"exact": len(exact), "left": left, "correction_nodes": exclude, "max_abs_reconstruction_error": max_err}
