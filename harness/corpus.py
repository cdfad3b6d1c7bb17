"""The real text corpus: license texts shipped by a Debian package, pinned by SHA-256."""

from __future__ import annotations

import re
import subprocess
from typing import Any, Mapping, Sequence

from .domain import CorpusFile
from .errors import ArtifactError
from .hashing import sha256_file


def read(files: Sequence[CorpusFile], what: str = "corpus") -> str:
    """Read and verify each file against its pin; the texts are joined with blank lines. ``what`` names the
    text in the errors ("corpus", "domain text")."""
    parts = []
    for f in files:
        if not f.path.is_file():
            raise ArtifactError(f"{f.path}: {what} file is missing (pinned sha256 {f.sha256})")
        digest = sha256_file(f.path)
        if digest != f.sha256:
            raise ArtifactError(f"{f.path}: {what} SHA-256 {digest} differs from the campaign's pin {f.sha256}")
        try:
            parts.append(f.path.read_text(encoding="utf-8"))
        except UnicodeDecodeError as exc:
            raise ArtifactError(f"{f.path}: {what} file is not UTF-8 text: {exc}") from exc
    return "\n\n".join(parts)


MIN_LINE_CHARS = 20   # a shorter normalized line (a heading, a section number) is not compared


def line_hashes(text: str) -> set[str]:
    """The SHA-256 of each normalized line (lower case, whitespace collapsed) of at least MIN_LINE_CHARS."""
    import hashlib

    lines = (re.sub(r"\s+", " ", line).strip().lower() for line in text.splitlines())
    return {hashlib.sha256(line.encode()).hexdigest() for line in lines if len(line) >= MIN_LINE_CHARS}


def shared_lines(train: Mapping[str, str], heldout: str) -> tuple[int, int, dict[str, int]]:
    """How much of a held-out text the training texts hold: (its compared lines, how many of them appear in
    any training text, per training file name how many it shares).  Pure; the campaign refuses an overlap
    above what it declares."""
    held = line_hashes(heldout)
    shared = {name: held & line_hashes(text) for name, text in train.items()}
    return len(held), len(set().union(*shared.values())), {k: len(v) for k, v in shared.items() if v}


def package_version(package: str | None) -> str | None:
    """The Debian package version the texts came from (recorded, not trusted: the pins are)."""
    if not package:
        return None
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def identity(package: str | None, files: Sequence[CorpusFile]) -> dict[str, Any]:
    return {"package": package, "package_version": package_version(package),
            "files": [{"path": str(f.path), "sha256": f.sha256} for f in files]}
