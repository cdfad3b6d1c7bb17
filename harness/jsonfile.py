"""Reading JSON that Gatehouse wrote and a disk, an editor or another tool may have changed: strictly.

UTF-8 only, no ``NaN`` / ``Infinity`` literals (JSON has none; Python's reader would accept them and a
report would carry them into its figures), and every problem raised as :class:`~harness.errors.ReceiptError`
naming the file (and the line, for JSON lines), never a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import ReceiptError


def _refuse_constant(name: str):
    raise ValueError(f"non-finite number {name} (JSON has none)")


def loads(raw: bytes | str, source: str) -> Any:
    """Parse one JSON document; ``source`` names it in the error (a path, or ``path:line``)."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        raise ReceiptError(f"{source}: not UTF-8 (byte {exc.start}: {exc.reason})") from None
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise ReceiptError(f"{source}: not valid JSON: {exc}") from None
    except (ValueError, RecursionError) as exc:
        raise ReceiptError(f"{source}: {exc}") from None


def load(path: Path | str, what: str = "file") -> Any:
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ReceiptError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    return loads(raw, str(path))
