"""Parameter counts read from a Hugging Face directory's safetensors headers (no weights loaded)."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

from ..errors import ArtifactError


def count(hf_dir: Path | str) -> int:
    """Unique parameters stored in the directory's ``*.safetensors`` files (tied weights counted once)."""
    files = sorted(Path(hf_dir).glob("*.safetensors"))
    if not files:
        raise ArtifactError(f"{hf_dir}: no *.safetensors file to count parameters from")
    total = 0
    for f in files:
        with open(f, "rb") as fh:
            try:
                (n,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(n))
            except (struct.error, json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise ArtifactError(f"{f}: unreadable safetensors header: {exc}") from exc
        total += sum(math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")
    return total
