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
from ..rundir import RunDir
from ..view import INVALID_OUTPUT_RATES, ReceiptView


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
    durations: tuple[dict[str, Any], ...] = ()    # durations.jsonl (unreadable lines are listed in invalid_builds)


def _number(v) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def _lane_numbers(data: Mapping[str, Any]) -> list[str]:
    """Every figure of the lane row the report reads (:attr:`ReceiptView.lane`) is a number or null."""
    row = ReceiptView(data).lane
    if row is None:
        return []
    out = [f"lane.{k}: expected a number or null, got {getattr(row, k)!r}"
           for k in ("load_ms", "threads_used") if not _number(getattr(row, k))]
    for c, f in sorted(row.cells.items()):
        values = {"decode_tok_s": f.decode_tok_s, "decode_tok_s_iqr": f.decode_tok_s_iqr, "prefill_ms": f.prefill_ms,
                  **{f"step.{k}": v for k, v in f.step.items()},
                  **{f"profile.{k}": v for k, v in f.profile.items() if k != "top_kernels_ms"},
                  **{f"profile.top_kernels_ms.{k}": v for k, v in (f.profile.get("top_kernels_ms") or {}).items()}}
        out += [f"lane.cells.{c}.{k}: expected a number or null, got {v!r}" for k, v in values.items() if not _number(v)]
    return out


def readable(data: Mapping[str, Any], figures: Sequence[str] = ()) -> list[str]:
    """What the schema allows but the report cannot read, each named (empty when the receipt reads).

    The schema types a measurement's value loosely (a number, a string, a boolean) and, in v1, leaves
    ``extra`` free; the report reads some of those as numbers or as blocks of a known shape, so a string
    where a figure belongs or an empty win-rule block is refused by name here rather than dropped quietly.
    ``figures``: the measurement names the report reads as numbers besides the lanes' (the registry's
    :func:`harness.gates.table_figures`, passed in: this module reads no registry).
    """
    out = []
    for name, m in data["measurements"].items():
        if name in figures and not _number(m["value"]):
            out.append(f"measurements.{name}.value: expected a number or null, got {m['value']!r}")
    v2 = data["schema_version"] >= 2
    extra = data.get("extra", {})
    lane = data.get("lane") if v2 else extra.get("lane")
    if not v2 and lane is not None and not isinstance(lane, str):
        out.append(f"extra.lane: expected the lane's name, got {lane!r}")
    elif lane is not None:
        out += _lane_numbers(data)
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


def collect(run: RunDir | Path | str, figures: Sequence[str] = ()) -> Collected:
    """Read the run record, every receipt (invalid ones listed, never dropped silently), the review
    records and the build log; check each receipt's pinned artifacts against the files on disk.  ``figures``:
    as :func:`readable`."""
    run_dir = RunDir.of(run)
    record = run_dir.read_record()
    approvals, bad_reviews = review_approvals(run_dir)
    hashes = Hashes()
    views, invalid = [], []
    for path in run_dir.receipt_files():
        try:
            data = receipts.load(path)
            problems = readable(data, figures)
            if problems:
                raise ReceiptError(f"{path}: " + "; ".join(problems))
        except ReceiptError as exc:
            invalid.append({"path": str(path), "error": str(exc)})
            continue
        views.append(ReceiptView(data, stale=tuple(staleness(data["artifacts"], hashes)),
                                 review=_review(data, approvals, hashes, run_dir), evidence=run_dir.evidence_name(data["nodeid"])))
    builds, bad_builds = run_dir.read_builds()
    durations, bad_durations = run_dir.read_durations()
    return Collected(run_dir, MappingProxyType(record), tuple(views), tuple(invalid), tuple(bad_reviews),
                     tuple(builds), (*bad_builds, *bad_durations), tuple(durations))
