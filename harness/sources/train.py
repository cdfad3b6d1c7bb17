"""``source = "train"``: the CI model, trained here from the campaign's corpus (harness/models/tiny.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..fields import Where

KEYS = {"train"}
ARCHITECTURES = ("llama", "qwen2")


def parse(table: dict[str, Any], where: Where, base: Path) -> dict[str, Any]:
    train = table.get("train")
    if not isinstance(train, dict):
        raise where.fail("a trained model needs a [models.train] table")
    arch = train.get("architecture", "llama")
    if arch not in ARCHITECTURES:
        raise where.child("train").child("architecture").fail(
            f"unknown architecture {arch!r} (the trainer builds: {', '.join(ARCHITECTURES)})")
    return {"train": dict(train), "architecture": arch}
