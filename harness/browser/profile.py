"""onnxruntime-web's profile (Chrome-trace JSON events printed to the console), summarized: kernel time
by op type and the part of each run that is not kernel time. Pure functions over the printed lines."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any, Iterable


def events(lines: Iterable[str]) -> list[dict[str, Any]]:
    out = []
    for line in lines:
        line = line.strip().rstrip(",")
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def model_runs(evts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The session's runs (``model_run`` events) in the order they ran."""
    return sorted((e for e in evts if e.get("cat") == "Session" and e.get("name") == "model_run"),
                  key=lambda e: e["ts"])


def summarize(evts: list[dict[str, Any]], skip_runs: int = 1, first: int = 0, count: int | None = None
              ) -> dict[str, Any]:
    """Per decode run (runs after the first ``skip_runs``, which is prefill): mean kernel ms by op type,
    total kernel ms, and the run's own duration (model_run) so their difference is the runtime's overhead.

    ``first`` and ``count``: one generation of several profiled in one session, its runs the ``count`` runs from
    run ``first`` on (a kernel event counts toward the run whose span holds it, so the other generations' kernels
    are not counted)."""
    runs = model_runs(evts)[first:None if count is None else first + count]
    if len(runs) <= skip_runs:
        return {"runs": len(runs), "decode_runs": 0}
    decode = runs[skip_runs:]
    spans = [(r["ts"], r["ts"] + r["dur"]) for r in decode]
    by_op: dict[str, float] = defaultdict(float)
    kernel = 0.0
    for e in evts:
        if e.get("cat") != "Node" or not str(e.get("name", "")).endswith("_kernel_time"):
            continue
        ts = e["ts"]
        if any(a <= ts <= b for a, b in spans):
            op = (e.get("args") or {}).get("op_name", "?")
            by_op[op] += e["dur"]
            kernel += e["dur"]
    n = len(decode)
    run_ms = sum(r["dur"] for r in decode) / n / 1000
    kernel_ms = kernel / n / 1000
    ops = {k: round(v / n / 1000, 4) for k, v in sorted(by_op.items(), key=lambda kv: -kv[1])}
    return {"runs": len(runs), "decode_runs": n, "model_run_ms": run_ms, "kernel_ms": kernel_ms,
            "non_kernel_ms": run_ms - kernel_ms, "kernel_ms_by_op": ops,
            "top_ops": list(ops)[:6]}
