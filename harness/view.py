"""One receipt as the report and the gates' sections read it: :class:`ReceiptView`, read-only, over schema v2
(typed ``lane``, ``behavior`` and ``winrule`` blocks, the gate's ``level``) or v1 (those parts under ``extra``).

It sits below both ``harness/gates/`` (whose sections take views) and ``harness/report/`` (which collects them
from a run directory, :mod:`harness.report.collect`), so neither imports the other to name it.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

from .domain import is_peer_label
from .review import verdict as review_verdict

# The lane table's measurements: per-cell speed (``decode_tok_s_<cell>``, ``prefill_ms_<cell>``) and the
# browser lane's account of a decode step (unprofiled step, session.run and cache-copy figures, the thread
# probe, and a separately profiled generation per cell).
LANE_PREFIXES = ("decode_tok_s_", "prefill_ms_", "decode_step_ms_", "session_run_ms_", "kv_copy_floor_ms_",
                 "kv_bytes_", "thread_speedup_", "profile_")
LANE_SCALARS = ("load_ms", "threads_used")
# What the lane table shows of the machine during a lane's timing (``machine_during``, schema v2).
MACHINE_FIGURES = ("steal_fraction", "foreign_cpu_share")
# The behavior report's invalid-output counters (harness.behavior.evaluate.COUNTERS) and its modes: a rate
# ``<mode>.<counter>`` per pair, tabled per model beside each variant's reference.
INVALID_OUTPUT_COUNTERS = ("repetition", "empty", "garbage", "budget_exhausted")
BEHAVIOR_MODES = ("greedy", "sampled")
# Statistics that v1 spells into a cell's measurement name (decode_tok_s_short_cv, decode_tok_s_iqr_short,
# prefill_ms_short_iqr): a name part that is one of these is a statistic of a cell, never a cell.
STATISTIC_TAGS = ("cv", "iqr")


def cells(row: Mapping[str, Any]) -> list[str]:
    """The workload cells a lane row (or a receipt's measurement names) has speed figures for, sorted.

    A cell has both ``decode_tok_s_<cell>`` and ``prefill_ms_<cell>``; statistics of a cell spelled into
    the name (``_cv``, ``iqr_``, ``_iqr``) are never taken for a cell of their own.
    """
    out = set()
    for key in row:
        if key.startswith("decode_tok_s_"):
            cell = key[len("decode_tok_s_"):]
            parts = cell.split("_")
            if f"prefill_ms_{cell}" in row and parts[0] not in STATISTIC_TAGS and parts[-1] not in STATISTIC_TAGS:
                out.add(cell)
    return sorted(out)


@dataclass(frozen=True)
class ReceiptView:
    """One valid receipt, read-only, with what the run directory says about it.

    ``stale``: why its pinned artifacts no longer match (empty when they do).  ``review``: for a receipt
    that pins a behavior report, (approved, why) from the run's review records (None otherwise).
    ``evidence``: its evidence folder, relative to the run directory.  ``variant_passed``: set by the
    report after qualification: whether the variant this receipt measured passed every gate (None for
    run-level receipts and before qualification), so a gate's section reads the decision, never remakes it.
    """

    data: Mapping[str, Any]
    stale: tuple[str, ...] = ()
    review: tuple[bool, str] | None = None
    evidence: str = ""
    variant_passed: bool | None = None

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

    @property
    def lane(self) -> dict[str, Any] | None:
        """The lane table's row when the receipt measured a throughput lane (v2 ``lane``, v1 ``extra.lane``)."""
        if self.version >= 2:
            return None if self.data.get("lane") is None else _lane_row_v2(self)
        lane = self.extra.get("lane")
        if not isinstance(lane, str):
            return None
        row = {"model": self.model, "dtype": self.dtype, "lane": lane, "gate": self.gate, "nodeid": self.nodeid,
               "outcome": self.outcome, "machine": self.machine}
        for name, entry in self.data["measurements"].items():
            if name.startswith(LANE_PREFIXES) or name in LANE_SCALARS:
                row[name] = entry["value"]
        return row

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
                "greedy_seconds": (timing.get("modes") or {}).get("greedy", {}).get("seconds"),
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


def _lane_row_v2(view: ReceiptView) -> dict[str, Any]:
    """The lane table's row from a v2 receipt's typed lane block: one key per (figure, cell), the names the
    report's tables and ratios use (``decode_tok_s_<cell>``, ``prefill_ms_<cell>``, the browser's step figures
    ``<figure>_<cell>`` and profile ``profile_<figure>_<cell>``, ``profile_kernel_ms_<cell>_<op>``)."""
    lane = view.data["lane"]
    row = {"model": view.model, "dtype": view.dtype, "lane": lane["name"], "gate": view.gate, "nodeid": view.nodeid,
           "outcome": view.outcome, "load_ms": lane.get("load_ms"), "threads_used": lane.get("threads"),
           "machine": view.machine}
    machine = view.machine_during or {}
    row.update({k: machine.get(k) for k in MACHINE_FIGURES})
    for cell, c in lane["cells"].items():
        row[f"decode_tok_s_{cell}"] = c["decode_tokens_per_s"]
        row[f"decode_tok_s_iqr_{cell}"] = c.get("decode_tokens_per_s_iqr")
        row[f"prefill_ms_{cell}"] = c["prefill_ms"]
        for name, value in (c.get("step") or {}).items():
            row[f"{name}_{cell}"] = value
        profile = c.get("profile") or {}
        for name in ("kernel_ms", "model_run_ms", "outside_model_run_ms"):
            if profile.get(name) is not None:
                row[f"profile_{name}_{cell}"] = profile[name]
        for op, ms in (profile.get("top_kernels_ms") or {}).items():
            row[f"profile_kernel_ms_{cell}_{op.lower()}"] = ms
    return row
