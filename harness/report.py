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
from .campaign import DTYPES
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


SPEED_LANES = ("native-probe", "python-ort")   # the lane a variant's speed rank uses, in preference order
SPEED_CELL = "short"
_FIGURES = ("relative_increase", "kld_mean", "kld_p99", "top1_agreement", "fp_loss", "quant_loss",
            "perplexity_ratio", "incremental_vs_full_max_abs_error", "padded_vs_unpadded_max_abs_error",
            "graph_vs_torch_max_abs_error", "parameters", "quality_index", "step_ms_median", "step_ms_iqr")


# the browser lane's account of a decode step (unprofiled step, session.run and cache-copy figures, the
# thread probe, and a separately profiled generation per cell)
BROWSER_TIME_PREFIXES = ("decode_step_ms_", "session_run_ms_", "kv_copy_floor_ms_", "kv_bytes_", "thread_speedup_",
                         "profile_")


def _lane_row(d: dict[str, Any]) -> dict[str, Any]:
    m = d["measurements"]
    row = {"model": d["variant"].get("model"), "dtype": d["variant"].get("dtype"), "lane": d["extra"]["lane"],
           "gate": d["gate"], "nodeid": d["nodeid"], "outcome": d["verdict"]["outcome"]}
    for name, entry in m.items():
        if name.startswith(("decode_tok_s_", "prefill_ms_") + BROWSER_TIME_PREFIXES) or name in ("load_ms", "threads_used"):
            row[name] = entry["value"]
    return row


# Run-level gates: decisions about a change (winrule) and the streaming engine's protocol gate,
# not about one language-model variant's qualification.
RUN_LEVEL_GATES = ("winrule", "streaming")
STREAM_COLUMNS = (("rtf", "RTF", 3), ("work_seconds_per_window_p95", "work p95 s", 3),
                  ("token_period_seconds", "token period s", 3), ("feeder_lateness_seconds_p99", "feeder late p99 s", 3),
                  ("feeder_lateness_seconds_max", "late max s", 3), ("rss_growth_kib", "RSS growth KiB", 4),
                  ("peak_rss_kib", "peak RSS KiB", 5), ("wer", "WER", 3), ("rolling_trims", "trims", 3))


def _run_level_row(d: dict[str, Any], run_path: Path) -> dict[str, Any]:
    evidence = run_path / "evidence" / receipts.filename(d["nodeid"]).removesuffix(".json")
    return {"gate": d["gate"], "nodeid": d["nodeid"], "outcome": d["verdict"]["outcome"],
            "reasons": d["verdict"]["reasons"], "model": d["variant"].get("model"), "dtype": d["variant"].get("dtype"),
            "measurements": {k: v["value"] for k, v in d["measurements"].items()},
            "winrule": d.get("extra", {}).get("winrule"), "profile": d["variant"].get("profile"),
            "evidence": str(evidence.relative_to(run_path)) if evidence.is_relative_to(run_path) else str(evidence)}


def _best(lanes, model, lane, cell, dtypes=None):
    hits = [(l[f"decode_tok_s_{cell}"], l["dtype"]) for l in lanes
            if l["model"] == model and l["lane"] == lane and l["outcome"] == "pass"
            and isinstance(l.get(f"decode_tok_s_{cell}"), (int, float)) and (dtypes is None or l["dtype"] in dtypes)]
    return max(hits) if hits else None


