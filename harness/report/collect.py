"""Collect a run directory into typed, read-only views: its record, receipts, reviews and build log.

The report's only reader of files.  Everything after it (qualification, ranks, Markdown) is a function
of what this module returns.  Receipts are schema v2 (``harness/schema/receipt-v2.json``: typed ``lane``,
``behavior`` and ``winrule`` blocks, the gate's ``level``) or v1, whose corresponding parts live outside
its schema (``extra.lane`` with measurement names that carry the workload cell, ``extra.behavior``,
``extra.winrule``); both are read here and nowhere else, into the same views.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from .. import receipt as receipts
from ..errors import ReceiptError
from ..hashing import sha256_file
from ..review import approvals as review_approvals, transcripts as review_transcripts, verdict as review_verdict
from ..domain import is_peer_label
from ..rundir import RunDir

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


class Hashes:
    """Current SHA-256 of artifact files, hashed once per (path, size, mtime) during one collection."""

    def __init__(self):
        self.memo: dict[tuple, str | None] = {}

    def current(self, path: str) -> str | None:
        p = Path(path)
        try:
            st = p.stat()
        except OSError:
            return None
        key = (path, st.st_size, st.st_mtime_ns)
        if key not in self.memo:
            self.memo[key] = sha256_file(p)
        return self.memo[key]


def staleness(artifacts: Sequence[Mapping[str, Any]], hashes: Hashes) -> list[str]:
    """Reasons a receipt no longer describes the artifacts on disk (empty when it still does)."""
    out = []
    for a in artifacts:
        now = hashes.current(a["path"])
        if now is None:
            out.append(f"{a['role']} {a['path']} is gone")
        elif now != a["sha256"]:
            out.append(f"{a['role']} {a['path']} changed (receipt {a['sha256'][:12]}, now {now[:12]})")
    return out


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
        from ..fingerprint import hardware_fingerprint

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


@dataclass(frozen=True)
class Collected:
    """Everything a run directory holds that the report reads."""

    run_dir: RunDir
    record: Mapping[str, Any]                     # run.json
    views: tuple[ReceiptView, ...]                # valid receipts, in file-name order
    invalid: tuple[dict[str, str], ...]           # {"path", "error"} per receipt that failed to load
    invalid_reviews: tuple[dict[str, str], ...]   # {"path", "error"} per review record that failed to load
    builds: tuple[dict[str, Any], ...]            # builds.jsonl
    invalid_builds: tuple[dict[str, str], ...] = ()   # {"path": "builds.jsonl:N", "error"} per unreadable line


def _number(v) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def readable(data: Mapping[str, Any]) -> list[str]:
    """What the schema allows but the report cannot read, each named (empty when the receipt reads).

    The schema types a measurement's value loosely (a number, a string, a boolean) and, in v1, leaves
    ``extra`` free; the report reads some of those as numbers or as blocks of a known shape, so a string
    where a figure belongs or an empty win-rule block is refused by name here rather than dropped quietly.
    """
    from .qualify import FIGURES

    out = []
    for name, m in data["measurements"].items():
        if (name in FIGURES or name.startswith(LANE_PREFIXES) or name in LANE_SCALARS) and not _number(m["value"]):
            out.append(f"measurements.{name}.value: expected a number or null, got {m['value']!r}")
    v2 = data["schema_version"] >= 2
    extra = data.get("extra", {})
    lane = data.get("lane") if v2 else extra.get("lane")
    if not v2 and lane is not None and not isinstance(lane, str):
        out.append(f"extra.lane: expected the lane's name, got {lane!r}")
    behavior = data.get("behavior") if v2 else extra.get("behavior")
    if behavior is not None:
        where = "behavior" if v2 else "extra.behavior"
        if not isinstance(behavior, Mapping):
            out.append(f"{where}: expected a table, got {type(behavior).__name__}")
        else:
            if not _number(behavior.get("quality_index")) or not _number(behavior.get("reference_quality_index")):
                out.append(f"{where}.quality_index: expected numbers, got {behavior.get('quality_index')!r}, "
                           f"{behavior.get('reference_quality_index')!r}")
            cats, counts = behavior.get("categories", []), behavior.get("rate_counts", {})
            ref_counts = behavior.get("reference_rate_counts") or {}
            if not isinstance(cats, list) or not all(isinstance(c, str) for c in cats) or not isinstance(counts, Mapping) \
                    or not isinstance(ref_counts, Mapping):
                out.append(f"{where}: categories must be a list of names and rate_counts and reference_rate_counts tables")
            else:
                for table, rates, names in (("rate_counts", counts, [*(f"greedy.{c}" for c in cats), *INVALID_OUTPUT_RATES]),
                                            ("reference_rate_counts", ref_counts, INVALID_OUTPUT_RATES)):
                    for name in names:
                        rc = rates.get(name)
                        if rc is not None and not (isinstance(rc, Mapping) and all(
                                isinstance(rc.get(k), int) and not isinstance(rc.get(k), bool) for k in ("numerator", "denominator"))):
                            out.append(f"{where}.{table}.{name}: expected integer numerator and denominator, got {rc!r}")
            timing = behavior.get("timing")
            if timing is not None and not (isinstance(timing, Mapping) and _number(timing.get("seconds"))
                                           and isinstance(timing.get("modes", {}), Mapping)):
                out.append(f"{where}.timing: expected a table with seconds, got {timing!r}")
    winrule = data.get("winrule") if v2 else extra.get("winrule")
    if winrule is not None:
        where = "winrule" if v2 else "extra.winrule"
        need = {"window": str, "verdict": str, "expected": str, "reasons": list, "markdown": str, "chart": str}
        if not isinstance(winrule, Mapping):
            out.append(f"{where}: expected a table, got {type(winrule).__name__}")
        else:
            bad = [k for k, t in need.items() if not isinstance(winrule.get(k), t)]
            if bad:
                out.append(f"{where}: missing or mistyped {', '.join(bad)}")
    return out


def _review(view_data: Mapping[str, Any], approvals: Mapping[str, list], hashes: Hashes,
            run_dir: RunDir) -> tuple[bool, str] | None:
    """(approved, why) for the behavior report a receipt pins: an approval names the report's bytes, so a
    report edited after it was measured has no approval any more; one that also names the transcripts read
    counts only while the run's transcripts of that report still have them."""
    pinned = next((a for a in view_data["artifacts"] if a["role"] == "behavior_report"), None)
    if pinned is None:
        return None
    if hashes.current(pinned["path"]) != pinned["sha256"]:
        return False, "the behavior report changed after it was measured; its review no longer applies"
    entries = approvals.get(pinned["sha256"])
    named = entries and any(e.get("transcripts_sha256") for e in entries)
    return review_verdict(entries, review_transcripts(run_dir, view_data, hashes.current) if named else None)


def collect(run: RunDir | Path | str) -> Collected:
    """Read the run record, every receipt (invalid ones listed, never dropped silently), the review
    records and the build log; check each receipt's pinned artifacts against the files on disk."""
    run_dir = RunDir.of(run)
    record = run_dir.read_record()
    approvals, bad_reviews = review_approvals(run_dir)
    hashes = Hashes()
    views, invalid = [], []
    for path in run_dir.receipt_files():
        try:
            data = receipts.load(path)
            problems = readable(data)
            if problems:
                raise ReceiptError(f"{path}: " + "; ".join(problems))
        except ReceiptError as exc:
            invalid.append({"path": str(path), "error": str(exc)})
            continue
        views.append(ReceiptView(data, stale=tuple(staleness(data["artifacts"], hashes)),
                                 review=_review(data, approvals, hashes, run_dir), evidence=run_dir.evidence_name(data["nodeid"])))
    builds, bad_builds = run_dir.read_builds()
    return Collected(run_dir, MappingProxyType(record), tuple(views), tuple(invalid), tuple(bad_reviews),
                     tuple(builds), tuple(bad_builds))
