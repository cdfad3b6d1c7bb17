"""Rebuild report.json and report.md from the receipts of a run directory, alone."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from . import atomic, receipt as receipts
from .errors import HarnessError, ReceiptError
from .gates import APPLICABLE
from .hashing import sha256_file

REPORT_VERSION = 1
SEVERITY = {"pass": 0, "stale": 1, "skip": 2, "fail": 3, "error": 4}


class _Hashes:
    """Current SHA-256 of artifact files, hashed once per (path, size, mtime) during a rebuild."""

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


def staleness(data: dict[str, Any], hashes: _Hashes) -> list[str]:
    """Reasons a receipt no longer describes the artifacts on disk (empty when it still does)."""
    out = []
    for a in data["artifacts"]:
        now = hashes.current(a["path"])
        if now is None:
            out.append(f"{a['role']} {a['path']} is gone")
        elif now != a["sha256"]:
            out.append(f"{a['role']} {a['path']} changed (receipt {a['sha256'][:12]}, now {now[:12]})")
    return out


def _value(data: dict[str, Any], name: str):
    m = data["measurements"].get(name)
    return None if m is None else m["value"]


def load_receipts(run_path: Path) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    good, bad = [], []
    for path in sorted((run_path / "receipts").glob("*.json")):
        try:
            good.append(receipts.load(path))
        except ReceiptError as exc:
            bad.append({"path": str(path), "error": str(exc)})
    return good, bad


def build(run_path: Path) -> dict[str, Any]:
    run_file = run_path / "run.json"
    try:
        run = json.loads(run_file.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ReceiptError(f"{run_file}: cannot read the run record: {exc}") from exc
    data, invalid = load_receipts(run_path)
    hashes = _Hashes()
    variants: dict[tuple[str, str], dict[str, Any]] = {}
    stale_rows = []
    screening_receipts = 0
    for d in data:
        stale = staleness(d, hashes)
        if stale:
            stale_rows.append({"nodeid": d["nodeid"], "reasons": stale})
        screening_receipts += bool(d["run"]["screening"])
        model, dtype = d["variant"].get("model"), d["variant"].get("dtype")
        if model is None or dtype is None:
            continue
        v = variants.setdefault((model, dtype), {"model": model, "dtype": dtype, "tier": d["variant"].get("tier"),
                                                  "gates": {}, "figures": {}, "graph_bytes": None,
                                                  "graph_sha256": None})
        g = v["gates"].setdefault(d["gate"], {"outcome": "pass", "receipts": [], "reasons": []})
        g["receipts"].append({"nodeid": d["nodeid"], "outcome": d["verdict"]["outcome"],
                              "stale": bool(stale), "finished_at": d["timing"]["finished_at"]})
        outcome = d["verdict"]["outcome"]
        if SEVERITY[outcome] > SEVERITY[g["outcome"]]:
            g["outcome"] = outcome
        if outcome != "pass":
            g["reasons"] += [f"{d['nodeid']}: {r}" for r in d["verdict"]["reasons"]] or [f"{d['nodeid']}: {outcome}"]
        if stale:
            g["outcome"] = "stale" if g["outcome"] == "pass" else g["outcome"]
            g["reasons"] += [f"{d['nodeid']}: stale: {r}" for r in stale]
        for a in d["artifacts"]:
            if a["role"] == "graph":
                v["graph_bytes"], v["graph_sha256"] = a["bytes"], a["sha256"]
        for name in ("relative_increase", "kld_mean", "kld_p99", "top1_agreement", "fp_loss", "quant_loss",
                     "perplexity_ratio", "incremental_vs_full_max_abs_error", "padded_vs_unpadded_max_abs_error",
                     "graph_vs_torch_max_abs_error", "parameters"):
            if name in d["measurements"]:
                v["figures"][name] = _value(d, name)
    rows = []
    for (model, dtype), v in sorted(variants.items()):
        blockers = []
        for gate, dtypes in APPLICABLE.items():
            if dtype in dtypes and gate not in v["gates"]:
                blockers.append(f"{gate}: no receipt (incomplete)")
        for gate, g in sorted(v["gates"].items()):
            if g["outcome"] != "pass":
                blockers.append(f"{gate}: {g['outcome']}")
        complete = not blockers
        if run.get("screening") or screening_receipts:
            blockers.append("screening run: never reported as qualification")
        if v["tier"] == "ci":
            blockers.append("CI-tier model: screening only")
        if dtype == "fp32":
            v["figures"].setdefault("relative_increase", 0.0)
        rows.append({**v, "passed_all_gates": complete, "qualified": not blockers, "blockers": blockers,
                     "rank": None})
    rankable = [r for r in rows if r["passed_all_gates"] and isinstance(r["figures"].get("relative_increase"), (int, float))
                and r["graph_bytes"]]
    for i, r in enumerate(sorted(rankable, key=lambda r: (r["figures"]["relative_increase"], r["graph_bytes"],
                                                           r["model"], r["dtype"])), 1):
        r["rank"] = i
    builds = []
    builds_path = run_path / "builds.jsonl"
    if builds_path.exists():
        builds = [json.loads(line) for line in builds_path.read_text().splitlines() if line.strip()]
    return {
        "schema_version": REPORT_VERSION, "kind": "gatehouse.report", "run": run,
        "label": "screening" if (run.get("screening") or screening_receipts) else "qualification",
        "receipts": len(data), "invalid_receipts": invalid, "stale_receipts": stale_rows,
        "variants": rows, "ranking": "quantization relative loss increase (fp32 = 0), then graph bytes",
        "build_phase": {
            "acquisitions": len(builds), "built": sum(not b["hit"] for b in builds),
            "reused": sum(bool(b["hit"]) for b in builds),
            "seconds": round(sum(b["seconds"] for b in builds), 3),
            "build_seconds_of_built": round(sum(b["build_seconds"] or 0 for b in builds if not b["hit"]), 3),
            "by_artifact": builds,
        },
    }


def _fmt(value, digits=4) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "—"
        return f"{value:.{digits}g}"
    return str(value)


def markdown(rep: dict[str, Any]) -> str:
    run = rep["run"]
    lines = [f"# Gatehouse report — {run['campaign']['name']}", ""]
    if rep["label"] == "screening":
        lines += ["> **SCREENING RUN** — these figures are screening measurements and are never reported as qualification.", ""]
    lines += [f"- run: `{run['run_id']}` (created {run['created_at']})",
              f"- campaign: `{run['campaign']['path']}` sha256 `{run['campaign']['sha256'][:16]}…`",
              f"- receipts: {rep['receipts']} valid, {len(rep['invalid_receipts'])} invalid, "
              f"{len(rep['stale_receipts'])} stale",
              f"- build phase: {rep['build_phase']['built']} built, {rep['build_phase']['reused']} reused, "
              f"{rep['build_phase']['seconds']:.1f} s in artifact acquisition "
              f"({rep['build_phase']['build_seconds_of_built']:.1f} s building)", "",
              f"## Variants (ranked by {rep['ranking']})", "",
              "| rank | model | dtype | qualified | graph MB | loss increase | mean KLD | top-1 | cache max abs err | gates |",
              "|---:|---|---|---|---:|---:|---:|---:|---:|---|"]
    for r in sorted(rep["variants"], key=lambda r: (r["rank"] is None, r["rank"] or 0, r["model"], r["dtype"])):
        f = r["figures"]
        gates = ", ".join(f"{g}:{v['outcome']}" for g, v in sorted(r["gates"].items()))
        mb = r["graph_bytes"] / 1e6 if r["graph_bytes"] else None
        inc = f.get("relative_increase")
        lines.append(f"| {_fmt(r['rank'])} | {r['model']} | {r['dtype']} | {'yes' if r['qualified'] else 'no'} | "
                     f"{_fmt(mb, 4)} | {'—' if inc is None else f'{inc:+.2%}'} | {_fmt(f.get('kld_mean'))} | "
                     f"{_fmt(f.get('top1_agreement'))} | {_fmt(f.get('incremental_vs_full_max_abs_error'))} | {gates} |")
    failing = [(r, g, v) for r in rep["variants"] for g, v in sorted(r["gates"].items()) if v["outcome"] != "pass"]
    if failing:
        lines += ["", "## Failing gates", ""]
        for r, g, v in failing:
            lines.append(f"- **{r['model']}-{r['dtype']} / {g}: {v['outcome']}**")
            lines += [f"  - {reason}" for reason in v["reasons"][:12]]
    blocked = [r for r in rep["variants"] if not r["qualified"]]
    if blocked:
        lines += ["", "## Not qualified", ""]
        lines += [f"- {r['model']}-{r['dtype']}: " + "; ".join(r["blockers"]) for r in blocked]
    if rep["stale_receipts"]:
        lines += ["", "## Stale receipts (artifacts changed since measured)", ""]
        lines += [f"- `{s['nodeid']}`: " + "; ".join(s["reasons"]) for s in rep["stale_receipts"]]
    if rep["invalid_receipts"]:
        lines += ["", "## Invalid receipts", ""]
        lines += [f"- `{b['path']}`: {b['error']}" for b in rep["invalid_receipts"]]
    return "\n".join(lines) + "\n"


def rebuild(run_path: Path | str) -> dict[str, Path]:
    run_path = Path(run_path)
    rep = build(run_path)
    atomic.write_json(run_path / "report.json", rep)
    atomic.write_text(run_path / "report.md", markdown(rep))
    return {"json": run_path / "report.json", "md": run_path / "report.md"}


def summary_line(json_path: Path) -> str:
    rep = json.loads(Path(json_path).read_text())
    n = len(rep["variants"])
    qualified = sum(r["qualified"] for r in rep["variants"])
    failing = sum(v["outcome"] != "pass" for r in rep["variants"] for v in r["gates"].values())
    return (f"{rep['label']}: {n} variants, {qualified} qualified, {failing} failing gate(s), "
            f"{len(rep['stale_receipts'])} stale and {len(rep['invalid_receipts'])} invalid receipt(s)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Rebuild a Gatehouse report from a run directory's receipts")
    parser.add_argument("run_dir")
    args = parser.parse_args(argv)
    try:
        paths = rebuild(Path(args.run_dir))
    except HarnessError as exc:
        print(f"gatehouse-report: {exc}", file=sys.stderr)
        return 2
    print(summary_line(paths["json"]))
    print(paths["md"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
