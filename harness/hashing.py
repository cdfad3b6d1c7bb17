"""SHA-256 of files, trees and JSON values, the identities every receipt pins."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterable

_CHUNK = 1 << 20


def sha256_file(path: Path | str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


_HASHED: dict[tuple, str] = {}


def sha256_file_once(path: Path | str) -> str:
    """:func:`sha256_file`, once per process per file state (device, inode, size, mtime, ctime): rewriting a file
    changes its mtime and ctime, replacing it changes its inode, so a changed file is hashed again."""
    p = Path(path).resolve()
    st = p.stat()
    key = (str(p), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if key not in _HASHED:
        _HASHED[key] = sha256_file(p)
    return _HASHED[key]


def canonical_json(value: Any) -> str:
    """The one JSON spelling hashed for identities: sorted keys, no spaces, no NaN."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_json(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def sha256_json_ids(ids: list[int]) -> str:
    """SHA-256 of a token id list as ``json.dumps`` writes it (``[1, 2]``, not canonical JSON): the held-out ids'
    hash in the evaluation keys that read them; the spelling is kept so stored keys stay valid."""
    return sha256_bytes(json.dumps(ids).encode())


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_sources(paths: Iterable[Path | str]) -> str:
    """Hash a set of source files by name and content, independent of the order given."""
    h = hashlib.sha256()
    for path in sorted(Path(p).resolve() for p in paths):
        h.update(path.name.encode())
        h.update(b"\0")
        h.update(sha256_file(path).encode())
        h.update(b"\n")
    return h.hexdigest()


def file_identity(path: Path | str) -> dict[str, Any]:
    path = Path(path)
    return {"path": str(path), "sha256": sha256_file(path), "bytes": path.stat().st_size}
