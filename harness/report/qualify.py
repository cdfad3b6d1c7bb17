"""Qualification, the central business rule: which variants passed which gates, and what blocks each one.

Pure functions of receipt views (:mod:`harness.report.collect`).  The gate registry decides which
receipts are about a variant (``gates.level``) and which gates a variant must pass with a receipt of
its own (``gates.qualifying``); a peer graph (another tool's export) is measured beside the variants and
never qualified; a screening run and a CI-tier model never qualify; a behavior report qualifies only
with a person's approval of its exact bytes; and every receipt a variant rests on must come from the
same harness source, package versions and machine, so ``pytest --lf`` after a code change shows the mix.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Sequence

from .. import gates
from ..domain import is_peer_label
from ..view import ReceiptView

SEVERITY = {"pass": 0, "stale": 1, "skip": 2, "fail": 3, "error": 4}   # a gate shows its worst receipt
# The machine's identity in a receipt's provenance: what makes two receipts "the same machine".  Load,
# clock speed, temperature and thread settings change by the minute and are never compared.
MACHINE_KEYS = ("cpu_model", "logical_cpus", "memory_total_bytes", "hostname", "os", "python", "machine")
# What a variant's receipts must share to stand together when they come from several machines (a merged run of
# shards or remote hosts): the kernels' instruction set, the architecture and the interpreter. The hostname, the
# CPU's name and the memory may differ (timings are only ever compared within one machine fingerprint).
QUALITY_MACHINE_KEYS = ("machine", "isa_flags", "python")
# The blockers that remain once a variant passed every gate, by kind (what :func:`to_qualify` sorts them by).
SCREENING_RUN = "screening run: never reported as qualification"
CI_TIER = "CI-tier model: screening only"
PROVENANCE = "provenance: "
SESSION = "session settings: "
REVIEW = "transcript review: "


def is_run_level(view: ReceiptView) -> bool:
    """A receipt about the run rather than one variant: a run-level gate, or no variant to attach it to."""
    level = view.level or gates.level(view.gate)   # v2 receipts say their level; v1 ones ask the registry
    return view.model is None or view.dtype is None or level == "run"


def by_variant(views: Iterable[ReceiptView]) -> dict[tuple[str, str], list[ReceiptView]]:
    """Variant-level receipts grouped by (model, dtype), in sorted key order, receipts in file order."""
    out: dict[tuple[str, str], list[ReceiptView]] = {}
    for v in views:
        if not is_run_level(v):
            out.setdefault((v.model, v.dtype), []).append(v)
    return dict(sorted(out.items()))


def gate_outcomes(views: Sequence[ReceiptView]) -> dict[str, dict[str, Any]]:
    """Per gate of one variant: the worst outcome of its receipts (stale when a passing one is stale),
    each receipt, and the reasons of every receipt that did not pass."""
    out: dict[str, dict[str, Any]] = {}
    for v in views:
        g = out.setdefault(v.gate, {"outcome": "pass", "receipts": [], "reasons": []})
        g["receipts"].append({"nodeid": v.nodeid, "outcome": v.outcome, "stale": bool(v.stale),
                              "finished_at": v.finished_at})
        if SEVERITY[v.outcome] > SEVERITY[g["outcome"]]:
            g["outcome"] = v.outcome
        if v.outcome != "pass":
            g["reasons"] += [f"{v.nodeid}: {r}" for r in v.reasons] or [f"{v.nodeid}: {v.outcome}"]
        if v.stale:
            g["outcome"] = "stale" if g["outcome"] == "pass" else g["outcome"]
            g["reasons"] += [f"{v.nodeid}: stale: {r}" for r in v.stale]
    return out


def figures(views: Sequence[ReceiptView], dtype: str) -> dict[str, Any]:
    """The figures the variants table shows, a later receipt's value winning; fp32 is its own
    reference, so its loss increase is 0."""
    out = {}
    for v in views:
        for name in gates.table_figures():
            if name in v.data["measurements"]:
                out[name] = v.value(name)
    if dtype == "fp32":
        out.setdefault("relative_increase", 0.0)
    return out


def graph(views: Sequence[ReceiptView]) -> tuple[int | None, str | None]:
    """(bytes, sha256) of the variant's graph; weights stored as external data count toward the size."""
    size = sha = None
    for v in views:
        data_bytes = sum(a["bytes"] for a in v.artifacts if a["role"] == "graph_data")
        for a in v.artifacts:
            if a["role"] == "graph":
                size, sha = a["bytes"] + data_bytes, a["sha256"]
    return size, sha


def behavior(views: Sequence[ReceiptView]) -> dict[str, Any] | None:
    """The variant's behavior block (the last receipt that has one)."""
    blocks = [v.behavior for v in views if v.behavior is not None]
    return blocks[-1] if blocks else None


def _spread(values: Sequence[tuple[str, Any]], show=lambda x: str(x)) -> str:
    """'a in n1, n2; b in n3': each distinct value (first seen first) with the receipts that carry it."""
    groups: dict[str, list[str]] = {}
    for nodeid, value in values:
        groups.setdefault(show(value), []).append(nodeid)
    return "; ".join(f"{value} in {', '.join(nodes)}" for value, nodes in groups.items())


