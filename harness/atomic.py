"""Atomic file writes: a crashed run never leaves a half-written file behind."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Iterator


@contextlib.contextmanager
def replacing(path: Path | str, shared: bool = False) -> Iterator[BinaryIO]:
    """A binary file to write ``path``'s new content into: a temporary file in the same directory, fsynced and
    renamed over ``path`` when the block ends, deleted when it raises (nothing half-written is ever at ``path``).
    ``shared``: readable by others as the umask allows (mkstemp's 0600 otherwise)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            if shared:
                mask = os.umask(0o022)
                os.umask(mask)
                os.fchmod(f.fileno(), 0o666 & ~mask)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_bytes(path: Path | str, data: bytes) -> None:
    """Write to a temporary file in the same directory, fsync, then rename over ``path``."""
    with replacing(path) as f:
        f.write(data)


def append_lines(path: Path | str, data: bytes) -> bool:
    """Append whole lines (``data`` ends with a newline) to an append-only log, fsynced; returns False, writing
    nothing, when the file's last line is unterminated (a torn write the caller refuses to extend)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        if f.tell() > 0:
            with open(path, "rb") as check:
                check.seek(-1, os.SEEK_END)
                if check.read(1) != b"\n":
                    return False
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return True


def dumps(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"


def write_json(path: Path | str, value: Any) -> None:
    # Serialize first: an unserializable value must fail before anything touches the disk.
    write_bytes(path, dumps(value).encode("utf-8"))


def write_text(path: Path | str, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))
