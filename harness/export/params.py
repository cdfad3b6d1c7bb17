"""The exporter's parameters and their checks, import-free so the campaign loader can validate
``[export]`` without importing the exporter (which imports torch and onnxruntime)."""

from __future__ import annotations

from typing import Any

EXPORT_DEFAULTS = {"opset": 17, "graph": "traced", "q4_block_size": 32, "q4_accuracy_level": 0, "q4_symmetric": True,
                   "q8_per_channel": False, "q8_accuracy_level": 4, "q4_method": "minmax", "q4_head": "q4",
                   "q4_head_accuracy_level": None, "bias_correction": False}
GRAPHS = ("traced", "fused")         # traced: graph.py through the TorchScript exporter; fused: fused.py
Q4_METHODS = ("minmax", "lattice")   # lattice: exact 4-bit for weights already on a 4-bit lattice (GGUF Q4_1)
Q4_HEADS = ("q4", "q8", "fp32")      # the output head (the MatMul that produces logits): 4 bits, 8 bits or fp32
HEAD_BITS = {"q4": 4, "q8": 8, "fp32": 32}   # a head precision's weight bits (fp32: a plain MatMul)


def check_params(p: dict[str, Any], fault: str | None = None) -> None:
    if p["graph"] not in GRAPHS:
        raise ValueError(f"export graph must be one of {GRAPHS}, got {p['graph']!r}")
    if p["q4_method"] not in Q4_METHODS or p["q4_head"] not in Q4_HEADS:
        raise ValueError(f"q4_method must be one of {Q4_METHODS} and q4_head one of {Q4_HEADS}, "
                         f"got {p['q4_method']!r}, {p['q4_head']!r}")
    if p["graph"] == "fused":
        if fault:
            raise ValueError("fault injection exists for the traced exporter only (graph = \"traced\")")
        if p["q4_symmetric"] is not False:
            raise ValueError("the fused graph's blocks are asymmetric (q4_symmetric = false)")
    elif p["q4_head"] == "q8" or p["bias_correction"] or p["q4_head_accuracy_level"] is not None:
        raise ValueError("q4_head = \"q8\", q4_head_accuracy_level and bias_correction apply to the "
                         "fused graph only (graph = \"fused\")")
    for key in ("q4_accuracy_level", "q8_accuracy_level", "q4_head_accuracy_level"):
        if p[key] is not None and p[key] not in (0, 1, 2, 3, 4):
            raise ValueError(f"{key} must be an ONNX Runtime accuracy level 0..4, got {p[key]!r}")
