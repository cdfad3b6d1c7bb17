"""Run directories: receipts, evidence and the report of one campaign, refusing a different campaign."""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
from typing import Any

from . import atomic
from .errors import ReceiptError

RUN_FILE = "run.json"


def default_path(root: Path, campaign_name: str) -> Path:
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return root / f"{stamp}-{campaign_name}-{os.getpid()}"


def check(path: Path, campaign_sha256: str) -> dict[str, Any] | None:
    """Return the run record if ``path`` is a run directory; refuse one made for another campaign."""
    record_path = path / RUN_FILE
    # List before testing for the record: a listing taken before another worker links run.json
    # holds at most its hidden temporary, so a racing worker is never mistaken for foreign content.
    entries = list(path.iterdir()) if path.is_dir() else []
    if not record_path.exists():
        if any(not p.name.startswith(f".{RUN_FILE}.") for p in entries):
            raise ReceiptError(f"{path}: not a Gatehouse run directory (no {RUN_FILE}) and not empty; "
                               f"choose a new or empty --run-dir")
        return None
    try:
        record = json.loads(record_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ReceiptError(f"{record_path}: unreadable run record: {exc}") from exc
    if record.get("campaign", {}).get("sha256") != campaign_sha256:
        raise ReceiptError(f"{record_path}: this run directory belongs to campaign "
                           f"{record.get('campaign', {}).get('path')} (sha256 {record.get('campaign', {}).get('sha256')}); "
                           f"refusing to mix in campaign sha256 {campaign_sha256}; use a new --run-dir")
    return record


def ensure(path: Path, campaign: dict[str, Any], screening: bool) -> dict[str, Any]:
    """Create the run directory and its record once (safe when several workers race)."""
    record = check(path, campaign["sha256"])
    if record is not None:
        return record
    path.mkdir(parents=True, exist_ok=True)
    record = {"schema_version": 1, "kind": "gatehouse.run", "run_id": path.name, "campaign": campaign,
              "screening": screening,
              "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    tmp = path / f".{RUN_FILE}.{os.getpid()}"
    tmp.write_text(atomic.dumps(record))
    try:
        os.link(tmp, path / RUN_FILE)  # fails if another worker won the race
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    (path / "receipts").mkdir(exist_ok=True)
    return check(path, campaign["sha256"])


def append_jsonl(path: Path, value: dict[str, Any]) -> None:
    """One write(2) per line with O_APPEND: concurrent workers never interleave a line."""
    line = (json.dumps(value, sort_keys=True, allow_nan=False) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
