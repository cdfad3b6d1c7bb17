"""The run's state: campaign, run directory, artifact store and receipts, owned by one object."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import fingerprint, receipt as receipts, search
from .artifacts import ArtifactStore
from .campaign import Campaign
from .receipt import Receipt
from .rundir import RunDir

if TYPE_CHECKING:
    from . import shard


class GatehouseSession:
    """Everything one pytest process knows about the run; the plugin's hooks only call into it."""

    def __init__(self, campaign: Campaign, run_path: Path, store_root: Path | None, worker: str,
                 early_stop: bool = False, shard: "shard.Plan | None" = None, remote: bool = False,
                 refused: str | None = None):
        self.campaign = campaign
        self.remote = remote             # a worker on another host: receipts are staged here, then shipped home
        self.refused = refused           # why this remote worker may not measure (another harness source)
        self._builds_shipped = 0         # bytes of the staging build log already shipped
        self._progress_shipped = 0       # bytes of the staging progress log already shipped
        self.shard = shard               # --shard K/N: a harness.shard.Plan, recorded in the run record
        self.early_stop = early_stop     # [search] early_stop and not --no-early-stop
        self.run_path = run_path
        self.run_dir = RunDir(run_path)   # the run directory's layout: every path below comes from it
        self.worker = worker
        self.store = ArtifactStore(store_root, on_acquire=self._record_acquisition)
        self._run_record: dict[str, Any] | None = None

    # -- run directory ---------------------------------------------------------------
    @property
    def campaign_identity(self) -> dict[str, Any]:
        return {"path": str(self.campaign.path), "sha256": self.campaign.sha256, "name": self.campaign.name,
                "screening": self.campaign.screening}

    def run_record(self) -> dict[str, Any]:
        if self._run_record is None:
            self._run_record = self.run_dir.ensure(self.campaign_identity, self.campaign.screening,
                                                   shard=self.shard)
        return self._run_record

    @property
    def started(self) -> bool:
        return self.run_dir.started

    def _record_acquisition(self, event: dict[str, Any]) -> None:
        self.run_record()
        self.run_dir.append_build({**event, "worker": self.worker, "pid": os.getpid()})

    # -- receipts --------------------------------------------------------------------
    def new_receipt(self, nodeid: str, gate: str, variant: dict[str, Any]) -> Receipt:
        self.run_record()
        evidence = self.run_dir.evidence(nodeid)
        if evidence.exists():   # a rerun: the earlier evidence stands until this node's new receipt replaces it
            evidence = self.run_dir.evidence_for_rerun(nodeid)
        r = Receipt(nodeid, gate, variant, evidence)
        r.machine_before = fingerprint.machine()
        r.seeds["campaign"] = self.campaign.seed
        return r

    # -- the recipe search's early stop (harness/search.py) ----------------------------
    def stop_reason(self, variant) -> str | None:
        """Why ``variant`` (a recipe) is not timed (harness/search.py), or None: never with the early stop off or
        for a fixed dtype or a peer."""
        if not self.early_stop or variant.recipe is None:
            return None
        return search.stop_reason(self.screen_outcomes(variant), self.campaign.search)

    def screen_outcomes(self, variant) -> dict[str, tuple[str, str]]:
        """Each screening gate's outcome for ``variant`` decided so far, from the run directory's receipts written
        by this harness source (this process's, another xdist worker's, an earlier session's in a reused run
        directory)."""
        found: dict[str, tuple[str, str]] = {}
        screen = set(self.campaign.search.screen)
        if not self.run_dir.receipts.is_dir():
            return found
        sha = fingerprint.harness_source().get("sha256")
        for path in self.run_dir.receipt_files():
            try:
                data = receipts.load(path)   # schema and meaning (harness.receipt_check), as the report reads it
            except Exception:   # a receipt the report would refuse is no evidence for skipping
                continue
            v = data.get("variant") or {}
            if data.get("gate") in screen and (v.get("model"), v.get("dtype")) == (variant.model.id, variant.dtype) \
                    and ((data.get("provenance") or {}).get("harness") or {}).get("sha256") == sha:
                reasons = (data.get("verdict") or {}).get("reasons") or []
                found[data["gate"]] = ((data.get("verdict") or {}).get("outcome"), reasons[0] if reasons else "")
        return found

    def write_receipt(self, r: Receipt, outcome: str, reasons: list[str], machine_after: dict | None = None,
                      worker: str | None = None) -> Path:
        provenance = {
            "harness": fingerprint.harness_source(),
            "packages": fingerprint.package_versions(),
            "machine_before": r.machine_before,
            "machine_after": machine_after or fingerprint.machine(),
            "campaign": self.campaign_identity,
            "threads": self.campaign.threads,
        }
        run = {"run_id": self.run_record()["run_id"], "screening": self.campaign.screening,
               "worker": worker or self.worker}
        data = r.to_dict(outcome=outcome, reasons=reasons, provenance=provenance, run=run)
        path = receipts.write(self.run_dir, data)
        self.run_dir.settle_evidence(r.nodeid, r.evidence_dir)
        return path

    # -- remote workers (harness/remote.py) ----------------------------------------------
    def new_build_lines(self) -> list[dict[str, Any]]:
        """The staging build log's lines written since the last call (a remote worker ships them home)."""
        import json

        lines, self._builds_shipped = _lines_after(self.run_dir.builds, self._builds_shipped)
        return [json.loads(line) for line in lines if line.strip()]

    def new_progress_lines(self) -> list[str]:
        """The staging progress log's lines written since the last call (shipped with each report)."""
        lines, self._progress_shipped = _lines_after(self.run_dir.progress / f"{self.worker}.log",
                                                     self._progress_shipped)
        return lines

    def write_crash_receipt(self, skeleton: dict[str, Any], reason: str) -> Path:
        """An ``error`` receipt for a test whose worker died while it ran (harness/remote.py's skeleton)."""
        r = Receipt(skeleton["nodeid"], skeleton["gate"], skeleton["variant"], self.run_dir.evidence(skeleton["nodeid"]))
        r.policy, r.level = dict(skeleton["policy"]), skeleton["level"]
        r.machine_before, r.started_at = dict(skeleton["machine_before"]), skeleton["started_at"]
        r.note("worker_died", reason)
        return self.write_receipt(r, "error", [reason], machine_after=r.machine_before, worker=skeleton["worker"])


def _lines_after(path: Path, offset: int) -> tuple[list[str], int]:
    """The complete lines of ``path`` after byte ``offset``, and the offset after them (read from there, not from
    the start: the staging logs grow for the whole run and are read at every report)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    return data[:end].decode("utf-8", "replace").splitlines(), offset + end
