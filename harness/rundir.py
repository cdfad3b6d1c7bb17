"""Run directories: the one place that knows a run's layout, and refuses to mix in a different campaign.

A run directory holds one campaign's run::

    run.json                  the run record (campaign identity, screening, created_at)
    receipts/<node>.json      one receipt per gate test (receipt_filename)
    superseded/<node>.<stamp>.json   a receipt that a rerun (--lf) replaced, kept
    evidence/<receipt stem>/  a gate test's raw evidence
    builds.jsonl              one line per artifact acquisition (built or reused)
    reviews/review-<sha>.json transcript review records (harness.review)
    browser/                  the browser lane's server and page logs
    progress/<worker>.log     an xdist worker's progress lines (the controller shows them as they come)
    report.json, report.md, quality_vs_size.png   the report, rebuilt from the receipts alone
    report.html               the same report as one self-contained page (no network; links to receipts/ and evidence/)

The plugin, the session, the receipt writer, the review store and the report all ask a :class:`RunDir`
for these paths instead of spelling them.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import atomic
from .errors import ReceiptError

RUN_FILE = "run.json"
PROGRESS = "progress"   # xdist workers' progress logs (harness.progress), one per worker
BROWSER = "browser"     # the browser's and the web server's logs (fixtures/browser.py)
# the run's own logs, which a worker may write before the first receipt or build writes run.json
EARLY_LOGS = (PROGRESS, BROWSER)



def receipt_filename(nodeid: str) -> str:
    """A stable, readable receipt file name per node id (a short hash keeps distinct ids distinct)."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid.split("::", 1)[-1]).strip("_")[:80]
    return f"{slug}-{hashlib.sha256(nodeid.encode()).hexdigest()[:10]}.json"

