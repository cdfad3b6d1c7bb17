"""Transcript review records: a person's approval of one exact behavior report, by SHA-256.

A record is a JSON object ``{"reviewer": ..., "approvals": [{"report_sha256": ..., "approved": true,
"notes": ...}, ...]}`` (or one approval with ``reviewer`` inline).  Passed with ``--review FILE`` (or
``bin/gatehouse report RUN_DIR --review FILE``), it is copied into the run directory's ``reviews/``
so later rebuilds keep it; an approval counts only for the behavior report whose bytes it names.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from . import atomic
from . import jsonfile
from .errors import ReceiptError
from .hashing import sha256_bytes
from .rundir import RunDir

_SHA = re.compile(r"^[0-9a-f]{64}$")


def parse(data: Any, source: str) -> list[dict[str, Any]]:
    """The approvals in a review record, each with reviewer, report_sha256, approved and notes."""
    if not isinstance(data, dict):
        raise ReceiptError(f"{source}: a review record is a JSON object")
    entries = data.get("approvals", [data] if "report_sha256" in data else None)
    if not isinstance(entries, list) or not entries:
        raise ReceiptError(f"{source}: expected 'approvals' (a non-empty list) or one 'report_sha256'")
    out = []
    for i, e in enumerate(entries):
        where = f"{source}: approvals[{i}]"
        if not isinstance(e, dict):
            raise ReceiptError(f"{where}: expected an object")
        reviewer = e.get("reviewer", data.get("reviewer"))
        if not isinstance(reviewer, str) or not reviewer.strip():
            raise ReceiptError(f"{where}: 'reviewer' must name the person who read the transcripts")
        sha = e.get("report_sha256")
        if not isinstance(sha, str) or not _SHA.match(sha):
            raise ReceiptError(f"{where}: 'report_sha256' must be the 64-hex SHA-256 of a behavior report, got {sha!r}")
        if not isinstance(e.get("approved"), bool):
            raise ReceiptError(f"{where}: 'approved' must be true or false")
        notes = e.get("notes")
        if not isinstance(notes, str) or not notes.strip():
            raise ReceiptError(f"{where}: 'notes' must say what was reviewed")
        out.append({"reviewer": reviewer, "report_sha256": sha, "approved": e["approved"], "notes": notes})
    return out


def load(path: Path | str) -> tuple[bytes, list[dict[str, Any]]]:
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ReceiptError(f"{path}: cannot read the review record: {exc}") from exc
    return raw, parse(jsonfile.loads(raw, str(path)), str(path))


def store(run: RunDir | Path, path: Path | str) -> Path:
    """Copy a validated review record into the run's ``reviews/`` (content-addressed; never overwritten)."""
    raw, _ = load(path)
    dest = RunDir.of(run).review(sha256_bytes(raw))
    if not dest.exists():
        atomic.write_bytes(dest, raw)
    return dest


def approvals(run: RunDir | Path) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, str]]]:
    """Approvals by report SHA-256 from every stored record, and the records that could not be read."""
    by_sha: dict[str, list[dict[str, Any]]] = {}
    bad = []
    for p in RunDir.of(run).review_files():
        try:
            _, entries = load(p)
        except ReceiptError as exc:
            bad.append({"path": str(p), "error": str(exc)})
            continue
        for e in entries:
            by_sha.setdefault(e["report_sha256"], []).append({**e, "file": p.name})
    return by_sha, bad


def verdict(entries: list[dict[str, Any]] | None) -> tuple[bool, str]:
    """(approved, why): approved only when some record approves and none rejects."""
    if not entries:
        return False, "no transcript review record approves this behavior report"
    if any(not e["approved"] for e in entries):
        who = ", ".join(e["reviewer"] for e in entries if not e["approved"])
        return False, f"transcript review rejected by {who}"
    return True, "approved by " + ", ".join(sorted({e["reviewer"] for e in entries}))
