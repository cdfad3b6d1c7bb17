"""``source = "hf"``: a local Hugging Face directory (config.json, weights, tokenizer), exported by Gatehouse."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..fields import Where
from . import archs
from .paths import resolve

KEYS = {"path"}
WEIGHTS = ("*.safetensors", "pytorch_model*.bin")
TOKENIZER = ("tokenizer.json", "tokenizer.model", "vocab.json")


def read_config(directory: Path, where: Where) -> dict[str, Any]:
    path = directory / "config.json"
    if not path.is_file():
        raise where.fail(f"{directory} has no config.json (a Hugging Face model directory has one)")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise where.fail(f"{path} is not readable JSON: {exc}") from None
    if not isinstance(config, dict):
        raise where.fail(f"{path} is not a JSON object")
    return config


def has_weights(directory: Path) -> bool:
    return any(any(directory.glob(g)) for g in WEIGHTS)


def check_directory(directory: Path, where: Where) -> dict[str, Any]:
    """A Hugging Face directory Gatehouse can export: its config (architecture checked), weights, tokenizer."""
    if not directory.is_dir():
        raise where.fail(f"{directory} does not exist or is not a directory")
    config = read_config(directory, where)
    found = archs.problems(config)
    if found:
        raise where.fail(f"{directory / 'config.json'}: " + "; ".join(found))
    if not has_weights(directory):
        raise where.fail(f"{directory} has no weights ({' or '.join(WEIGHTS)})")
    if not any((directory / t).is_file() for t in TOKENIZER):
        raise where.fail(f"{directory} has no tokenizer ({', '.join(TOKENIZER)})")
    return config


def parse(table: dict[str, Any], where: Where, base: Path) -> dict[str, Any]:

    if not isinstance(table.get("path"), str) or not table["path"]:
        raise where.fail("an hf model needs path = \"<a Hugging Face directory>\"")
    directory = resolve(base, table["path"])
    config = check_directory(directory, where.child("path"))
    return {"path": directory, "architecture": config["model_type"]}
