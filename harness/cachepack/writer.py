"""Writing a cache archive: the selected entries, verified, into one tar written atomically.

The archive is an uncompressed tar (PAX): its first member ``gatehouse-cache.json`` lists every entry (name,
kind, key, its ``artifact.json``'s SHA-256 and bytes, every file's SHA-256 and bytes) and where the archive came
from (harness version and source SHA-256, git commit, machine); then ``entries/<name>/artifact.json`` and
``entries/<name>/<file>`` for each entry. Every file is hashed again as it is copied, so the archive holds
exactly the bytes its manifest pins. ONNX weights compress poorly (gzip -1: 1,046 MB to 717 MB at 35 MB/s on
one core), so the archive is not compressed; a gzip-compressed copy imports too.
"""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from .. import atomic
from ..artifacts import MANIFEST
from ..errors import ArtifactError
from .entries import BUILDING, IMPORTING, Entry, scan, verify

FORMAT = "gatehouse-cache"
VERSION = 1
HEADER = "gatehouse-cache.json"
PREFIX = "entries"
_BUF = 1 << 20
_UNDER_WAY = re.compile(rf"^(?:{re.escape(BUILDING)}|{re.escape(IMPORTING)})([A-Za-z0-9_]+)-([0-9a-f]{{20}})-")
Member = tuple[str, Path, str, int]   # archive name, source file, its SHA-256, its bytes


class _Hashing:
    """A file object that hashes what passes through it (``write`` or ``read``) and counts the bytes."""

    def __init__(self, f: BinaryIO):
        self.f, self.h, self.bytes = f, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.h.update(data)
        self.bytes += len(data)
        return self.f.write(data)

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.h.update(data)
        self.bytes += len(data)
        return data

    def hexdigest(self) -> str:
        return self.h.hexdigest()


def _add_file(tar: tarfile.TarFile, arcname: str, path: Path, sha256: str, size: int) -> None:
    info = tarfile.TarInfo(arcname)
    info.size, info.mode, info.mtime = size, 0o644, int(time.time())
    with open(path, "rb") as f:
        src = _Hashing(f)
        tar.addfile(info, src)
    if src.bytes != size or src.hexdigest() != sha256:
        raise ArtifactError(f"{path}: changed while it was archived (SHA-256 {src.hexdigest()}, {src.bytes} bytes; "
                            f"pinned {sha256}, {size} bytes); no archive written")


def write_archive(dest: Path | str, header: dict[str, Any], members: Iterable[Member]) -> tuple[str, int]:
    """Write ``header`` then ``members`` into a tar at ``dest`` through a temporary file renamed into place, so a
    crash (an exception from ``members`` too) leaves no archive; returns the archive's SHA-256 and bytes."""
    with atomic.replacing(dest, shared=True) as raw:     # an archive is for sharing: mkstemp's 0600 is not
        out = _Hashing(raw)
        with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT, bufsize=_BUF, copybufsize=_BUF) as tar:
            data = atomic.dumps(header).encode("utf-8")
            info = tarfile.TarInfo(HEADER)
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(data))
            for arcname, path, sha256, size in members:
                _add_file(tar, arcname, path, sha256, size)
    return out.hexdigest(), out.bytes


def matches_key(k: str, name: str, key: str | None) -> bool:
    """``--key K``: the entry's name, or a prefix (8 hex digits or more) of its key (``key``; None: only the
    20 digits of ``name`` are known)."""
    if k == name:
        return True
    if len(k) < 8 or re.fullmatch("[0-9a-f]+", k) is None:
        return False
    if key is not None:
        return key.startswith(k)
    key20 = name.rsplit("-", 1)[-1]
    return key20.startswith(k) if len(k) <= 20 else k.startswith(key20)


@dataclass
class Selection:
    entries: list[Entry] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)   # (directory name, why it is not exported)


def select(root: Path, kinds: Sequence[str] = (), keys: Sequence[str] = ()) -> Selection:
    """The verified entries of ``root`` of any of ``kinds`` or matching any of ``keys`` (all when neither is
    given), and the skipped ones with why; an unknown kind, a key matching nothing or a named entry that does
    not verify is an error naming it."""
    listed = scan(root, check=False)
    present = sorted({x.kind for x in listed if x.kind})
    for k in kinds:
        if k not in present:
            raise ArtifactError(f"--kind {k}: no entry of that kind in {root} (kinds there: {', '.join(present) or 'none'})")
    for k in keys:
        if not any(x.kind and matches_key(k, x.name, x.key) for x in listed if x.status != "building"):
            raise ArtifactError(f"--key {k}: no entry of {root} has that name or key (8+ hex digits of a key)")

    def wanted(x) -> bool:
        if x.status == "building":
            m = _UNDER_WAY.match(x.name)
            kind, name = (m.group(1), f"{m.group(1)}-{m.group(2)}") if m else (None, x.name)
            return not (kinds or keys) or kind in kinds or any(matches_key(k, name, None) for k in keys)
        return not (kinds or keys) or x.kind in kinds or any(matches_key(k, x.name, x.key) for k in keys)

    sel = Selection()
    for x in filter(wanted, listed):
        if x.status != "unchecked":
            sel.skipped.append((x.name, x.problem or x.status))
            continue
        try:
            sel.entries.append(verify(Path(root) / x.name))
        except ArtifactError as exc:
            if any(matches_key(k, x.name, x.key) for k in keys):
                raise ArtifactError(f"--key {x.name}: the entry does not verify: {exc}") from None
            sel.skipped.append((x.name, f"does not verify: {exc}"))
    return sel


def header(root: Path, entries: list[Entry]) -> dict[str, Any]:
    from .. import __version__, fingerprint

    return {"format": FORMAT, "version": VERSION,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "harness": {"version": __version__, **fingerprint.harness_source()},
            "machine": {**fingerprint.collect_platform(), "fingerprint": fingerprint.machine()["fingerprint"]},
            "store": str(root), "entries": [e.record() for e in entries]}


def members(root: Path, entries: list[Entry]) -> Iterator[Member]:
    for e in entries:
        yield f"{PREFIX}/{e.name}/{MANIFEST}", root / e.name / MANIFEST, e.manifest_sha256, e.manifest_bytes
        for rel, f in e.files.items():
            yield f"{PREFIX}/{e.name}/{rel}", root / e.name / rel, f["sha256"], f["bytes"]


@dataclass
class Exported:
    path: Path
    entries: list[Entry]
    skipped: list[tuple[str, str]]
    sha256: str
    bytes: int
    seconds: float


def export(root: Path | str, dest: Path | str, kinds: Sequence[str] = (), keys: Sequence[str] = ()) -> Exported:
    """Write the verified entries of the store at ``root`` (``kinds``/``keys`` select; see :func:`select`) into
    one archive at ``dest``, replaced atomically."""
    t0 = time.monotonic()
    root = Path(root).resolve()
    if not root.is_dir():
        raise ArtifactError(f"{root}: no artifact store there")
    sel = select(root, kinds, keys)
    if not sel.entries:
        raise ArtifactError(f"{root}: no complete, verified entry to export"
                            + "".join(f"; {n}: {why}" for n, why in sel.skipped[:5]))
    digest, size = write_archive(dest, header(root, sel.entries), members(root, sel.entries))
    return Exported(Path(dest), sel.entries, sel.skipped, digest, size, time.monotonic() - t0)
