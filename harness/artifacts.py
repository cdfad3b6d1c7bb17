"""A content-addressed artifact store: built once per machine, verified on reuse, safe under xdist."""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from . import atomic, locks
from .errors import ArtifactError
from .hashing import sha256_file, sha256_json, sha256_sources

MANIFEST = "artifact.json"
Progress = Callable[[str], None]
Builder = Callable[[Path, Progress], "dict[str, Any] | None"]


def default_root() -> Path:
    return Path(os.environ.get("GATEHOUSE_CACHE") or Path.home() / ".cache" / "gatehouse" / "artifacts")


def labelled_progress(prefix: str) -> Progress:
    """A build's progress lines (harness.progress: the terminal under pytest, standard error otherwise)."""
    from . import progress

    return lambda message: progress.emit(f"{prefix}: {message}")


def _size(files: dict[str, dict[str, Any]]) -> int:
    """An artifact's bytes, from its manifest's files (``_tree``; verified before a reuse is reported)."""
    return sum(f["bytes"] for f in files.values())


@dataclass(frozen=True)
class Artifact:
    """A built artifact: its directory, its key and its manifest (files with SHA-256 and bytes)."""

    path: Path
    key: str
    manifest: dict[str, Any]
    hit: bool
    seconds: float

    def file(self, rel: str) -> Path:
        if rel not in self.manifest["files"]:
            raise ArtifactError(f"{self.path}: artifact has no file {rel!r} (has: {', '.join(sorted(self.manifest['files']))})")
        return self.path / rel

    def identity(self, rel: str) -> dict[str, Any]:
        entry = self.manifest["files"][rel]
        return {"path": str(self.path / rel), "sha256": entry["sha256"], "bytes": entry["bytes"]}


def _tree(directory: Path) -> dict[str, dict[str, Any]]:
    files = {}
    for p in sorted(directory.rglob("*")):
        if p.is_file() and p.name != MANIFEST:
            files[str(p.relative_to(directory))] = {"sha256": sha256_file(p), "bytes": p.stat().st_size}
    return files


def refuse_machine_paths(kind: str, record: Any, roots: tuple[str, ...], where: str = "") -> None:
    """Refuse a key whose inputs or parameters hold a path under ``roots`` (the checkout, the venv, the store,
    home): such a key changes with the clone's location, so an artifact built on one machine (or in one clone)
    would be rebuilt on the next and an exported cache would not travel.  Key by content (a SHA-256), not by
    where the content lies.  The error names the artifact kind, the field and the value."""
    if isinstance(record, dict):
        for k, v in record.items():
            refuse_machine_paths(kind, v, roots, f"{where}.{k}" if where else str(k))
    elif isinstance(record, (list, tuple)):
        for i, v in enumerate(record):
            refuse_machine_paths(kind, v, roots, f"{where}[{i}]")
    elif isinstance(record, str):
        for root in roots:
            if record == root or record.startswith(root.rstrip("/") + "/"):
                raise ArtifactError(f"artifact kind {kind!r}: key field {where} = {record!r} is a path under "
                                    f"{root}, which differs between machines and clones; key the content "
                                    f"(its SHA-256), not its location")