def goal_ratios(lanes: list[dict[str, Any]], passing: dict[str, set[str]]) -> list[dict[str, Any]]:
    """Speed ratios between lanes measured in this run (passing receipts only), per model and cell.

    ``passing[model]`` holds the dtypes that passed every gate: "fastest passing variant" means those.
    """
    out = []
    models = sorted({l["model"] for l in lanes if l["model"]})
    for model in models:
        cells = sorted({k[len("decode_tok_s_"):] for l in lanes if l["model"] == model for k in l
                        if k.startswith("decode_tok_s_") and f"prefill_ms_{k[len('decode_tok_s_'):]}" in l})
        for cell in cells:
            def add(name, num, den, target=None, within=None):
                if num and den:
                    r = num[0] / den[0]
                    met = (abs(r - 1) <= within) if within is not None else (None if target is None else r >= target)
                    out.append({"model": model, "cell": cell, "ratio": name, "numerator": f"{num[1]} {num[0]:.4g}",
                                "denominator": f"{den[1]} {den[0]:.4g}", "value": r, "target": target,
                                "within": within, "met": met})
            fastest = _best(lanes, model, "native-probe", cell, passing.get(model, set()))
            add("fastest passing variant (probe) / ORT-GenAI own loop", fastest,
                _best(lanes, model, "ort-genai", cell), 1.0)
            add("fastest passing variant (probe) / llama.cpp", fastest, _best(lanes, model, "llama.cpp", cell), 1.3)
            add("probe on the ORT-GenAI graph / ORT-GenAI own loop", _best(lanes, model, "ort-genai-probe", cell),
                _best(lanes, model, "ort-genai", cell), within=0.03)
            add("best browser variant (ort-web) / best native variant (probe)", _best(lanes, model, "ort-web", cell),
                _best(lanes, model, "native-probe", cell, DTYPES), 0.5)
            for dtype in DTYPES:
                add(f"ort-web / transformers.js on the {dtype} graph", _best(lanes, model, "ort-web", cell, {dtype}),
                    _best(lanes, model, "transformers.js", cell, {dtype}), 1.0)
                add(f"probe / Python onnxruntime on the {dtype} graph", _best(lanes, model, "native-probe", cell, {dtype}),
                    _best(lanes, model, "python-ort", cell, {dtype}))
    return out


def pareto_frontier(rows: list[dict[str, Any]], dimensions: tuple[str, ...]) -> list[dict[str, Any]]:
    """Rows not dominated by another (<= in every dimension, < in one); smaller is better in each."""
    return [c for c in rows if not any(
        o is not c and all(o[k] <= c[k] for k in dimensions) and any(o[k] < c[k] for k in dimensions) for o in rows)]


