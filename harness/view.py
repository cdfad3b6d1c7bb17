"""One receipt as the report and the gates' sections read it: :class:`ReceiptView`, read-only, over schema v2
(typed ``lane``, ``behavior`` and ``winrule`` blocks, the gate's ``level``) or v1 (those parts under ``extra``).

It sits below both ``harness/gates/`` (whose sections take views) and ``harness/report/`` (which collects them
from a run directory, :mod:`harness.report.collect`), so neither imports the other to name it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any, Mapping

from .domain import is_peer_label
from .review import verdict as review_verdict

# What the lane table shows of the machine during a lane's timing (``machine_during``, schema v2).
MACHINE_FIGURES = ("steal_fraction", "foreign_cpu_share")
# The behavior report's invalid-output counters (harness.behavior.evaluate.COUNTERS) and its modes: a rate
# ``<mode>.<counter>`` per pair, tabled per model beside each variant's reference.
INVALID_OUTPUT_COUNTERS = ("repetition", "empty", "garbage", "budget_exhausted")
BEHAVIOR_MODES = ("greedy", "sampled")
# The browser lane's account of a decode step per cell (the v2 lane block's ``step``).
STEP_FIGURES = ("decode_step_ms", "session_run_ms", "kv_copy_floor_ms", "kv_bytes", "thread_speedup")
PROFILE_FIGURES = ("kernel_ms", "model_run_ms", "outside_model_run_ms")


@dataclass(frozen=True)
class CellFigures:
    """One workload cell of a lane: decode tok/s (median of the repeats) and its IQR, the prefill, and for the
    browser the page's account of a step (:data:`STEP_FIGURES`) and a profiled generation (:data:`PROFILE_FIGURES`,
    ``top_kernels_ms``: op -> ms)."""

    decode_tok_s: float | None
    decode_tok_s_iqr: float | None = None
    prefill_ms: float | None = None
    step: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    profile: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def as_dict(self) -> dict[str, Any]:
        return {"decode_tok_s": self.decode_tok_s, "decode_tok_s_iqr": self.decode_tok_s_iqr,
                "prefill_ms": self.prefill_ms, "step": dict(self.step), "profile": dict(self.profile)}


@dataclass(frozen=True)
class LaneRow:
    """The lane table's row of one throughput receipt: who measured what, and its cells."""

    model: str | None
    dtype: str | None
    lane: str
    gate: str
    nodeid: str
    outcome: str
    machine: str | None
    cells: Mapping[str, CellFigures]
    load_ms: float | None = None
    threads_used: int | None = None
    steal_fraction: float | None = None
    foreign_cpu_share: float | None = None

    def speed(self, cell: str) -> float | None:
        """The cell's decode tok/s, None when the lane has no such cell."""
        c = self.cells.get(cell)
        return None if c is None else c.decode_tok_s

    def as_dict(self) -> dict[str, Any]:
        """The report record's form (report.json ``lanes``)."""
        return {"model": self.model, "dtype": self.dtype, "lane": self.lane, "gate": self.gate, "nodeid": self.nodeid,
                "outcome": self.outcome, "machine": self.machine, "load_ms": self.load_ms,
                "threads_used": self.threads_used, "steal_fraction": self.steal_fraction,
                "foreign_cpu_share": self.foreign_cpu_share,
                "cells": {c: f.as_dict() for c, f in sorted(self.cells.items())}}