class ArtifactStore:
    """Artifacts keyed by their inputs' hashes, the builder's source hash and its parameters.

    ``get_or_build`` takes a per-artifact file lock, so concurrent xdist workers
    build each artifact once; a build writes into a temporary directory that is
    renamed into place only when complete, so a crash leaves no half artifact.
    Reuse re-hashes every file against the manifest: a changed file is an error
    that names it, never a silent rebuild that would hide the change.
    """

    def __init__(self, root: Path | None = None, on_acquire: Callable[[dict[str, Any]], None] | None = None):
        self.root = Path(root or default_root()).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.on_acquire = on_acquire
        self._verified: dict[str, tuple] = {}
        self._machine_roots = self.machine_roots()   # fixed for the process: computed once, checked on every key

    def key(self, kind: str, inputs: dict[str, Any], params: dict[str, Any], sources: list[Path]) -> str:
        refuse_machine_paths(kind, {"inputs": inputs, "params": params}, self._machine_roots)
        return sha256_json({"kind": kind, "inputs": inputs, "params": params, "sources_sha256": sha256_sources(sources)})

    def machine_roots(self) -> tuple[str, ...]:
        """Directories whose paths differ between machines and clones: the checkout, the venv, the store, home."""
        import sys

        from .fingerprint import REPO_ROOT

        return tuple(sorted({str(REPO_ROOT), str(Path(sys.prefix).resolve()), sys.prefix, str(self.root),
                             str(Path.home())} - {"/", ""}, key=len, reverse=True))

    def get_or_build(self, kind: str, inputs: dict[str, Any], params: dict[str, Any], sources: list[Path],
                     build: Builder, label: str | None = None) -> Artifact:
        t0 = time.monotonic()
        key = self.key(kind, inputs, params, sources)
        final = self.root / f"{kind}-{key[:20]}"
        hit = True
        if not (final / MANIFEST).exists():
            with locks.flock(self.root / f".{kind}-{key[:20]}.lock", exclusive=True):
                if not (final / MANIFEST).exists():
                    hit = False
                    self._build(kind, key, inputs, params, sources, build, final, label or kind)
        t_verify = time.monotonic()
        manifest = self._verify(final)
        if hit and time.monotonic() - t_verify > 2.0:   # re-hashing a large artifact is worth a line
            labelled_progress(label or kind)(f"reused, {_size(manifest['files'])/ 1e6:,.1f} MB re-hashed in "
                                             f"{time.monotonic() - t_verify:.1f} s")
        artifact = Artifact(final, key, manifest, hit, time.monotonic() - t0)
        if self.on_acquire:
            self.on_acquire({"kind": kind, "label": label or kind, "key": key, "path": str(final), "hit": hit,
                             "seconds": round(artifact.seconds, 3), "build_seconds": manifest.get("build_seconds")})
        return artifact

    def _build(self, kind, key, inputs, params, sources, build, final: Path, label: str) -> None:
        tmp = self.root / f".tmp-{kind}-{key[:20]}-{os.getpid()}"
        if tmp.exists():
            shutil.rmtree(tmp)  # our own pid's leftover from an earlier crash
        tmp.mkdir(parents=True)
        progress = labelled_progress(label)
        progress("building (not in the cache)")
        t0 = time.monotonic()
        try:
            # Builds are machine work: hold the machine lock shared so timing tests wait.
            with locks.machine(exclusive=False):
                info = build(tmp, progress) or {}
            manifest = {
                "kind": kind, "key": key, "inputs": inputs, "params": params,
                "sources": sorted(str(Path(s).name) for s in sources),
                "sources_sha256": sha256_sources(sources),
                "files": _tree(tmp), "builder": info,
                "build_seconds": round(time.monotonic() - t0, 3),
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            atomic.write_json(tmp / MANIFEST, manifest)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        progress(f"built in {time.monotonic() - t0:.1f} s, {_size(manifest['files']) / 1e6:,.1f} MB -> {final}")

    def _verify(self, final: Path) -> dict[str, Any]:
        import json

        manifest_path = final / MANIFEST
        try:
            manifest = json.loads(manifest_path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ArtifactError(f"{manifest_path}: unreadable artifact manifest: {exc}") from exc
        for rel, entry in manifest["files"].items():
            path = final / rel
            try:
                st = path.stat()
            except OSError:
                raise ArtifactError(f"{path}: artifact file is missing (pinned sha256 {entry['sha256']})") from None
            stamp = (st.st_size, st.st_mtime_ns, st.st_ino)
            if self._verified.get(str(path)) == stamp:
                continue
            if st.st_size != entry["bytes"]:
                raise ArtifactError(f"{path}: size {st.st_size} differs from its pin {entry['bytes']} bytes; "
                                    f"the artifact was changed after it was built (remove {final} to rebuild)")
            digest = sha256_file(path)
            if digest != entry["sha256"]:
                raise ArtifactError(f"{path}: SHA-256 {digest} differs from its pin {entry['sha256']}; "
                                    f"the artifact was changed after it was built (remove {final} to rebuild)")
            self._verified[str(path)] = stamp
        return manifest


class ExternalDir:
    """A directory Gatehouse did not build (a user's Hugging Face directory or ONNX export), read in place
    and never written. It answers like an :class:`Artifact`: each file is hashed when first pinned, and
    ``manifest``/``key`` (which hash every file) only when asked (an exporter keys its build on them)."""

    hit = True
    seconds = 0.0

    def __init__(self, path: Path):
        self.path = Path(path)
        self._ids: dict[str, dict[str, Any]] = {}
        self._manifest: dict[str, Any] | None = None

    def file(self, rel: str) -> Path:
        p = self.path / rel
        if not p.is_file():
            raise ArtifactError(f"{p}: no such file in {self.path}")
        return p

    def identity(self, rel: str) -> dict[str, Any]:
        if rel not in self._ids:
            p = self.file(rel)
            self._ids[rel] = {"path": str(p), "sha256": sha256_file(p), "bytes": p.stat().st_size}
        return self._ids[rel]

    @property
    def manifest(self) -> dict[str, Any]:
        if self._manifest is None:
            files = {}
            for p in sorted(self.path.rglob("*")):
                if p.is_file() and not any(part.startswith(".") for part in p.relative_to(self.path).parts):
                    ident = self.identity(str(p.relative_to(self.path)))
                    files[str(p.relative_to(self.path))] = {"sha256": ident["sha256"], "bytes": ident["bytes"]}
            if not files:
                raise ArtifactError(f"{self.path}: directory is empty")
            self._manifest = {"kind": "external", "path": str(self.path), "files": files}
        return self._manifest

    @property
    def key(self) -> str:
        return "external-" + sha256_json(self.manifest["files"])[:20]
