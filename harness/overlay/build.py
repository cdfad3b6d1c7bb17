"""The delta rule (pure) and the overlay of one backbone graph from one donor.

Granularity: the donor is compared per Hugging Face tensor (``model.layers.i.mlp.gate_proj.weight``, ...),
as the seed's delta gate does; the overlay is written per *fused* linear of the graph
(``gate_up_proj`` holds gate and up, ``qkv_proj`` holds q, k and v), which is replaced whole when any of
its tensors is kept. The backbone side of the comparison is the float weights the backbone graphs were
exported from (for a GGUF model, its dequantized tensors), so an untouched tensor has a delta of exactly 0;
comparing against a 4-bit graph's dequantized blocks would give every tensor the quantization error
(several per cent) and the rule could never drop one.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..hashing import sha256_file
from . import encode as enc
from .fileformat import OverlayError, check_names, read, write

# family -> (fused linear suffix, its Hugging Face tensors in concatenation order, calibration key)
LINEARS = {
    "ffn": (("mlp.gate_up_proj", ("mlp.gate_proj", "mlp.up_proj"), "mlp.gate_proj"),
            ("mlp.down_proj", ("mlp.down_proj",), "mlp.down_proj")),
    "attn": (("self_attn.qkv_proj", ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), "self_attn.q_proj"),
             ("self_attn.o_proj", ("self_attn.o_proj",), "self_attn.o_proj")),
}
LINEARS["all"] = LINEARS["ffn"] + LINEARS["attn"]


def relative_delta(donor: np.ndarray, backbone: np.ndarray) -> float:
    """‖donor − backbone‖_F / ‖backbone‖_F (in float64)."""
    d, b = np.asarray(donor, np.float64), np.asarray(backbone, np.float64)
    if d.shape != b.shape:
        raise OverlayError(f"donor shape {d.shape} differs from the backbone's {b.shape}: a different architecture")
    return float(math.sqrt(np.sum((d - b) ** 2)) / max(math.sqrt(np.sum(b ** 2)), 1e-30))


def delta_rule(deltas: Mapping[str, float], min_delta: float) -> dict[str, Any]:
    """Which tensors an overlay keeps: those whose relative delta reaches ``min_delta`` (pure).

    Returns kept and dropped names with min / median / max of every delta. An overlay that would keep
    nothing is refused: it would replace nothing the donor changed.
    """
    if not deltas:
        raise OverlayError("the delta rule got no tensors to compare")
    kept = sorted(n for n, d in deltas.items() if d >= min_delta)
    dropped = sorted(n for n, d in deltas.items() if d < min_delta)
    values = sorted(deltas.values())
    if not kept:
        raise OverlayError(f"no donor tensor changed by min_delta = {min_delta:g} or more (largest relative delta "
                           f"{values[-1]:.3g}): the overlay would keep nothing")
    return {"min_delta": min_delta, "kept": kept, "dropped": dropped, "min": values[0],
            "median": statistics.median(values), "max": values[-1],
            "deltas": {n: deltas[n] for n in sorted(deltas)}}


def build(backbone_graph: Path, backbone_state: Mapping[str, np.ndarray], donor_state: Mapping[str, np.ndarray],
          families: str, layers: Sequence[int], min_delta: float, out: Path, *,
          calibration: Callable[[], Mapping[str, Mapping[str, np.ndarray]]] | None = None,
          metadata: Mapping[str, str] = {}) -> dict[str, Any]:
    """Write the overlay of ``backbone_graph`` from the donor's tensors of ``families`` in ``layers``.

    ``calibration()`` gives the donor's calibration means (only called when a kept linear is a
    round-to-nearest encoding with bias correction). Returns the record the receipts carry.
    """
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(backbone_graph))
    if families not in LINEARS:
        raise OverlayError(f"unknown tensor family {families!r} (one of {sorted(LINEARS)})")
    deltas: dict[str, float] = {}
    units = []
    for i in layers:
        for suffix, parts, calib_key in LINEARS[families]:
            names = [f"model.layers.{i}.{p}.weight" for p in parts]
            for name in names:
                if name not in backbone_state or name not in donor_state:
                    raise OverlayError(f"{name}: missing from the {'backbone' if name not in backbone_state else 'donor'}")
                deltas[name] = relative_delta(donor_state[name], backbone_state[name])
            units.append((f"model.layers.{i}.{suffix}", names, f"model.layers.{i}.{calib_key}"))
    rule = delta_rule(deltas, min_delta)
    kept = set(rule["kept"])
    inits = {i.name: i for i in model.graph.initializer}
    tensors: dict[str, np.ndarray] = {}
    means = None
    unit_bytes, saved = {}, 0
    for linear, names, calib_key in units:
        encoding = enc.encoding_of(model, linear)
        size = sum(numpy_helper.to_array(inits[n]).nbytes for n in encoding.names)
        if not any(n in kept for n in names):
            saved += size
            continue
        w = np.concatenate([np.asarray(donor_state[n], np.float32) for n in names])
        mean = None
        if encoding.kind == "rtn" and len(encoding.names) == 4:
            if means is None:
                if calibration is None:
                    raise OverlayError(f"{linear}: bias correction needs the donor's calibration")
                means = calibration()
            mean = means[calib_key]["mean"]
        tensors.update(enc.encode(encoding, w, mean))
        unit_bytes[linear] = {"encoding": encoding.kind, "bits": encoding.bits, "bytes": size}
    sha = sha256_file(backbone_graph)
    write(out, tensors, {"backbone_sha256": sha, "backbone_file": backbone_graph.name, "families": families,
                         "layers": ",".join(map(str, layers)), "min_delta": repr(min_delta), **metadata})
    overlay = read(out, sha)
    check_names(overlay, backbone_graph)
    return {"backbone_sha256": sha, "backbone_bytes": backbone_graph.stat().st_size, "overlay_sha256": sha256_file(out),
            "overlay_bytes": out.stat().st_size, "tensors": len(tensors), "linears": unit_bytes,
            "bytes_saved": saved, "delta": rule}