def build(run_path: Path) -> dict[str, Any]:
    from . import review

    run_file = run_path / "run.json"
    try:
        run = json.loads(run_file.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ReceiptError(f"{run_file}: cannot read the run record: {exc}") from exc
    data, invalid = load_receipts(run_path)
    approvals, bad_reviews = review.approvals(run_path)
    hashes = _Hashes()
    variants: dict[tuple[str, str], dict[str, Any]] = {}
    stale_rows, lanes, run_level = [], [], []
    screening_receipts = 0
    for d in data:
        stale = staleness(d, hashes)
        if stale:
            stale_rows.append({"nodeid": d["nodeid"], "reasons": stale})
        screening_receipts += bool(d["run"]["screening"])
        model, dtype = d["variant"].get("model"), d["variant"].get("dtype")
        if isinstance(d.get("extra", {}).get("lane"), str):
            lanes.append(_lane_row(d))
        if model is None or dtype is None or d["gate"] in RUN_LEVEL_GATES:
            run_level.append(_run_level_row(d, run_path))
            continue
        v = variants.setdefault((model, dtype), {"model": model, "dtype": dtype, "tier": d["variant"].get("tier"),
                                                  "gates": {}, "figures": {}, "graph_bytes": None,
                                                  "graph_sha256": None, "behavior": None})
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
        data_bytes = sum(a["bytes"] for a in d["artifacts"] if a["role"] == "graph_data")
        for a in d["artifacts"]:
            if a["role"] == "graph":   # weights stored as external data count toward the size
                v["graph_bytes"], v["graph_sha256"] = a["bytes"] + data_bytes, a["sha256"]
        for name in _FIGURES:
            if name in d["measurements"]:
                v["figures"][name] = _value(d, name)
        if d["gate"] == "behavior" and "behavior" in d.get("extra", {}):
            b = d["extra"]["behavior"]
            pinned = next((a for a in d["artifacts"] if a["role"] == "behavior_report"), None)
            report_sha = pinned["sha256"] if pinned else None
            approved = review.verdict(approvals.get(report_sha))
            if pinned and hashes.current(pinned["path"]) != report_sha:
                approved = (False, "the behavior report changed after it was measured; its review no longer applies")
            v["behavior"] = {"report_sha256": report_sha, "quality_index": b.get("quality_index"),
                             "reference_quality_index": b.get("reference_quality_index"),
                             "categories": {c: b["rate_counts"].get(f"greedy.{c}") for c in b.get("categories", [])},
                             "evaluation_seconds": (b.get("timing") or {}).get("seconds"),
                             "greedy_seconds": ((b.get("timing") or {}).get("modes") or {}).get("greedy", {}).get("seconds"),
                             "cached": b.get("evaluation_cached"),
                             "review": dict(zip(("approved", "why"), approved))}
    screening = bool(run.get("screening") or screening_receipts)
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
        if screening:
            blockers.append("screening run: never reported as qualification")
        if v["tier"] == "ci":
            blockers.append("CI-tier model: screening only")
        if dtype not in DTYPES:
            blockers.append(f"peer graph (another tool's export): measured by {', '.join(sorted(v['gates']))}, "
                            f"reported beside the variants, never qualified")
        if v["behavior"] and not v["behavior"]["review"]["approved"]:
            blockers.append(f"transcript review: {v['behavior']['review']['why']} "
                            f"(sha256 {str(v['behavior']['report_sha256'])[:12]})")
        if dtype == "fp32":
            v["figures"].setdefault("relative_increase", 0.0)
        speed = None
        for lane in SPEED_LANES:
            hit = [r for r in lanes if (r["model"], r["dtype"], r["lane"]) == (model, dtype, lane)
                   and r["outcome"] == "pass" and isinstance(r.get(f"decode_tok_s_{SPEED_CELL}"), (int, float))]
            if hit:
                speed = {"lane": lane, "cell": SPEED_CELL, "decode_tok_s": hit[-1][f"decode_tok_s_{SPEED_CELL}"]}
                break
        rows.append({**v, "passed_all_gates": complete, "qualified": not blockers,
                     "status": "qualified" if not blockers else "screening", "blockers": blockers,
                     "speed": speed, "rank": None, "quality_rank": None, "speed_rank": None, "frontier": False})
    eligible = [r for r in rows if r["passed_all_gates"] and r["graph_bytes"] and r["dtype"] in DTYPES]  # no peers
    quality = [r for r in eligible if isinstance(r["figures"].get("quality_index"), (int, float))]
    for i, r in enumerate(sorted(quality, key=lambda r: (-r["figures"]["quality_index"], r["graph_bytes"],
                                                         r["model"], r["dtype"])), 1):
        r["quality_rank"] = r["rank"] = i
    fast = [r for r in eligible if r["speed"]]
    for i, r in enumerate(sorted(fast, key=lambda r: (-r["speed"]["decode_tok_s"],
                                                      -(r["figures"].get("quality_index") or 0), r["graph_bytes"],
                                                      r["model"], r["dtype"])), 1):
        r["speed_rank"] = i
    dims = ["parameters", "graph_bytes"] + (["latency_ms_per_token"] if eligible and all(r["speed"] for r in eligible) else [])
    points = []
    for r in eligible:
        if r["figures"].get("parameters") is None:
            continue
        points.append({"row": r, "parameters": r["figures"]["parameters"], "graph_bytes": r["graph_bytes"],
                       "latency_ms_per_token": 1000.0 / r["speed"]["decode_tok_s"] if r["speed"] else None})
    for p in pareto_frontier(points, tuple(dims)):
        p["row"]["frontier"] = True
    builds = []
    builds_path = run_path / "builds.jsonl"
    if builds_path.exists():
        builds = [json.loads(line) for line in builds_path.read_text().splitlines() if line.strip()]
    return {
        "schema_version": REPORT_VERSION, "kind": "gatehouse.report", "run": run,
        "label": "screening" if screening else "qualification",
        "receipts": len(data), "invalid_receipts": invalid, "stale_receipts": stale_rows,
        "invalid_reviews": bad_reviews,
        "variants": rows,
        "ranking": "quality index (behavior), then graph bytes; failed or incomplete variants are unranked",
        "speed_ranking": f"decode tokens/s ({' or '.join(SPEED_LANES)} lane, {SPEED_CELL} prompt), then quality, "
                         "then graph bytes",
        "frontier_dimensions": dims,
        "lanes": lanes,
        "ratios": goal_ratios(lanes, {m: {r["dtype"] for r in rows if r["model"] == m and r["passed_all_gates"]
                                          and r["dtype"] in DTYPES}
                                      for m in {r["model"] for r in rows}}),
        "run_level": run_level,
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


def _counts(c) -> str:
    return "—" if not c else f"{c['numerator']}/{c['denominator']}"


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
              "## Variants", "",
              f"Quality rank: {rep['ranking']}. Speed rank: {rep['speed_ranking']}. Frontier: Pareto over "
              f"{', '.join(rep['frontier_dimensions'])} among variants that passed every gate.", "",
              "| quality rank | speed rank | model | dtype | status | quality /100 | graph MB | decode tok/s | "
              "loss increase | mean KLD | top-1 | cache max abs err | frontier | gates |",
              "|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in sorted(rep["variants"], key=lambda r: (r["rank"] is None, r["rank"] or 0, r["model"], r["dtype"])):
        f = r["figures"]
        gates = ", ".join(f"{g}:{v['outcome']}" for g, v in sorted(r["gates"].items()))
        mb = r["graph_bytes"] / 1e6 if r["graph_bytes"] else None
        inc = f.get("relative_increase")
        speed = r.get("speed")
        lines.append(f"| {_fmt(r['quality_rank'])} | {_fmt(r.get('speed_rank'))} | {r['model']} | {r['dtype']} | "
                     f"{r['status']} | {_fmt(f.get('quality_index'), 3)} | {_fmt(mb, 4)} | "
                     f"{_fmt(speed['decode_tok_s'] if speed else None, 4)} | "
                     f"{'—' if inc is None else f'{inc:+.2%}'} | {_fmt(f.get('kld_mean'))} | "
                     f"{_fmt(f.get('top1_agreement'))} | {_fmt(f.get('incremental_vs_full_max_abs_error'))} | "
                     f"{'yes' if r.get('frontier') else ''} | {gates} |")
    behaved = [r for r in rep["variants"] if r.get("behavior")]
    if behaved:
        cats = sorted({c for r in behaved for c in r["behavior"]["categories"]})
        lines += ["", "## Behavior (greedy, counts per category)", "",
                  "The quality index is the equal-weight mean of the category rates, descriptive of this finite "
                  "suite only.", "",
                  "| model | dtype | quality /100 | reference /100 | " + " | ".join(cats) +
                  " | evaluation s (greedy) | review | behavior report |",
                  "|---|---|---:|---:|" + "---:|" * len(cats) + "---:|---|---|"]
        for r in behaved:
            b = r["behavior"]
            lines.append(f"| {r['model']} | {r['dtype']} | {_fmt(b['quality_index'], 3)} | "
                         f"{_fmt(b['reference_quality_index'], 3)} | "
                         + " | ".join(_counts(b["categories"].get(c)) for c in cats) +
                         f" | {_fmt(b['evaluation_seconds'], 3)} ({_fmt(b.get('greedy_seconds'), 3)})"
                         f"{' cached' if b.get('cached') else ''} | {b['review']['why']} | "
                         f"`{str(b['report_sha256'])[:16]}…` |")
    if rep.get("lanes"):
        cells = sorted({k[len("decode_tok_s_"):] for l in rep["lanes"] for k in l
                        if k.startswith("decode_tok_s_") and f"prefill_ms_{k[len('decode_tok_s_'):]}" in l})
        lines += ["", "## Throughput, every lane side by side (same workload, same run)", "",
                  "| model | dtype | lane | outcome | " + " | ".join(f"decode tok/s {c}" for c in cells) + " | "
                  + " | ".join(f"prefill ms {c}" for c in cells) + " | load ms |",
                  "|---|---|---|---|" + "---:|" * (2 * len(cells) + 1)]
        for l in sorted(rep["lanes"], key=lambda l: (l["model"], l["dtype"], l["lane"])):
            lines.append(f"| {l['model']} | {l['dtype']} | {l['lane']} | {l['outcome']} | "
                         + " | ".join(_fmt(l.get(f"decode_tok_s_{c}"), 4) for c in cells) + " | "
                         + " | ".join(_fmt(l.get(f"prefill_ms_{c}"), 4) for c in cells)
                         + f" | {_fmt(l.get('load_ms'), 4)} |")
    web = [l for l in rep.get("lanes", []) if l["lane"] == "ort-web" and any(k.startswith("decode_step_ms_") for k in l)]
    if web:
        lines += ["", "## Where the browser time goes (onnxruntime-web, per decode step)", "",
                  "Step and session.run: the measured repeats. Cache copy: one JS copy of the cache the step feeds "
                  "(its floor; session.run copies it into the wasm heap and the new cache back out). Profiled: a "
                  "separate generation with onnxruntime-web's profiler on, which slows every node, so its "
                  "milliseconds compare with each other only; outside run = session.run minus the runtime's own run.",
                  "", "| model | dtype | cell | step ms | session.run ms | cache MB | cache copy ms | 2-thread speedup "
                  "| profiled kernel ms | profiled outside run ms | top kernels (profiled ms) |",
                  "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for l in sorted(web, key=lambda l: (l["model"], l["dtype"])):
            for c in sorted(k[len("decode_step_ms_"):] for k in l if k.startswith("decode_step_ms_")):
                prefix = f"profile_kernel_ms_{c}_"
                tops = sorted(((k[len(prefix):], v) for k, v in l.items() if k.startswith(prefix)),
                              key=lambda kv: -kv[1])
                kv = l.get(f"kv_bytes_{c}")
                lines.append(f"| {l['model']} | {l['dtype']} | {c} | {_fmt(l.get(f'decode_step_ms_{c}'), 3)} | "
                             f"{_fmt(l.get(f'session_run_ms_{c}'), 3)} | {_fmt(kv / 1e6 if kv else None, 3)} | "
                             f"{_fmt(l.get(f'kv_copy_floor_ms_{c}'), 3)} | {_fmt(l.get(f'thread_speedup_{c}'), 3)} | "
                             f"{_fmt(l.get(f'profile_kernel_ms_{c}'), 3)} | "
                             f"{_fmt(l.get(f'profile_outside_model_run_ms_{c}'), 3)} | "
                             + (", ".join(f"{op} {v:.3g}" for op, v in tops) or "—") + " |")
    if rep.get("ratios"):
        lines += ["", "## Speed ratios measured in this run (sequential lane receipts; the throughput_goal receipt "
                  "below has the interleaved, paired ratios)", "",
                  "| model | cell | ratio | numerator | denominator | value | goal |", "|---|---|---|---|---|---:|---|"]
        for q in rep["ratios"]:
            goal = ("—" if q["met"] is None else
                    (f"within {q['within']:.0%}" if q.get("within") is not None else f"≥ {q['target']:g}")
                    + f": {'met' if q['met'] else 'missed'}")
            lines.append(f"| {q['model']} | {q['cell']} | {q['ratio']} | {q['numerator']} | {q['denominator']} | "
                         f"{q['value']:.3g} | {goal} |")
    windows = [r for r in rep.get("run_level", []) if r.get("winrule")]
    if windows:
        lines += ["", "## OFF/ON/OFF win rule decisions", "",
                  "| model | dtype | window | verdict | before override | expected | gate | reasons | record |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in windows:
            w = r["winrule"]
            lines.append(f"| {r['model']} | {r['dtype']} | {w['window']} | **{w['verdict']}** | "
                         f"{w['verdict_before_override'] or '—'} | {w['expected']} | {r['outcome']} | "
                         f"{'; '.join(w['reasons']) or '—'} | [{w['markdown']}]({r['evidence']}/{w['markdown']}), "
                         f"[chart]({r['evidence']}/{w['chart']}) |")
    streams = [r for r in rep.get("run_level", []) if r["gate"] == "streaming" and r["outcome"] != "skip"]
    if streams:
        lines += ["", "## Streaming protocol (one row per profile and case)", "",
                  "| test | outcome | " + " | ".join(c[1] for c in STREAM_COLUMNS) + " |",
                  "|---|---|" + "---:|" * len(STREAM_COLUMNS)]
        for r in streams:
            case = r["nodeid"].split("[", 1)[-1].rstrip("]")
            lines.append(f"| {case} | {r['outcome']} | "
                         + " | ".join(_fmt(r["measurements"].get(k), d) for k, _, d in STREAM_COLUMNS) + " |")
    others = [r for r in rep.get("run_level", []) if not r.get("winrule") and not (r["gate"] == "streaming" and r["outcome"] != "skip")]
    if others:
        lines += ["", "## Run-level results", ""]
        for r in others:
            figs = ", ".join(f"{k} = {_fmt(v, 4)}" for k, v in sorted(r["measurements"].items()))
            lines.append(f"- `{r['nodeid']}` ({r['outcome']}): {figs or 'no figures'}")
    failing = [(r, g, v) for r in rep["variants"] for g, v in sorted(r["gates"].items()) if v["outcome"] != "pass"]
    if failing:
        lines += ["", "## Failing gates", ""]
        for r, g, v in failing:
            lines.append(f"- **{r['model']}-{r['dtype']} / {g}: {v['outcome']}**")
            lines += [f"  - {reason}" for reason in v["reasons"][:12]]
    blocked = [r for r in rep["variants"] if not r["qualified"]]
    if blocked:
        lines += ["", "## Not qualified (screening), with blockers", ""]
        lines += [f"- {r['model']}-{r['dtype']}: " + "; ".join(r["blockers"]) for r in blocked]
    if rep["stale_receipts"]:
        lines += ["", "## Stale receipts (artifacts changed since measured)", ""]
        lines += [f"- `{s['nodeid']}`: " + "; ".join(s["reasons"]) for s in rep["stale_receipts"]]
    if rep["invalid_receipts"]:
        lines += ["", "## Invalid receipts", ""]
        lines += [f"- `{b['path']}`: {b['error']}" for b in rep["invalid_receipts"]]
    if rep.get("invalid_reviews"):
        lines += ["", "## Invalid review records", ""]
        lines += [f"- `{b['path']}`: {b['error']}" for b in rep["invalid_reviews"]]
    if rep.get("plot"):
        lines += ["", f"![quality vs size]({rep['plot']})"]
    return "\n".join(lines) + "\n"


def plot(rep: dict[str, Any], path: Path) -> bool:
    """Quality index against graph size, the frontier marked; False when nothing has both figures."""
    pts = [r for r in rep["variants"] if r["graph_bytes"] and isinstance(r["figures"].get("quality_index"), (int, float))]
    if not pts:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
    for r in pts:
        x, y = r["graph_bytes"] / 1e6, r["figures"]["quality_index"]
        style = dict(marker="*", s=160, color="tab:green") if r.get("frontier") else \
            dict(marker="o", s=50, color="tab:blue" if r["passed_all_gates"] else "tab:gray")
        ax.scatter([x], [y], zorder=3, **style)
        ax.annotate(f"{r['model']}-{r['dtype']}" + ("" if r["passed_all_gates"] else " (failed)"), (x, y),
                    textcoords="offset points", xytext=(5, 5), fontsize=8)
    front = sorted((r for r in pts if r.get("frontier")), key=lambda r: r["graph_bytes"])
    if len(front) > 1:
        ax.plot([r["graph_bytes"] / 1e6 for r in front], [r["figures"]["quality_index"] for r in front],
                color="tab:green", lw=1, zorder=2)
    ax.set_xlabel("graph size (MB)")
    ax.set_ylabel("quality index (/100, behavior suite)")
    ax.set_title(f"{rep['run']['campaign']['name']}: quality vs size (star: Pareto frontier)"
                 + (" [SCREENING]" if rep["label"] == "screening" else ""), fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, format="png")
    plt.close(fig)
    tmp.replace(path)
    return True


def rebuild(run_path: Path | str, review_file: Path | str | None = None) -> dict[str, Path]:
    from . import review

    run_path = Path(run_path)
    if review_file is not None:
        review.store(run_path, review_file)
    rep = build(run_path)
    png = run_path / "quality_vs_size.png"
    if plot(rep, png):
        rep["plot"] = png.name
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
    parser.add_argument("--review", metavar="FILE", help="a transcript review record to add to the run (JSON)")
    args = parser.parse_args(argv)
    try:
        paths = rebuild(Path(args.run_dir), args.review)
    except HarnessError as exc:
        print(f"gatehouse-report: {exc}", file=sys.stderr)
        return 2
    print(summary_line(paths["json"]))
    print(paths["md"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
