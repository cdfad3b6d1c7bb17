"""The store's side of a cache archive: what an entry of the artifact store is, and its verification.

An entry is a directory ``<kind>-<key[:20]>`` of the store (:mod:`harness.artifacts`) holding ``artifact.json``
(its kind, full key, inputs, parameters, builder sources' SHA-256 and every file's SHA-256 and bytes) and those
files. :func:`verify` re-hashes every file and checks that the key is the content address of the manifest's
kind, inputs, parameters and sources (what :meth:`ArtifactStore.key` hashes), so a relabelled entry is foreign.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ..artifacts import MANIFEST
from ..errors import ArtifactError
from ..hashing import sha256_bytes, sha256_file, sha256_json

NAME = re.compile(r"^([A-Za-z0-9_][A-Za-z0-9_-]*)-([0-9a-f]{20})$")   # kind-key20; a kind may hold hyphens
KEY = re.compile(r"^[0-9a-f]{64}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
BUILDING = ".tmp-"   # ArtifactStore._build's temporary directories: a build in progress, or a crashed one's
IMPORTING = ".import-"   # an import's temporary directories (harness.cachepack.reader)


@dataclass(frozen=True)
class Entry:
    """A verified entry: what a cache archive's manifest lists for it."""

    name: str
    kind: str
    key: str
    manifest_sha256: str
    manifest_bytes: int
    files: dict[str, dict[str, Any]]

    @property
    def bytes(self) -> int:
        return sum(f["bytes"] for f in self.files.values())

    def record(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "key": self.key, "manifest_sha256": self.manifest_sha256,
                "manifest_bytes": self.manifest_bytes, "files": self.files, "bytes": self.bytes}


def unsafe_path(rel: str) -> str | None:
    """Why ``rel`` may not name a file inside an entry (absolute, ``..``, empty or odd parts), or None."""
    if not rel or rel.startswith("/") or "\\" in rel or "\0" in rel:
        return "is absolute or not a plain relative path"
    if any(part in ("", ".", "..") for part in rel.split("/")):
        return "has an empty, '.' or '..' part"
    if PurePosixPath(rel).as_posix() != rel:
        return "is not a normalised relative path"
    return None


def content_key(manifest: dict[str, Any]) -> str:
    """The key :meth:`ArtifactStore.key` gives the inputs an ``artifact.json`` records."""
    return sha256_json({"kind": manifest.get("kind"), "inputs": manifest.get("inputs"),
                        "params": manifest.get("params"), "sources_sha256": manifest.get("sources_sha256")})


def check_manifest(name: str, raw: bytes, where: str) -> dict[str, Any]:
    """Parse an entry's ``artifact.json`` and check it belongs to the entry named ``name``; ``where`` names it."""
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{where}: unreadable artifact manifest: {exc}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise ArtifactError(f"{where}: not an artifact manifest (no 'files' table)")
    kind, key = manifest.get("kind"), manifest.get("key")
    if not isinstance(key, str) or not KEY.match(key) or not isinstance(kind, str):
        raise ArtifactError(f"{where}: kind {kind!r} / key {key!r} is not a store entry's (64 hex digits)")
    if f"{kind}-{key[:20]}" != name:
        raise ArtifactError(f"{where}: kind {kind!r} and key {key[:20]}… name the entry {kind}-{key[:20]}, not {name}")
    if content_key(manifest) != key:
        raise ArtifactError(f"{where}: key {key} is not the content address of its kind, inputs, params and "
                            f"sources ({content_key(manifest)}): a foreign entry")
    for rel, f in manifest["files"].items():
        problem = unsafe_path(rel) or (None if rel != MANIFEST else "is the manifest's own name")
        if problem:
            raise ArtifactError(f"{where}: file {rel!r} {problem}")
        if not (isinstance(f, dict) and isinstance(f.get("sha256"), str) and SHA256.match(f["sha256"])
                and type(f.get("bytes")) is int and f["bytes"] >= 0):
            raise ArtifactError(f"{where}: file {rel!r}: {f!r} is not {{sha256: 64 hex digits, bytes: an integer}}")
    return manifest


def verify(path: Path) -> Entry:
    """Re-hash every file of the store entry at ``path`` against its ``artifact.json``; raise naming what differs."""
    path = Path(path)
    if not NAME.match(path.name):
        raise ArtifactError(f"{path}: not a store entry's name (<kind>-<20 hex digits of the key>)")
    try:
        raw = (path / MANIFEST).read_bytes()
    except OSError as exc:
        raise ArtifactError(f"{path / MANIFEST}: missing or unreadable ({exc.strerror or exc}): "
                            f"an incomplete entry") from None
    manifest = check_manifest(path.name, raw, str(path / MANIFEST))
    for rel, pin in manifest["files"].items():
        file = path / rel
        try:
            st = os.lstat(file)
        except OSError:
            raise ArtifactError(f"{file}: missing (pinned sha256 {pin['sha256']})") from None
        if not stat.S_ISREG(st.st_mode):
            raise ArtifactError(f"{file}: not a regular file (a symbolic link or a directory); not exported")
        if st.st_size != pin["bytes"]:
            raise ArtifactError(f"{file}: size {st.st_size} differs from its pin {pin['bytes']} bytes")
        digest = sha256_file(file)
        if digest != pin["sha256"]:
            raise ArtifactError(f"{file}: SHA-256 {digest} differs from its pin {pin['sha256']}")
    files = {rel: {"sha256": f["sha256"], "bytes": f["bytes"]} for rel, f in sorted(manifest["files"].items())}
    return Entry(path.name, manifest["kind"], manifest["key"], sha256_bytes(raw), len(raw), files)


@dataclass(frozen=True)
class Listed:
    """One directory of a store root: an entry (verified, or why not) or a build's temporary directory."""

    name: str
    kind: str | None
    key: str | None
    bytes: int | None
    status: str           # "ok", "building", "incomplete", "fails"
    problem: str | None = None


def _peek(path: Path) -> tuple[str | None, int | None]:
    """An entry's full key and bytes from its manifest, for listing one that does not verify (best effort)."""
    try:
        m = json.loads((path / MANIFEST).read_text())
        return m.get("key"), sum(f["bytes"] for f in m["files"].values())
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None, None


def scan(root: Path, check: bool = True) -> list[Listed]:
    """Every entry of the store at ``root`` (sorted by name), verified when ``check``; builds in progress too."""
    out = []
    for path in sorted(Path(root).iterdir()) if Path(root).is_dir() else []:
        if path.name.startswith((BUILDING, IMPORTING)) and path.is_dir():
            what = "build" if path.name.startswith(BUILDING) else "import"
            out.append(Listed(path.name, None, None, None, "building",
                              f"{'a' if what == 'build' else 'an'} {what} in progress, or a crashed {what}'s leftover"))
            continue
        m = NAME.match(path.name)
        if path.name.startswith(".") or not m or not path.is_dir():
            continue
        if not (path / MANIFEST).is_file():
            out.append(Listed(path.name, m.group(1), None, None, "incomplete", f"no {MANIFEST}"))
        elif check:
            try:
                e = verify(path)
                out.append(Listed(path.name, e.kind, e.key, e.bytes, "ok"))
            except ArtifactError as exc:
                out.append(Listed(path.name, m.group(1), *_peek(path), "fails", str(exc)))
        else:
            out.append(Listed(path.name, m.group(1), *_peek(path), "unchecked"))
    return out
