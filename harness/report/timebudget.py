"""Where a run's own time went: per gate, per build and per lane, from the run's logs and receipts.

Pure: ``durations.jsonl`` lines (each finished test's setup + call + teardown seconds), ``builds.jsonl`` lines
(each artifact acquisition: built or reused, and what building it cost) and the receipts' views.  A test's
setup includes the builds its fixtures waited for, so a gate's seconds on a cold cache are mostly builds; the
build table says which.  The report shows it; ``compare`` reads the same record to flag a regression of the
tool's own time.

The test phase's shape (:func:`phase`): a test that held the machine exclusively (a timing test) ran with nothing
beside it, so a run on W workers cannot take less wall time than its exclusive tests one after another plus the
rest of its test time spread evenly over the W workers.  Set against the wall time the phase took, that says whether
the run's time is in its tests (cut test time or exclusive time) or in the gaps between them (schedule better).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable, Mapping, Sequence

SUITE_OWN = "(the suite's own tests)"     # suites/harness/: no gate, no receipt
NO_RECEIPT = "(no receipt)"                # a gate test that wrote none (skipped before its receipt, or deselected)
LARGEST = 10                               # builds listed by name


def _gate_of(nodeid: str, gates: Mapping[str, str]) -> str:
    if nodeid in gates:
        return gates[nodeid]
    return SUITE_OWN if nodeid.startswith("suites/harness/") else NO_RECEIPT


def _by_kind(builds: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    kinds: dict[str, list[float]] = {}
    for b in builds:
        kinds.setdefault(str(b.get("kind")), []).append(b.get("build_seconds") or 0.0)
    return [{"kind": k, "entries": len(v), "build_seconds": round(sum(v), 3)}
            for k, v in sorted(kinds.items(), key=lambda kv: -sum(kv[1]))]


def _ended(line: Mapping[str, Any]) -> float | None:
    try:
        return datetime.fromisoformat(line["finished_at"]).timestamp()
    except (KeyError, TypeError, ValueError):
        return None


def phase(lines: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The test phase's shape from each test's last ``durations.jsonl`` line: the tests that held the machine
    exclusively (count, seconds), the workers, the wall time from the first test's start to the last one's end, and
    ``even_split_seconds``, the least wall time those tests allow (the exclusive ones one after another, the rest
    spread evenly over the workers; a test waiting for another's build counts as test time, so the real least is
    lower still).  A figure the lines cannot give is None: lines from before these fields, or lines of several
    sessions (a ``--lf`` rerun replaced some tests' lines; shards merged into one report), whose workers and wall
    time are not one phase's."""
    none = {"exclusive_tests": None, "exclusive_seconds": None, "workers": None, "wall_seconds": None,
            "even_split_seconds": None}
    if not lines or not all(isinstance(d.get("exclusive"), bool) for d in lines):
        return none
    exclusive = [float(d["seconds"]) for d in lines if d["exclusive"]]
    out = {**none, "exclusive_tests": len(exclusive), "exclusive_seconds": round(sum(exclusive), 3)}
    ends = [_ended(d) for d in lines]
    workers = {d.get("worker") for d in lines}
    if len({d.get("session") for d in lines}) != 1 or None in ends or None in workers:
        return out
    shared = sum(float(d["seconds"]) for d in lines) - sum(exclusive)
    wall = max(ends) - min(e - float(d["seconds"]) for e, d in zip(ends, lines))
    return {**out, "workers": len(workers), "wall_seconds": round(wall, 3),
            "even_split_seconds": round(sum(exclusive) + shared / len(workers), 3)}


def time_budget(durations: Iterable[Mapping[str, Any]], builds: Iterable[Mapping[str, Any]],
                views: Sequence[Any]) -> dict[str, Any]:
    """The run's time by gate (tests, seconds, share), its test phase's shape (:func:`phase`), its builds (cold and
    reused, the largest by name) and its lanes (each timed lane's test seconds)."""
    gates = {v.nodeid: v.gate for v in views}
    lines: dict[str, Mapping[str, Any]] = {}
    for d in durations:                      # a rerun's line replaces the first (the run directory keeps both)
        lines[d["nodeid"]] = d
    last = {nodeid: float(d["seconds"]) for nodeid, d in lines.items()}
    total = sum(last.values())
    by_gate: dict[str, dict[str, Any]] = {}
    for nodeid, seconds in last.items():
        g = by_gate.setdefault(_gate_of(nodeid, gates), {"tests": 0, "seconds": 0.0})
        g["tests"] += 1
        g["seconds"] += seconds
    rows = [{"gate": name, "tests": g["tests"], "seconds": round(g["seconds"], 3),
             "share": round(g["seconds"] / total, 4) if total else None}
            for name, g in sorted(by_gate.items(), key=lambda kv: -kv[1]["seconds"])]
    files: dict[str, list[float]] = {}
    for nodeid, seconds in last.items():
        files.setdefault(nodeid.split("::", 1)[0], []).append(seconds)
    by_file = [{"file": f, "tests": len(s), "seconds": round(sum(s), 3)}
               for f, s in sorted(files.items(), key=lambda kv: -sum(kv[1]))[:LARGEST]]
    builds = list(builds)
    cold = [b for b in builds if not b["hit"]]
    largest = sorted(cold, key=lambda b: -(b.get("build_seconds") or 0.0))[:LARGEST]
    built_keys = {b.get("key") for b in cold}
    reused = {b.get("key"): b for b in builds if b["hit"] and b.get("key") not in built_keys}   # each entry once
    reused_seconds = sum(b.get("build_seconds") or 0.0 for b in reused.values())
    lanes = sorted(({"model": v.model, "dtype": v.dtype, "gate": v.gate, "lane": (v.data.get("lane") or {}).get("name"),
                     "seconds": last.get(v.nodeid)} for v in views if v.data.get("lane")),
                   key=lambda r: -(r["seconds"] or 0.0))
    return {"tests": len(last), "test_seconds": round(total, 3), "phase": phase(list(lines.values())),
            "by_gate": rows, "by_file": by_file,
            "builds": {"acquisitions": len(builds), "cold": len(cold), "reused": len(builds) - len(cold),
                       "cold_build_seconds": round(sum(b.get("build_seconds") or 0.0 for b in cold), 3),
                       # what an empty store would have added: the recorded build time of the entries reused
                       "reused_entries": len(reused), "reused_build_seconds": round(reused_seconds, 3),
                       "reused_by_kind": _by_kind(reused.values()),
                       "largest": [{"kind": b.get("kind"), "label": b.get("label"),
                                    "build_seconds": b.get("build_seconds")} for b in largest]},
            "lanes": lanes}
