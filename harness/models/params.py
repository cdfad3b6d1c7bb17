"""Parameter counts read from a Hugging Face directory's safetensors headers (no weights loaded)."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

from ..errors import ArtifactError


def safetensors_header(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Each tensor's dtype and shape from a safetensors header (8-byte length, JSON), no weights read;
    ValueError saying what is wrong when it is unreadable."""
    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ValueError("shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", head)
        if n > 100_000_000 or n > path.stat().st_size - 8:
            raise ValueError(f"a header of {n} bytes does not fit the file")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"the header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise ValueError("the header is not a JSON object")
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        ok = isinstance(entry, dict) and isinstance(entry.get("dtype"), str) and isinstance(entry.get("shape"), list)
        if not ok:
            raise ValueError(f"tensor {name}: no dtype and shape in the header")
        out[name] = (entry["dtype"], tuple(entry["shape"]))
    return out


def count(hf_dir: Path | str) -> int:
    """Unique parameters stored in the directory's ``*.safetensors`` files (tied weights counted once)."""
    files = sorted(Path(hf_dir).glob("*.safetensors"))
    if not files:
        raise ArtifactError(f"{hf_dir}: no *.safetensors file to count parameters from")
    total = 0
    for f in files:
        try:
            header = safetensors_header(f)
        except (OSError, ValueError) as exc:
            raise ArtifactError(f"{f}: unreadable safetensors header: {exc}") from exc
        total += sum(math.prod(shape) for _, shape in header.values())
    return total