@dataclass(frozen=True)
class ReceiptView:
    """One valid receipt, read-only, with what the run directory says about it.

    ``stale``: why its pinned artifacts no longer match (empty when they do).  ``review``: for a receipt
    that pins a behavior report, (approved, why) from the run's review records (None otherwise).
    ``evidence``: its evidence folder, relative to the run directory.  ``variant_passed``: set by the
    report after qualification: whether the variant this receipt measured passed every gate (None for
    run-level receipts and before qualification), so a gate's section reads the decision, never remakes it.
    ``run_dir``: the run directory the report read it from (None when unknown), for a section that reads the
    receipt's evidence files (the win rule recomputes each window's verdict from its recorded starts).
    """

    data: Mapping[str, Any]
    stale: tuple[str, ...] = ()
    review: tuple[bool, str] | None = None
    evidence: str = ""
    variant_passed: bool | None = None
    run_dir: str | None = None

    def __post_init__(self):
        if not isinstance(self.data, MappingProxyType):
            object.__setattr__(self, "data", MappingProxyType(dict(self.data)))

    # -- identity ------------------------------------------------------------------------
    @property
    def gate(self) -> str:
        return self.data["gate"]

    @property
    def nodeid(self) -> str:
        return self.data["nodeid"]

    @property
    def model(self) -> str | None:
        return self.data["variant"].get("model")

    @property
    def dtype(self) -> str | None:
        return self.data["variant"].get("dtype")

    @property
    def tier(self) -> str | None:
        return self.data["variant"].get("tier")

    @property
    def recipe(self) -> Mapping[str, Any] | None:
        """The recipe block of a recipe variant (harness/recipes.py: its fields and ``policy_dtype``), else None."""
        return self.data["variant"].get("recipe") or None

    @property
    def browser(self) -> bool:
        """Whether the model delivers this variant to the browser (receipts before the campaign said so: yes)."""
        return bool(self.data["variant"].get("browser", True))

    @property
    def own(self) -> bool:
        """Gatehouse's own export (a fixed dtype or a recipe), as against a peer graph or a run-level receipt."""
        return self.dtype is not None and not is_peer_label(self.dtype, self.recipe)

    @property
    def profile(self) -> str | None:
        return self.data["variant"].get("profile")

    # -- verdict and record --------------------------------------------------------------
    @property
    def outcome(self) -> str:
        return self.data["verdict"]["outcome"]

    @property
    def reasons(self) -> list[str]:
        return list(self.data["verdict"]["reasons"])

    @property
    def screening(self) -> bool:
        return bool(self.data["run"]["screening"])

    @property
    def finished_at(self) -> str:
        return self.data["timing"]["finished_at"]

    @property
    def measurements(self) -> dict[str, Any]:
        """Measurement values by name (units and counts stay in ``data``)."""
        return {k: v["value"] for k, v in self.data["measurements"].items()}

    def value(self, name: str) -> Any:
        m = self.data["measurements"].get(name)
        return None if m is None else m["value"]

    @property
    def artifacts(self) -> list[Mapping[str, Any]]:
        return list(self.data["artifacts"])

    def artifact(self, role: str) -> Mapping[str, Any] | None:
        return next((a for a in self.data["artifacts"] if a["role"] == role), None)

    @property
    def provenance(self) -> Mapping[str, Any]:
        return self.data["provenance"]

    @property
    def parameters(self) -> Mapping[str, Any]:
        return self.data.get("parameters") or {}

    @property
    def policy(self) -> Mapping[str, Any]:
        return self.data["policy"]

    @property
    def extra(self) -> Mapping[str, Any]:
        return self.data.get("extra", {})

    @property
    def version(self) -> int:
        return self.data["schema_version"]

    @property
    def level(self) -> str | None:
        """The gate's level as the receipt recorded it (v2), or None (v1: the registry says)."""
        return self.data.get("level")

    # -- the typed blocks (v2) and their v1 spellings ----------------------------------------
    @property
    def machine(self) -> str | None:
        """The hardware fingerprint of the machine the receipt was measured on (harness.fingerprint): recorded
        since receipts name it, else computed from the recorded machine; None for a receipt without one."""
        before = (self.provenance or {}).get("machine_before") or {}
        if not before:
            return None
        if before.get("fingerprint"):
            return before["fingerprint"]
        from .fingerprint import hardware_fingerprint

        return hardware_fingerprint(before)

    @cached_property
    def lane(self) -> LaneRow | None:
        """The lane table's row when the receipt measured a throughput lane (v2 ``lane``, v1 ``extra.lane``); read
        once per view (the receipt's data is read-only)."""
        if self.version >= 2:
            return None if self.data.get("lane") is None else _lane_row_v2(self)
        lane = self.extra.get("lane")
        return _lane_row_v1(self, lane) if isinstance(lane, str) else None

    @property
    def lane_samples(self) -> dict[str, tuple[float, ...] | None]:
        """Per workload cell of the lane block, the per-repeat decode tok/s in repeat order, or None for a
        cell recorded without them (v2 receipts written before ``decode_tokens_per_s_samples``); empty for
        a receipt with no lane, and for v1 receipts, which never carried them."""
        if self.version < 2 or self.data.get("lane") is None:
            return {}
        out = {}
        for cell, c in self.data["lane"]["cells"].items():
            samples = c.get("decode_tokens_per_s_samples")
            out[cell] = None if samples is None else tuple(float(x) for x in samples)
        return out

    @property
    def behavior(self) -> dict[str, Any] | None:
        """The behavior block (quality index, per-category greedy counts, timing, review) or None."""
        b = self.data.get("behavior") if self.version >= 2 else self.extra.get("behavior")
        if not isinstance(b, Mapping):
            return None
        pinned = self.artifact("behavior_report")
        timing = b.get("timing") or {}
        approved = self.review if self.review is not None else review_verdict(None)
        return {"report_sha256": pinned["sha256"] if pinned else None, "quality_index": b.get("quality_index"),
                "reference_quality_index": b.get("reference_quality_index"),
                "categories": {c: b["rate_counts"].get(f"greedy.{c}") for c in b.get("categories", [])},
                "evaluation_seconds": timing.get("seconds"),
                "cached": b.get("evaluation_cached"),
                "review": dict(zip(("approved", "why"), approved)),
                "invalid_outputs": _invalid_outputs(b.get("rate_counts") or {}),
                "reference_invalid_outputs": _invalid_outputs(b.get("reference_rate_counts") or {}),
                "reference": self.data["parameters"].get("reference")}

    @property
    def machine_during(self) -> Mapping[str, Any] | None:
        """What the machine did during the test's timing (the sampler's summary), or None (not sampled, v1)."""
        m = self.data.get("machine_during") if self.version >= 2 else None
        return m if isinstance(m, Mapping) else None

    @property
    def graph_recheck(self) -> Mapping[str, Any] | None:
        """The pinned graphs re-hashed when the test ended (``changed`` names any that differed), or None."""
        g = self.data.get("graph_recheck") if self.version >= 2 else None
        return g if isinstance(g, Mapping) else None

    @property
    def winrule(self) -> Mapping[str, Any] | None:
        """The win rule's decision record (window, verdict, expected, reasons, its Markdown and chart)."""
        return self.data.get("winrule") if self.version >= 2 else self.extra.get("winrule")


