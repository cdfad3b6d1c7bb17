"""Importing a cache archive: every file re-verified by SHA-256 before its entry becomes visible in the store.

Each entry is extracted into a temporary directory inside the store (``.import-<name>-…``), every file hashed as
it is written and checked against the archive's manifest; when the entry is complete its ``artifact.json`` is
checked too (its SHA-256 is the manifest's, its file pins are the manifest's, its key is the content address
of its inputs), and only then is the directory renamed into place, under the store's own lock for that key
(the lock :meth:`ArtifactStore.get_or_build` takes). An entry already in the store is verified and left as it
is, never overwritten. A refused entry (a file that differs, a missing or extra file, a link, a path outside
the entry) is named with why and never becomes visible; the archive's other entries still import.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import tarfile
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import locks
from ..artifacts import MANIFEST
from ..errors import ArtifactError
from ..hashing import sha256_file
from .entries import IMPORTING, KEY, NAME, SHA256, check_manifest, unsafe_path, verify
from .writer import FORMAT, HEADER, PREFIX, VERSION

HEADER_MAX = 64 << 20
_BUF = 1 << 20
_TAR_ERRORS = (tarfile.TarError, EOFError, zlib.error, OSError)


@dataclass
class Imported:
    archive: Path
    source: dict[str, Any]                       # the archive's harness and machine
    imported: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)   # (entry, member or archive; why)
    bytes: int = 0
    seconds: float = 0.0


def read_header(tar: tarfile.TarFile, archive: Path) -> tuple[dict[str, Any], tarfile.TarInfo]:
    """The archive's manifest (its first member, returned too), checked for format, version and one record per
    entry name."""
    foreign = f"{archive}: not a Gatehouse cache archive"
    try:
        first = tar.next()
        if first is None or first.name != HEADER or not first.isreg():
            raise ArtifactError(f"{foreign} (its first member is {first.name if first else None!r}, not {HEADER})")
        if first.size > HEADER_MAX:
            raise ArtifactError(f"{foreign} ({HEADER} is {first.size} bytes)")
        raw = tar.extractfile(first).read()
    except _TAR_ERRORS as exc:
        raise ArtifactError(f"{foreign} (unreadable tar: {exc})") from None
    try:
        head = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{foreign} ({HEADER} is not JSON: {exc})") from None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        fmt = head.get("format") if isinstance(head, dict) else head
        raise ArtifactError(f"{foreign} ({HEADER} format {fmt!r}, not {FORMAT!r})")
    if head.get("version") != VERSION:
        raise ArtifactError(f"{archive}: {HEADER} version {head.get('version')!r}: this harness reads version "
                            f"{VERSION} only")
    entries = head.get("entries")
    if not isinstance(entries, list):
        raise ArtifactError(f"{archive}: {HEADER} entries: {type(entries).__name__}, not a list")
    names = set()
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or not isinstance(e.get("name"), str) or e["name"] in names:
            raise ArtifactError(f"{archive}: {HEADER} entries[{i}]: {str(e)[:80]!r} has no name, or one listed twice")
        names.add(e["name"])
    return head, first


def spec_problem(e: dict[str, Any]) -> str | None:
    """Why the archive manifest's record of an entry is not a store entry's (a foreign entry), or None."""
    name, kind, key = e["name"], e.get("kind"), e.get("key")
    if not NAME.match(name) or not isinstance(key, str) or not KEY.match(key) or f"{kind}-{key[:20]}" != name:
        return f"name {name!r}, kind {kind!r} and key {key!r} are not a store entry's (<kind>-<20 hex digits of the key>)"
    if not isinstance(e.get("files"), dict):
        return f"files: {e.get('files')!r} is not a table of files"
    if MANIFEST in e["files"]:
        return f"file {MANIFEST!r} is listed among its files (it is the entry's manifest)"
    own = {"sha256": e.get("manifest_sha256"), "bytes": e.get("manifest_bytes")}
    for rel, pin in [*e["files"].items(), (MANIFEST, own)]:
        why = unsafe_path(rel)
        if why:
            return f"file {rel!r} {why}"
        if not (isinstance(pin, dict) and isinstance(pin.get("sha256"), str) and SHA256.match(pin["sha256"])
                and type(pin.get("bytes")) is int and pin["bytes"] >= 0):
            return f"file {rel!r}: {pin!r} is not {{sha256: 64 hex digits, bytes: an integer}}"
    return None


@dataclass
class _State:
    spec: dict[str, Any]
    tmp: Path | None = None
    found: dict[str, str] = field(default_factory=dict)
    present: bool = False
    outcome: str | None = None          # "imported", "present", "refused"

    @property
    def name(self) -> str:
        return self.spec["name"]

    @property
    def expected(self) -> dict[str, dict[str, Any]]:
        return {**self.spec["files"],
                MANIFEST: {"sha256": self.spec["manifest_sha256"], "bytes": self.spec["manifest_bytes"]}}


class _Unreadable(Exception):
    """Reading the archive failed (not writing the store): the import names the archive."""


def _chunks(src) -> Iterator[bytes]:
    while True:
        try:
            chunk = src.read(_BUF)
        except _TAR_ERRORS as exc:
            raise _Unreadable(exc) from exc
        if not chunk:
            return
        yield chunk


def _open(archive: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(archive, "r:*")
    except _TAR_ERRORS as exc:
        raise ArtifactError(f"{archive}: not a Gatehouse cache archive (not a tar file: {exc})") from None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Import:
    """One archive's import into one store: the entries' states as the archive's members stream past."""

    def __init__(self, archive: Path, root: Path, head: dict[str, Any]):
        self.root = root
        self.result = Imported(archive, {k: head.get(k) for k in ("created_at", "harness", "machine", "store")})
        self.states = {e["name"]: _State(e) for e in head["entries"]}
        for st in self.states.values():
            problem = spec_problem(st.spec)
            if problem:
                self._fail(st, problem)

    def _fail(self, st: _State, problem: str) -> None:
        st.outcome = "refused"
        self._drop(st)
        self.result.refused.append((st.name, f"{problem}; not imported"))

    def _drop(self, st: _State) -> None:
        if st.tmp is not None:
            shutil.rmtree(st.tmp, ignore_errors=True)
            st.tmp = None

    def _stray(self, m: tarfile.TarInfo, why: str) -> None:
        self.result.refused.append((m.name, f"member {m.name!r} {why}; not extracted"))

    def member(self, tar: tarfile.TarFile, m: tarfile.TarInfo) -> None:
        parts = m.name.split("/")
        if m.isdir() and not unsafe_path(m.name):
            return     # a directory: harmless, the entry's directories are made as its files are written
        st = self.states.get(parts[1]) if len(parts) >= 3 and parts[0] == PREFIX else None
        if st is None:
            outside = unsafe_path(m.name)
            return self._stray(m, outside + " (a path outside the store)" if outside else
                               "belongs to no entry the archive's manifest lists")
        if st.outcome == "refused" or st.present:
            return
        if st.outcome is not None:
            return self._stray(m, f"comes after entry {st.name} was complete")
        if st.tmp is None:
            if (self.root / st.name / MANIFEST).exists():
                st.present = True
                return
            st.tmp = self.root / f"{IMPORTING}{st.name}-{os.getpid()}-{secrets.token_hex(4)}"
            os.mkdir(st.tmp)
        rel = "/".join(parts[2:])
        problem = self._member_problem(m, rel, st) or self._extract(tar, m, st, rel)
        if problem:
            return self._fail(st, problem)
        if len(st.found) == len(st.expected):
            self._complete(st)

    @staticmethod
    def _member_problem(m: tarfile.TarInfo, rel: str, st: _State) -> str | None:
        if m.issym() or m.islnk():
            return f"member {m.name!r} is a {'symbolic' if m.issym() else 'hard'} link (to {m.linkname!r})"
        if not m.isreg():
            return f"member {m.name!r} is not a regular file (tar type {m.type!r})"
        why = unsafe_path(rel)
        if why:
            return f"member {m.name!r} {why}"
        pin = st.expected.get(rel)
        if pin is None:
            return f"member {m.name!r} is not one of the entry's files in the archive's manifest"
        if rel in st.found:
            return f"member {m.name!r} appears twice"
        if m.size != pin["bytes"]:
            return f"{rel}: {m.size} bytes in the archive, its manifest pins {pin['bytes']}"
        return None

    def _extract(self, tar: tarfile.TarFile, m: tarfile.TarInfo, st: _State, rel: str) -> str | None:
        """Write the member into the entry's temporary directory, hashing it; why it differs, or None."""
        dest, h, n = st.tmp / rel, hashlib.sha256(), 0
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            with open(dest, "xb") as out:
                for chunk in _chunks(tar.extractfile(m)):
                    h.update(chunk)
                    n += len(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
        except OSError as exc:
            return f"{rel}: could not be written to {dest}: {exc.strerror or exc}"
        pin = st.expected[rel]
        if h.hexdigest() != pin["sha256"] or n != pin["bytes"]:
            return f"{rel}: SHA-256 {h.hexdigest()} ({n} bytes) differs from the archive manifest's {pin['sha256']}"
        st.found[rel] = h.hexdigest()
        return None

    def _complete(self, st: _State) -> None:
        """Every file is in and matches the archive's manifest: check ``artifact.json`` agrees, then place it."""
        try:
            manifest = check_manifest(st.name, (st.tmp / MANIFEST).read_bytes(), f"{st.name}/{MANIFEST}")
        except ArtifactError as exc:
            return self._fail(st, str(exc))
        if manifest["key"] != st.spec["key"]:
            return self._fail(st, f"{MANIFEST}: key {manifest['key']} differs from the archive manifest's {st.spec['key']}")
        pins, ours = manifest["files"], st.spec["files"]
        if set(pins) != set(ours):
            return self._fail(st, f"{MANIFEST} lists {sorted(set(pins) ^ set(ours))[:3]} where the archive manifest "
                                  f"does not (or the other way round)")
        for rel, pin in sorted(pins.items()):
            if st.found[rel] != pin["sha256"] or ours[rel]["bytes"] != pin["bytes"]:
                return self._fail(st, f"{rel}: SHA-256 {st.found[rel]} differs from its {MANIFEST} pin {pin['sha256']}")
        self._place(st)

    def _place(self, st: _State) -> None:
        final = self.root / st.name
        with locks.flock(self.root / f".{st.name}.lock", exclusive=True):
            if (final / MANIFEST).exists():    # built or imported meanwhile: keep that one
                self._drop(st)
                return self._settle_present(st)
            try:
                os.rename(st.tmp, final)
            except OSError as exc:
                return self._fail(st, f"{final} is in the way ({exc.strerror or exc})")
        _fsync_dir(self.root)
        st.tmp, st.outcome = None, "imported"
        self.result.imported.append(st.name)
        self.result.bytes += sum(f["bytes"] for f in st.spec["files"].values())

    def _settle_present(self, st: _State) -> None:
        final = self.root / st.name
        try:
            entry = verify(final)
        except ArtifactError as exc:
            return self._fail(st, f"already in the store at {final} but it does not verify ({exc}); it is left as it "
                                  f"is, never overwritten (remove it to import this one)")
        if entry.key != st.spec["key"]:
            return self._fail(st, f"{final} holds key {entry.key}, the archive's entry is {st.spec['key']}")
        st.outcome = "present"
        self.result.present.append(st.name)

    def finish(self) -> None:
        for st in self.states.values():
            if st.outcome is not None:
                continue
            if st.present:
                self._settle_present(st)
            else:
                missing = sorted(set(st.expected) - set(st.found))
                self._fail(st, f"incomplete in the archive: {len(missing)} file(s) missing ({', '.join(missing[:3])})")

    def cleanup(self) -> None:
        for st in self.states.values():
            self._drop(st)


def import_(archive: Path | str, root: Path | str, expect_sha256: str | None = None) -> Imported:
    """Import every entry of the cache archive at ``archive`` into the store at ``root`` (see the module's
    docstring); a foreign or unreadable archive raises :class:`ArtifactError` naming it, before anything is
    imported. ``expect_sha256``: the archive file's SHA-256, as ``export`` printed it."""
    t0 = time.monotonic()
    archive, root = Path(archive), Path(root).resolve()
    if not archive.is_file():
        raise ArtifactError(f"{archive}: no such archive file")
    if expect_sha256 is not None:
        found = sha256_file(archive)
        if found != expect_sha256.lower():
            raise ArtifactError(f"{archive}: SHA-256 {found} differs from the expected {expect_sha256}; nothing imported")
    with _open(archive) as tar:
        head, first = read_header(tar, archive)
        root.mkdir(parents=True, exist_ok=True)
        job = _Import(archive, root, head)
        last = HEADER
        try:
            try:
                for m in tar:
                    if m is not first:      # iteration starts again from the manifest read_header took
                        job.member(tar, m)
                    last = m.name
            except (_Unreadable, *_TAR_ERRORS) as exc:
                job.result.refused.append((str(archive), f"the tar is truncated or corrupt after member {last!r}: {exc}"))
            job.finish()
        finally:
            job.cleanup()
    job.result.seconds = time.monotonic() - t0
    return job.result