def provenance_blockers(views: Sequence[ReceiptView]) -> list[str]:
    """Why the receipts of one variant cannot stand together: each provenance field that differs between
    them, with its values and the receipts (node ids) that carry each (empty when they agree)."""
    out = []
    harness = [(v.nodeid, (v.provenance.get("harness") or {}).get("sha256")) for v in views]
    if len({h for _, h in harness}) > 1:
        out.append(PROVENANCE + "harness source SHA-256 differs: "
                   + _spread(harness, lambda h: str(h)[:12] if h else "none"))
    packages = [(v.nodeid, v.provenance.get("packages") or {}) for v in views]
    names = sorted({n for _, p in packages for n in p})
    differ = [n for n in names if len({p.get(n) for _, p in packages}) > 1]
    if differ:
        out.append(PROVENANCE + "package versions differ: " + ", ".join(
            f"{n} ({_spread([(node, p.get(n)) for node, p in packages], lambda x: x or 'absent')})" for n in differ))
    machines = [(v.nodeid, v.provenance.get("machine_before") or {}) for v in views]
    differ = [k for k in QUALITY_MACHINE_KEYS if len({repr(m.get(k)) for _, m in machines}) > 1]
    if differ:
        out.append(PROVENANCE + "machine differs (kernels may round differently): " + ", ".join(
            f"{k} ({_spread([(node, m.get(k)) for node, m in machines])})" for k in differ))
    return out


def session_blockers(views: Sequence[ReceiptView]) -> list[str]:
    """Why one variant's gates did not run its graph the same way: each ONNX Runtime session setting
    (``ort_session``, :mod:`harness.ortsession`) that differs between the receipts that record one."""
    from ..ortsession import differences

    recorded = [(v.nodeid, v.data["ort_session"]) for v in views if isinstance(v.data.get("ort_session"), dict)]
    found = differences(recorded)
    return [SESSION + "the gates ran the graph with different ONNX Runtime settings: " + "; ".join(found)] if found else []


def variant(views: Sequence[ReceiptView], screening: bool) -> dict[str, Any]:
    """One variant's row: its gates, figures, graph, behavior, whether it passed every gate, and every
    blocker of its qualification (empty means qualified)."""
    first = views[0]
    model, dtype = first.model, first.dtype
    gate_rows = gate_outcomes(views)
    beh = behavior(views)
    size, sha = graph(views)
    recipe = first.recipe
    required = [spec.name for spec in gates.qualifying(dtype, recipe, first.browser)]
    blockers = [f"{name}: no receipt (incomplete)" for name in required if name not in gate_rows]
    for gate, g in sorted(gate_rows.items()):
        if g["outcome"] == "skip" and gate in required:    # not measured: the variant is incomplete, not failing
            why = re.sub(r"^\S+\.py::\S+: ", "", (g["reasons"] or [""])[0])   # without the node id gate_outcomes adds
            blockers.append(f"{gate}: skipped, not measured (incomplete){': ' + why if why else ''}")
        elif g["outcome"] not in ("pass", "skip"):         # a skipped optional gate blocks nothing
            blockers.append(f"{gate}: {g['outcome']}")
    complete = not blockers
    blockers += provenance_blockers(views)
    blockers += session_blockers(views)
    if screening:
        blockers.append(SCREENING_RUN)
    if first.tier == "ci":
        blockers.append(CI_TIER)
    if is_peer_label(dtype, recipe):
        blockers.append(f"peer graph (another tool's export): measured by {', '.join(sorted(gate_rows))}, "
                        f"reported beside the variants, never qualified")
    if beh and not beh["review"]["approved"]:
        blockers.append(f"{REVIEW}{beh['review']['why']} (sha256 {str(beh['report_sha256'])[:12]})")
    return {"model": model, "dtype": dtype, "tier": first.tier, "recipe": dict(recipe) if recipe else None,
            "own": not is_peer_label(dtype, recipe), "gates": gate_rows, "figures": figures(views, dtype),
            "graph_bytes": size, "graph_sha256": sha, "behavior": beh, "passed_all_gates": complete,
            "qualified": not blockers, "status": "qualified" if not blockers else "screening", "blockers": blockers}


def is_screening(record: Mapping[str, Any], views: Iterable[ReceiptView]) -> bool:
    """A run is screening when its record says so or any receipt was written by a screening campaign."""
    return bool(record.get("screening") or any(v.screening for v in views))


def variants(views: Sequence[ReceiptView], screening: bool) -> list[dict[str, Any]]:
    """Every variant and peer graph of the run, sorted by (model, dtype)."""
    return [variant(group, screening) for group in by_variant(views).values()]


def to_qualify(row: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What stands between a variant that passed every gate and "qualified": (kind, blocker) for each of its
    blockers, kind ``screening``, ``ci``, ``provenance``, ``review`` (its transcript review) or ``other``; empty
    for a qualified variant, a peer graph (never qualified) and a variant that has not passed every gate."""
    if row["qualified"] or not row["passed_all_gates"] or not row.get("own", True):
        return []
    kinds = ((SCREENING_RUN, "screening"), (CI_TIER, "ci"), (PROVENANCE, "provenance"), (SESSION, "session"),
             (REVIEW, "review"))
    return [(next((k for prefix, k in kinds if b.startswith(prefix)), "other"), b) for b in row["blockers"]]


def passing(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], bool]:
    """Whether each (model, dtype) passed every gate: what "passing variant" means in the goal ratios."""
    return {(r["model"], r["dtype"]): bool(r["passed_all_gates"]) for r in rows}
