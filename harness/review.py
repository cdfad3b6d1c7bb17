"""Transcript review records: a person's approval of one exact behavior report, by SHA-256.

A record is a JSON object ``{"reviewer": ..., "approvals": [{"report_sha256": ..., "approved": true,
"notes": ...}, ...]}`` (or one approval with ``reviewer`` inline).  Passed with ``--review FILE`` (or
``bin/gatehouse report RUN_DIR --review FILE``), it is copied into the run directory's ``reviews/``
so later rebuilds keep it; an approval counts only for the behavior report whose bytes it names.  An
approval may also name ``transcripts_sha256``, the transcripts its reviewer read: it then counts only while
the run's transcripts for that report (the receipt's pin, the pinned file, the evidence copy) still have it.

``bin/gatehouse review`` writes such a record (:mod:`harness.review_command`, above the report); this module is
the records alone, below both the report and the gates' sections.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from . import atomic
from . import jsonfile
from .errors import ReceiptError
from .hashing import sha256_bytes
from .rundir import RunDir

_SHA = re.compile(r"^[0-9a-f]{64}$")
# What the behavior fixture copies into a behavior receipt's evidence for review (fixtures/behavior.py record_pair).
EVIDENCE_REPORT = "candidate-report.json"
EVIDENCE_TRANSCRIPTS = "candidate-transcripts.jsonl"
NO_APPROVAL = "no transcript review record approves this behavior report"
REJECTED = "transcript review rejected by "
TRANSCRIPTS_CHANGED = "the transcripts changed after the review"


def parse(data: Any, source: str) -> list[dict[str, Any]]:
    """The approvals in a review record, each with reviewer, report_sha256, approved, notes and
    transcripts_sha256 (None when the record does not name the transcripts)."""
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
        tsha = e.get("transcripts_sha256")
        if tsha is not None and (not isinstance(tsha, str) or not _SHA.match(tsha)):
            raise ReceiptError(f"{where}: 'transcripts_sha256' must be the 64-hex SHA-256 of the transcripts read, "
                               f"got {tsha!r}")
        out.append({"reviewer": reviewer, "report_sha256": sha, "approved": e["approved"], "notes": notes,
                    "transcripts_sha256": tsha})
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
    return _store_bytes(run, raw)


def _store_bytes(run: RunDir | Path, raw: bytes) -> Path:
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


def transcripts(run: RunDir | Path, data: Mapping[str, Any], current: Callable[[str], str | None]) -> list[tuple[str, str]]:
    """(where, SHA-256) of each copy the run holds of a behavior receipt's candidate transcripts: the receipt's
    pin (as measured), the pinned file and the evidence copy where they exist (``current(path)``: its SHA-256
    now, or None when it is gone)."""
    out = []
    pin = next((a for a in data["artifacts"] if a["role"] == "transcripts"), None)
    if pin is not None:
        out.append((f"the transcripts pinned in the receipt of {data['nodeid']}", pin["sha256"]))
        now = current(pin["path"])
        if now is not None:
            out.append((pin["path"], now))
    copy = RunDir.of(run).evidence(data["nodeid"]) / EVIDENCE_TRANSCRIPTS
    now = current(str(copy))
    if now is not None:
        out.append((str(copy), now))
    return out


def _transcripts_refusal(e: Mapping[str, Any], copies: Sequence[tuple[str, str]]) -> str | None:
    """Why an approval that names the transcripts its reviewer read no longer counts (None when it does)."""
    want = e.get("transcripts_sha256")
    if not want:
        return None
    who = f"{e['reviewer']}'s approval" + (f" ({e['file']})" if e.get("file") else "")
    if not copies:
        return (f"{who} names transcripts {want[:12]}, but the run holds no transcripts for this behavior report "
                f"to check them against; it does not count")
    for where, sha in copies:
        if sha != want:
            return (f"{TRANSCRIPTS_CHANGED}: {who} read transcripts {want[:12]}, {where} is {sha[:12]}; "
                    f"it does not count")
    return None


def verdict(entries: list[dict[str, Any]] | None,
            transcripts: Sequence[tuple[str, str]] | None = None) -> tuple[bool, str]:
    """(approved, why): approved only when some record approves and none rejects.  With ``transcripts`` (the
    run's copies of the report's transcripts, :func:`transcripts`), an approval that names a transcripts
    SHA-256 counts only when every copy has it."""
    refused: list[str] = []
    if entries and transcripts is not None:
        kept = []
        for e in entries:
            why = _transcripts_refusal(e, transcripts) if e["approved"] else None
            if why:
                refused.append(why)
            else:
                kept.append(e)
        entries = kept
    if not entries:
        return False, "; ".join(refused) if refused else NO_APPROVAL
    if any(not e["approved"] for e in entries):
        who = ", ".join(e["reviewer"] for e in entries if not e["approved"])
        return False, f"{REJECTED}{who}"
    return True, "approved by " + ", ".join(sorted({e["reviewer"] for e in entries})) + \
        ("" if not refused else " (not counted: " + "; ".join(refused) + ")")


def command(run_dir: str, variant: str, quoted: bool = True) -> str:
    """The command line that records a review of ``variant`` (model/dtype) in ``run_dir``."""
    q = shlex.quote if quoted else str
    return f"bin/gatehouse review {q(str(run_dir))} {q(variant)} --by NAME --note '...'"
