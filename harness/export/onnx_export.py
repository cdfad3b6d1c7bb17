"""Export an HF Llama-family directory (Llama, Mistral, Qwen2) to ONNX (fp32) and quantize it to q8 (dynamic int8)
and q4 (MatMulNBits)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..domain import GRAPH_FILES
from ..hashing import sha256_file
from .params import EXPORT_DEFAULTS, GRAPHS, HEAD_BITS, Q4_HEADS, Q4_METHODS, check_params  # noqa: F401

COPIED = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
          "special_tokens_map.json", "chat_template.jinja")


def export_fp32(hf_dir: Path, graph_path: Path, opset: int, fault: str | None = None) -> dict[str, Any]:
    from .graph import KVDecoder, io_names   # torch: imported by what exports, not by every pytest that loads the plugin
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    model.eval()
    wrapper = KVDecoder(model, fault=fault).eval()
    cfg = model.config
    n_layers = cfg.num_hidden_layers
    n_kv = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    batch, seq, past_len = 2, 3, 4
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), dtype=torch.long)
    mask = torch.ones(batch, past_len + seq, dtype=torch.long)
    pos = (torch.arange(seq, dtype=torch.long) + past_len).unsqueeze(0).expand(batch, seq).contiguous()
    past = [torch.zeros(batch, n_kv, past_len, head_dim) for _ in range(2 * n_layers)]
    inputs, outputs = io_names(n_layers)
    axes = {"input_ids": {0: "batch_size", 1: "sequence_length"},
            "attention_mask": {0: "batch_size", 1: "total_sequence_length"},
            "position_ids": {0: "batch_size", 1: "sequence_length"},
            "logits": {0: "batch_size", 1: "sequence_length"}}
    for name in inputs[3:]:
        axes[name] = {0: "batch_size", 2: "past_sequence_length"}
    for name in outputs[1:]:
        axes[name] = {0: "batch_size", 2: "total_sequence_length"}
    graph_path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(wrapper, (ids, mask, pos, *past), str(graph_path), input_names=inputs,
                          output_names=outputs, dynamic_axes=axes, opset_version=opset,
                          do_constant_folding=True, dynamo=False)
    return {"layers": n_layers, "kv_heads": n_kv, "head_dim": head_dim, "vocab_size": cfg.vocab_size,
            "parameters": int(sum(p.numel() for p in model.parameters())), "fault": fault,
            "model_type": cfg.model_type}


def quantize_q8(src: Path, dst: Path, per_channel: bool) -> dict[str, Any]:
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    logging.getLogger().setLevel(logging.WARNING)
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=per_channel,
                     op_types_to_quantize=["MatMul"])
    return {"method": "quantize_dynamic", "weight_type": "QInt8", "per_channel": per_channel, "op_types": ["MatMul"]}


def quantize_q4(src: Path, dst: Path, block_size: int, symmetric: bool, accuracy_level: int,
                method: str = "minmax", head: str = "q4") -> dict[str, Any]:
    import logging

    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    from . import lattice

    if method not in Q4_METHODS or head not in ("q4", "fp32"):
        raise ValueError(f"q4_method must be one of {Q4_METHODS} and q4_head one of {Q4_HEADS}, got {method!r}, {head!r}")
    # The quantizer turns the root logger up to INFO and logs every node; keep the run's log readable.
    logging.getLogger().setLevel(logging.WARNING)
    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    model = onnx.load(str(src))
    heads = [n.name for n in model.graph.node if n.op_type == "MatMul" and "logits" in n.output]
    exclude = list(heads) if head == "fp32" else []
    info: dict[str, Any] = {}
    if method == "lattice":
        model, stats = lattice.rewrite(model, block_size, accuracy_level)
        exclude += stats["correction_nodes"]
        info = {"lattice_exact_weights": stats["exact"],
                "lattice_max_abs_reconstruction_error": stats["max_abs_reconstruction_error"]}
    quantizer = MatMulNBitsQuantizer(model, block_size=block_size, is_symmetric=symmetric,
                                     accuracy_level=accuracy_level or None, nodes_to_exclude=exclude)
    quantizer.process()
    quantizer.model.save_model_to_file(str(dst), use_external_data_format=False)
    return {"method": "MatMulNBits", "bits": 4, "block_size": block_size, "symmetric": symmetric,
            "accuracy_level": accuracy_level, "q4_method": method, "head": head, "head_nodes": heads, **info}


def build_fused(hf_dir: Path, out: Path, p: dict[str, Any], progress,
                calibration_texts: list[str] | None = None) -> tuple[dict, dict, dict, dict]:
    from . import fused

    t0 = time.monotonic()
    progress("loading the HF weights for the fused graph")
    state, cfg = fused.load_state(hf_dir)
    timings = {"load_s": round(time.monotonic() - t0, 3)}
    calibration = None
    if p["bias_correction"]:
        if not calibration_texts:
            raise ValueError("bias_correction needs calibration text (the campaign's training corpus)")
        t0 = time.monotonic()
        progress("calibrating: mean input of every linear layer on the training corpus (PyTorch)")
        calibration = fused.calibrate(hf_dir, calibration_texts)
        timings["calibration_s"] = round(time.monotonic() - t0, 3)
    head_level = p["q4_head_accuracy_level"]
    plan = {"fp32": dict(bits=32, head_bits=32, accuracy_level=0),
            "q8": dict(bits=8, head_bits=8, accuracy_level=p["q8_accuracy_level"], calibration=calibration,
                       lattice=p["q4_method"] == "lattice"),
            "q4": dict(bits=4, head_bits=HEAD_BITS[p["q4_head"]], accuracy_level=p["q4_accuracy_level"],
                       head_level=head_level, calibration=calibration,
                       lattice=p["q4_method"] == "lattice")}
    made = {}
    for dtype, kw in plan.items():
        t0 = time.monotonic()
        progress(f"writing the fused {dtype} graph ({', '.join(f'{k} {v}' for k, v in kw.items() if k != 'calibration')})")
        made[dtype] = fused.export(state, cfg, out / GRAPH_FILES[dtype], block=p["q4_block_size"], opset=p["opset"], **kw)
        timings[f"{dtype}_s"] = round(time.monotonic() - t0, 3)
    if calibration:
        made["q4"]["calibration_tokens"] = int(next(iter(calibration.values()))["tokens"])
    graph = {k: made["fp32"][k] for k in ("layers", "kv_heads", "head_dim", "vocab_size")}
    tied = "lm_head.weight" in state and np.array_equal(state["lm_head.weight"], state["model.embed_tokens.weight"])
    graph["parameters"] = int(sum(v.size for k, v in state.items() if not (tied and k == "lm_head.weight")))
    graph["model_type"] = cfg.model_type
    quant = {d: {"method": "MatMulNBits" if d != "fp32" else "none", **made[d]} for d in ("q8", "q4")}
    return graph, quant, timings, made["fp32"]


def build(hf_dir: Path, out: Path, params: dict[str, Any], progress, fault: str | None = None,
          calibration_texts: list[str] | None = None) -> dict[str, Any]:
    """Write the transformers.js layout into ``out``: config, tokenizer, onnx/*.onnx and export.json."""
    p = {**EXPORT_DEFAULTS, **params}
    check_params(p, fault)
    for name in COPIED:
        if (hf_dir / name).exists():
            shutil.copy2(hf_dir / name, out / name)
    if p["graph"] == "fused":
        info, quant, timings, fp32 = build_fused(hf_dir, out, p, progress, calibration_texts)
        return _record(out, p, {**info, "fused_fp32": fp32}, quant, timings, kv="share")
    timings = {}
    t0 = time.monotonic()
    progress("exporting fp32 with the TorchScript ONNX exporter")
    info = export_fp32(hf_dir, out / GRAPH_FILES["fp32"], p["opset"], fault=fault)
    timings["fp32_s"] = round(time.monotonic() - t0, 3)
    t0 = time.monotonic()
    progress("quantizing q8 (dynamic int8 MatMul)")
    q8 = quantize_q8(out / GRAPH_FILES["fp32"], out / GRAPH_FILES["q8"], p["q8_per_channel"])
    timings["q8_s"] = round(time.monotonic() - t0, 3)
    t0 = time.monotonic()
    progress(f"quantizing q4 (MatMulNBits, block {p['q4_block_size']}, {p['q4_method']}, head {p['q4_head']})")
    q4 = quantize_q4(out / GRAPH_FILES["fp32"], out / GRAPH_FILES["q4"], p["q4_block_size"], p["q4_symmetric"],
                     p["q4_accuracy_level"], p["q4_method"], p["q4_head"])
    timings["q4_s"] = round(time.monotonic() - t0, 3)
    for leftover in (out / "onnx").glob("*-opt.onnx"):
        leftover.unlink()
    return _record(out, p, info, {"q8": q8, "q4": q4}, timings, kv="concat")


def _record(out: Path, p: dict[str, Any], info: dict[str, Any], quant: dict[str, Any], timings: dict[str, Any],
            kv: str) -> dict[str, Any]:
    """export.json: ``kv`` says how a caller binds the cache (concat: present = past + new, a new buffer
    each step; share: GroupQueryAttention writes in place when past and present are one buffer)."""
    from .graph import io_names

    files = {str(f.relative_to(out)): {"sha256": sha256_file(f), "bytes": f.stat().st_size}
             for f in sorted(out.rglob("*")) if f.is_file()}
    record = {"kind": "export", "builder": "harness.export.onnx_export", "params": p, "graph": info,
              "layout": p["graph"], "kv": kv,
              "quantization": quant, "seconds": timings, "files": files,
              "inputs": io_names(info["layers"])[0], "outputs": io_names(info["layers"])[1]}
    (out / "export.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return {k: v for k, v in record.items() if k != "files"}