INVALID_OUTPUT_RATES = tuple(f"{m}.{c}" for m in BEHAVIOR_MODES for c in INVALID_OUTPUT_COUNTERS)


def _invalid_outputs(counts: Mapping[str, Any]) -> dict[str, Any]:
    """The invalid-output counters among a behavior block's rate counts (``greedy.repetition``: counts)."""
    return {name: counts[name] for name in INVALID_OUTPUT_RATES if name in counts}


def _lane_row_v2(view: ReceiptView) -> LaneRow:
    """The lane table's row from a v2 receipt's typed lane block, cell by cell."""
    lane = view.data["lane"]
    machine = view.machine_during or {}
    cells = {}
    for cell, c in lane["cells"].items():
        profile = {k: v for k, v in (c.get("profile") or {}).items() if k in PROFILE_FIGURES and v is not None}
        tops = (c.get("profile") or {}).get("top_kernels_ms") or {}
        if tops:
            profile["top_kernels_ms"] = dict(tops)
        cells[cell] = CellFigures(c["decode_tokens_per_s"], c.get("decode_tokens_per_s_iqr"), c["prefill_ms"],
                                  MappingProxyType(dict(c.get("step") or {})), MappingProxyType(profile))
    return LaneRow(view.model, view.dtype, lane["name"], view.gate, view.nodeid, view.outcome, view.machine,
                   MappingProxyType(cells), lane.get("load_ms"), lane.get("threads"),
                   machine.get("steal_fraction"), machine.get("foreign_cpu_share"))


# Schema v1 spelled a lane's cells into measurement names (``decode_tok_s_<cell>``, ``decode_tok_s_iqr_<cell>``,
# ``prefill_ms_<cell>``, the browser's ``<step figure>_<cell>`` and ``profile_<figure>_<cell>``); this reader is the
# only place that parses them.  A name part "cv" or "iqr" is a statistic of a cell, never a cell.
_V1_STATISTICS = ("cv", "iqr")


def _lane_row_v1(view: ReceiptView, lane: str) -> LaneRow:
    m = {k: e["value"] for k, e in view.data["measurements"].items()}
    names = set()
    for key in m:
        if key.startswith("decode_tok_s_"):
            cell = key[len("decode_tok_s_"):]
            parts = cell.split("_")
            if f"prefill_ms_{cell}" in m and parts[0] not in _V1_STATISTICS and parts[-1] not in _V1_STATISTICS:
                names.add(cell)
    cells = {}
    for c in sorted(names):
        step = {f: m[f"{f}_{c}"] for f in STEP_FIGURES if f"{f}_{c}" in m}
        profile = {f: m[f"profile_{f}_{c}"] for f in PROFILE_FIGURES if f"profile_{f}_{c}" in m}
        tops = {k[len(f"profile_kernel_ms_{c}_"):]: v for k, v in m.items() if k.startswith(f"profile_kernel_ms_{c}_")}
        if tops:
            profile["top_kernels_ms"] = tops
        cells[c] = CellFigures(m[f"decode_tok_s_{c}"], m.get(f"decode_tok_s_iqr_{c}"), m[f"prefill_ms_{c}"],
                               MappingProxyType(step), MappingProxyType(profile))
    return LaneRow(view.model, view.dtype, lane, view.gate, view.nodeid, view.outcome, view.machine,
                   MappingProxyType(cells), m.get("load_ms"), m.get("threads_used"))
