"""Remote workers (pytest-xdist over execnet ``--tx socket=...`` / ``--tx ssh=...``): receipts travel home.

The run directory lives on the controller. A worker on another host writes each receipt and its evidence into
its own staging run directory (on that host), then packs them onto the test's teardown report (an attribute
xdist serializes with the report); the controller validates the receipt and writes it, its evidence and the
worker's new build-log lines atomically into the run directory (:func:`accept`). The receipt keeps the host's
machine block (its hostname and hardware fingerprint).

A worker whose harness source SHA-256 differs from the controller's is refused at start, by name
(:func:`check_source`): every receipt of a run must be measured by one harness.

Each test is announced to the controller before it runs with a small skeleton (:func:`skeleton`: gate, variant,
policy, the host's machine): if the worker dies while the test runs (a host killed, a segfault), the controller
writes an ``error`` receipt from it (``GatehouseSession.write_crash_receipt``), so the run records what was lost,
and ``--lf`` reruns it.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any, Mapping

from . import atomic
from .errors import HarnessError
from .receipt import validate
from .rundir import RunDir, append_jsonl

# input keys the controller gives a remote worker (xdist workerinput)
REMOTE = "gatehouse_remote"
SOURCE = "gatehouse_harness_sha256"
# attributes on a test report (xdist serializes a report's attributes)
SHIPPED = "gatehouse_receipt"
PENDING = "gatehouse_pending"
PROGRESS = "gatehouse_progress"   # a report attribute: the progress lines the worker wrote since its last report
MAX_EVIDENCE_BYTES = 256 * 1024 * 1024


class RemoteError(HarnessError):
    pass


def is_remote(spec) -> bool:
    """Whether an execnet gateway spec is another host (a socket or ssh gateway), not a local subprocess."""
    return not getattr(spec, "popen", False)


def check_source(worker: str, host: str, mine: str | None, controller: str | None) -> None:
    if mine != controller:
        raise RemoteError(
            f"worker {worker} on host {host}: harness source SHA-256 {str(mine)[:16]} differs from the controller's "
            f"{str(controller)[:16]}; give the host the controller's commit (git checkout, then the README's set-up "
            f"command) before it measures for this run")


def staging(root: Path, testrunuid: str, worker: str) -> Path:
    """A remote worker's own run directory on its host (receipts are written here, then shipped)."""
    return Path(root) / "gatehouse-remote" / f"{testrunuid}-{worker}"


def pack(run: RunDir, nodeid: str, receipt_path: Path, build_lines: list[dict[str, Any]]) -> dict[str, Any]:
    """The receipt, its evidence files (base64) and the build-log lines written since the last one shipped."""
    evidence: dict[str, str] = {}
    folder = run.evidence(nodeid)
    total = 0
    if folder.is_dir():
        for f in sorted(p for p in folder.rglob("*") if p.is_file()):
            data = f.read_bytes()
            total += len(data)
            if total > MAX_EVIDENCE_BYTES:
                raise RemoteError(f"{folder}: evidence over {MAX_EVIDENCE_BYTES} bytes cannot travel with the report")
            evidence[f.relative_to(folder).as_posix()] = base64.b64encode(data).decode("ascii")
    return {"receipt": receipt_path.read_text(encoding="utf-8"), "evidence": evidence, "builds": build_lines}


def accept(run: RunDir, shipped: Mapping[str, Any], run_id: str) -> Path:
    """Write a shipped receipt into the controller's run directory: validated, evidence first (a hidden folder
    renamed into place), then the receipt (atomic; the one it replaces is kept under superseded/)."""
    import json

    from .receipt import write

    try:
        data = json.loads(shipped["receipt"])
    except (KeyError, TypeError, ValueError) as exc:
        raise RemoteError(f"a shipped receipt is not JSON: {exc}") from exc
    nodeid = data.get("nodeid") if isinstance(data, dict) else None
    validate(data, f"receipt for {nodeid} shipped by a remote worker")
    data = {**data, "run": {**data["run"], "run_id": run_id}}
    written = run.evidence(nodeid)
    if written.exists():
        written = run.evidence_for_rerun(nodeid)
    files = shipped.get("evidence") or {}
    if files:
        tmp = written.parent / f".{written.name}.incoming-{os.getpid()}"
        for rel, b64 in files.items():
            target = (tmp / rel).resolve()
            if not str(target).startswith(str(tmp.resolve()) + os.sep):
                raise RemoteError(f"receipt for {nodeid}: evidence path {rel!r} leaves its folder")
            atomic.write_bytes(target, base64.b64decode(b64))
        tmp.rename(written)
    path = write(run, data)
    run.settle_evidence(nodeid, written)
    for line in shipped.get("builds") or ():
        append_jsonl(run.builds, line)
    return path


def accept_progress(run: RunDir, shipped: Mapping[str, Any]) -> None:
    """Append a remote worker's shipped progress lines to its log in the controller's run directory, where the
    controller's tail shows them (prefixed with the worker's id) as it shows a local worker's."""
    worker = str(shipped.get("worker") or "remote")
    if not worker.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise RemoteError(f"progress lines shipped by worker {worker!r}: not a worker id")
    lines = [str(line).replace("\n", " ") for line in shipped.get("lines") or ()]
    if lines:
        run.progress.mkdir(parents=True, exist_ok=True)
        with open(run.progress / f"{worker}.log", "a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))


def skeleton(nodeid: str, gate: str, variant: Mapping[str, Any], policy: Mapping[str, Any], level: str,
             machine: Mapping[str, Any], worker: str, started_at: str) -> dict[str, Any]:
    """What the controller needs to write an error receipt if the worker dies during the test."""
    return {"nodeid": nodeid, "gate": gate, "variant": dict(variant), "policy": dict(policy), "level": level,
            "machine_before": dict(machine), "worker": worker, "started_at": started_at}
