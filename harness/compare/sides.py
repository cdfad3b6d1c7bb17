"""One run as a comparison's header shows it (:class:`RunSide`), and the machine a receipt ran on (:class:`Machine`).

A machine is the identity fields of a receipt's ``provenance.machine_before`` (the ones the report's
provenance check uses, :data:`harness.report.qualify.MACHINE_KEYS`); throughput is compared only between
receipts of one machine.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Mapping

from ..report import qualify
from ..report.collect import Collected
from ..view import ReceiptView


@dataclass(frozen=True)
class Machine:
    """A machine fingerprint: the identity fields of a receipt's ``provenance.machine_before``
    (:data:`harness.report.qualify.MACHINE_KEYS`) and their short digest."""

    identity: tuple[tuple[str, Any], ...]

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.identity, sort_keys=True, default=str).encode()).hexdigest()[:12]

    @property
    def label(self) -> str:
        i = dict(self.identity)
        parts = [str(i.get("cpu_model") or "unknown CPU"),
                 f"{i['logical_cpus']} CPUs" if i.get("logical_cpus") is not None else None,
                 f"host {i['hostname']}" if i.get("hostname") else None]
        return f"{self.digest} ({', '.join(p for p in parts if p)})"

    def differences(self, other: "Machine") -> list[str]:
        a, b = dict(self.identity), dict(other.identity)
        return [f"{k} {a.get(k)!r} vs {b.get(k)!r}" for k in qualify.MACHINE_KEYS if a.get(k) != b.get(k)]


def machine_of(view: ReceiptView) -> Machine:
    before = view.provenance.get("machine_before") or {}
    return Machine(tuple((k, before.get(k)) for k in qualify.MACHINE_KEYS))


# -- one run's header ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunSide:
    """What the comparison's header says of one run: its identity, the harness source and packages its
    receipts were measured with, its machine fingerprints, and its receipt counts."""

    path: str
    run_id: str
    created_at: str | None
    campaign_name: str | None
    campaign_sha256: str | None
    screening: bool
    harness: tuple[tuple[str | None, str | None], ...]     # distinct (source sha256, git commit)
    packages: tuple[tuple[str, tuple[str | None, ...]], ...]   # name -> distinct versions across receipts
    machines: tuple[Machine, ...]
    receipts: int
    invalid: int
    stale: int


def run_side(c: Collected, rep: Mapping[str, Any]) -> RunSide:
    rec = c.record
    campaign = rec.get("campaign") or {}
    harness: list[tuple[str | None, str | None]] = []
    versions: dict[str, list[str | None]] = {}
    machines: list[Machine] = []
    for v in c.views:
        h = v.provenance.get("harness") or {}
        key = (h.get("sha256"), h.get("git_commit"))
        if key not in harness:
            harness.append(key)
        for name, version in (v.provenance.get("packages") or {}).items():
            seen = versions.setdefault(name, [])
            if version not in seen:
                seen.append(version)
        m = machine_of(v)
        if m not in machines:
            machines.append(m)
    return RunSide(path=str(c.run_dir.path), run_id=str(rec.get("run_id") or c.run_dir.path.name),
                   created_at=rec.get("created_at"), campaign_name=campaign.get("name"),
                   campaign_sha256=campaign.get("sha256"), screening=rep["label"] == "screening",
                   harness=tuple(harness), packages=tuple((n, tuple(vs)) for n, vs in sorted(versions.items())),
                   machines=tuple(machines), receipts=len(c.views), invalid=len(c.invalid),
                   stale=len(rep["stale_receipts"]))