@dataclass(frozen=True)
class RunDir:
    """One run directory's layout; a value (cheap to build, compare and pass around), no state."""

    path: Path

    def __post_init__(self):
        object.__setattr__(self, "path", Path(self.path))

    @classmethod
    def of(cls, run: "RunDir | Path | str") -> "RunDir":
        """Accept a RunDir or its path, so callers that hold only a path keep working."""
        return run if isinstance(run, RunDir) else cls(Path(run))

    @classmethod
    def of_receipts(cls, directory: Path | str) -> "RunDir":
        """The run whose ``receipts/`` folder ``directory`` is (callers that hold only that folder)."""
        directory = Path(directory)
        if directory.name != "receipts":
            raise ReceiptError(f"{directory}: receipts live in a run directory's receipts/ folder; "
                               f"got a folder named {directory.name!r}")
        return cls(directory.parent)

    @classmethod
    def new(cls, root: Path, campaign_name: str) -> "RunDir":
        """A fresh run directory name under ``root``: UTC time, campaign name and process id."""
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        return cls(Path(root) / f"{stamp}-{campaign_name}-{os.getpid()}")

    # -- the layout ------------------------------------------------------------------
    @property
    def run_file(self) -> Path:
        return self.path / RUN_FILE

    @property
    def receipts(self) -> Path:
        return self.path / "receipts"

    @property
    def progress(self) -> Path:
        return self.path / PROGRESS

    @property
    def superseded(self) -> Path:
        return self.path / "superseded"

    @property
    def builds(self) -> Path:
        return self.path / "builds.jsonl"

    @property
    def durations(self) -> Path:
        """Every test's seconds (setup, call and teardown) and shard unit, a line per test run (harness.shard)."""
        return self.path / "durations.jsonl"

    @property
    def reviews(self) -> Path:
        return self.path / "reviews"

    @property
    def browser_logs(self) -> Path:
        return self.path / BROWSER

    @property
    def report_json(self) -> Path:
        return self.path / "report.json"

    @property
    def report_md(self) -> Path:
        return self.path / "report.md"

    @property
    def report_html(self) -> Path:
        return self.path / "report.html"

    @property
    def plot(self) -> Path:
        return self.path / "quality_vs_size.png"

    def receipt(self, nodeid: str) -> Path:
        return self.receipts / receipt_filename(nodeid)

    def evidence_name(self, nodeid: str) -> str:
        """The evidence folder of a node, relative to the run directory (what the report links to)."""
        return f"evidence/{receipt_filename(nodeid).removesuffix('.json')}"

    def evidence(self, nodeid: str) -> Path:
        return self.path / self.evidence_name(nodeid)

    def evidence_for_rerun(self, nodeid: str) -> Path:
        """Where a rerun of a node writes its evidence while the earlier run's evidence still stands: a
        hidden folder beside it, unique to this process, so nothing is created twice or overwritten."""
        return self.path / "evidence" / f".{self.evidence_name(nodeid).removeprefix('evidence/')}.rerun-{os.getpid()}"

    def settle_evidence(self, nodeid: str, written: Path) -> Path | None:
        """After a node's new receipt is written: the evidence it replaced goes to ``superseded/`` (never
        deleted) and the new evidence takes its place; returns where the replaced evidence went."""
        final = self.evidence(nodeid)
        if Path(written) == final:
            return None
        kept = None
        if final.exists():
            stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
            kept = self.superseded / f"{final.name}.{stamp}.evidence"
            kept.parent.mkdir(parents=True, exist_ok=True)
            final.rename(kept)
        if Path(written).exists():
            Path(written).rename(final)
        return kept

    def superseded_copy(self, receipt_path: Path) -> Path:
        """Where a receipt about to be replaced is kept: its stem and a microsecond UTC stamp."""
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        return self.superseded / f"{Path(receipt_path).stem}.{stamp}.json"

    def review(self, digest: str) -> Path:
        return self.reviews / f"review-{digest[:16]}.json"

    def receipt_files(self) -> list[Path]:
        return sorted(self.receipts.glob("*.json"))

    def review_files(self) -> list[Path]:
        return sorted(self.reviews.glob("*.json"))

    @property
    def started(self) -> bool:
        return self.run_file.exists()

    # -- the run record ----------------------------------------------------------------
    def read_record(self) -> dict[str, Any]:
        try:
            return json.loads(self.run_file.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ReceiptError(f"{self.run_file}: cannot read the run record: {exc}") from exc

    def check(self, campaign_sha256: str) -> dict[str, Any] | None:
        """Return the run record if this is a run directory; refuse one made for another campaign."""
        # List before testing for the record: a listing taken before another worker links run.json
        # holds at most its hidden temporary, so a racing worker is never mistaken for foreign content.
        entries = list(self.path.iterdir()) if self.path.is_dir() else []
        if not self.run_file.exists():
            # the run's own logs may come before the first receipt or build writes run.json
            if any(not p.name.startswith(f".{RUN_FILE}.") and p.name not in EARLY_LOGS for p in entries):
                raise ReceiptError(f"{self.path}: not a Gatehouse run directory (no {RUN_FILE}) and not empty; "
                                   f"choose a new or empty --run-dir")
            return None
        try:
            record = json.loads(self.run_file.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ReceiptError(f"{self.run_file}: unreadable run record: {exc}") from exc
        if record.get("campaign", {}).get("sha256") != campaign_sha256:
            raise ReceiptError(f"{self.run_file}: this run directory belongs to campaign "
                               f"{record.get('campaign', {}).get('path')} (sha256 {record.get('campaign', {}).get('sha256')}); "
                               f"refusing to mix in campaign sha256 {campaign_sha256}; use a new --run-dir")
        return record

    def ensure(self, campaign: dict[str, Any], screening: bool, shard=None) -> dict[str, Any]:
        """Create the run directory and its record once (safe when several workers race); ``shard``: the part
        of a sharded campaign this run holds (a harness.shard.Plan: "K/N" and the plan the merge compares)."""
        record = self.check(campaign["sha256"])
        if record is not None:
            return record
        self.path.mkdir(parents=True, exist_ok=True)
        record = {"schema_version": 1, "kind": "gatehouse.run", "run_id": self.path.name, "campaign": campaign,
                  "screening": screening,
                  "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
        if shard is not None:
            record["shard"], record["shard_plan"] = shard.text, shard.record()
        tmp = self.path / f".{RUN_FILE}.{os.getpid()}"
        tmp.write_text(atomic.dumps(record))
        try:
            os.link(tmp, self.run_file)  # fails if another worker won the race
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
        self.receipts.mkdir(exist_ok=True)
        return self.check(campaign["sha256"])

    # -- the build log -----------------------------------------------------------------
    def append_build(self, event: dict[str, Any]) -> None:
        append_jsonl(self.builds, event)

    def read_builds(self) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
        """Every artifact acquisition of the run (empty before the first), and each line that could not be
        read (``{"path": "builds.jsonl:N", "error"}``): a truncated or edited line is listed, never fatal."""
        return _read_log(self.builds, BUILD_FIELDS)

    def read_durations(self) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
        """Each finished test's seconds (setup, call and teardown: ``durations.jsonl``), and each line that could
        not be read, as :meth:`read_builds`."""
        return _read_log(self.durations, DURATION_FIELDS)


def _read_log(path: Path, fields: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    from .jsonfile import loads

    if not path.exists():
        return [], []
    out, bad = [], []
    for n, line in enumerate(path.read_bytes().split(b"\n"), 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            value = loads(line, where)
            if not isinstance(value, dict):
                raise ReceiptError(f"{where}: expected a JSON object, got {type(value).__name__}")
            problems = [f"{k} {value.get(k, '(missing)')!r}" for k, t in fields.items()
                        if not isinstance(value.get(k, ...), t) or isinstance(value.get(k), bool) != (t is bool)]
            if problems:
                raise ReceiptError(f"{where}: bad field(s): {', '.join(problems)}")
        except ReceiptError as exc:
            bad.append({"path": where, "error": str(exc)})
            continue
        out.append(value)
    return out, bad


# what the report reads of a build line, and the types it needs
BUILD_FIELDS = {"hit": bool, "seconds": (int, float), "build_seconds": (int, float, type(None))}
# what the report reads of a durations line
DURATION_FIELDS = {"nodeid": str, "seconds": (int, float)}


def append_jsonl(path: Path, value: dict[str, Any]) -> None:
    """One write(2) per line with O_APPEND: concurrent workers never interleave a line."""
    line = (json.dumps(value, sort_keys=True, allow_nan=False) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
