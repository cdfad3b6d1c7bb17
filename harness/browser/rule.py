"""The browser throughput gate's rule: a pure function of the lane's evidence and the policy.

Fails when the page was not cross-origin isolated, when the runtime started fewer wasm threads than
asked (a silent fall-back to one thread), when a cell has too few repeats, or when fp32 greedy ids
differ from the Python onnxruntime reference; q8/q4 agreement is recorded, not judged (dynamic int8 and
MatMulNBits kernels differ between runtimes).
"""

from __future__ import annotations

from typing import Any

from ..verdict import Measurement, Verdict


def threads_used(load: dict[str, Any]) -> int:
    """Threads the wasm runtime really runs: the main thread plus the pthread Workers it started
    (never more than it reports configuring)."""
    effective = int(load.get("num_threads_effective") or 1)
    started = 1 + int(load.get("workers_started") or 0)
    return min(effective, started)


def decide(evidence: dict[str, Any], policy: dict[str, Any]) -> Verdict:
    """``evidence``: {lane, dtype, load, cells: {name: summary}, parity: {name: agreement}, and for onnxruntime-web
    teacher_forced: {name: {browser, native}}: the teacher-forced top-1 agreement with the native fp32 graph's
    continuation in the page and on the same graph natively}. ``policy``: {threads, repeats, require_parity_dtypes,
    teacher_forced_slack}."""
    reasons: list[str] = []
    figures: dict[str, Measurement] = {}
    load = evidence["load"]
    env = load.get("env") or {}
    lane = evidence["lane"]
    if env.get("crossOriginIsolated") is not True:
        reasons.append(f"{lane}: the page was not cross-origin isolated (crossOriginIsolated="
                       f"{env.get('crossOriginIsolated')!r}); without COOP/COEP there is no SharedArrayBuffer and "
                       f"onnxruntime-web runs one thread")
    wanted = int(policy["threads"])
    used = threads_used(load)
    if used < wanted:
        reasons.append(f"{lane}: asked for {wanted} wasm threads, the runtime runs {used} "
                       f"(num_threads_effective={load.get('num_threads_effective')}, "
                       f"workers_started={load.get('workers_started')}): it fell back silently")
    figures["threads_used"] = Measurement(used, "threads")
    figures["load_ms"] = Measurement(float(load["load_ms"]), "ms")
    for name, cell in sorted(evidence["cells"].items()):
        if cell["repeats"] < int(policy["repeats"]):
            reasons.append(f"{lane}: cell {name} has {cell['repeats']} measured repeats, the workload asks for "
                           f"{policy['repeats']}")
        figures[f"decode_tok_s_{name}"] = Measurement(cell["decode_tok_s"], "tokens/s", cell["repeats"])
        figures[f"decode_tok_s_{name}_cv"] = Measurement(cell["decode_tok_s_cv"], "ratio", cell["repeats"])
        figures[f"prefill_ms_{name}"] = Measurement(cell["prefill_ms_median"], "ms", cell["repeats"])
        figures[f"prefill_ms_{name}_iqr"] = Measurement(cell["prefill_ms_iqr"], "ms", cell["repeats"])
    strict = evidence["dtype"] in tuple(policy.get("require_parity_dtypes", ("fp32",)))
    for name, agree in sorted(evidence.get("parity", {}).items()):
        figures[f"greedy_agreement_{name}"] = Measurement(agree["fraction"], "fraction", agree["of"])
        if strict and not agree["identical"]:
            reasons.append(f"{lane}: {evidence['dtype']} greedy ids differ from the Python onnxruntime reference "
                           f"in cell {name}: {agree['equal']}/{agree['of']} equal, first divergence at token "
                           f"{agree['first_divergence']}")
    slack = float(policy.get("teacher_forced_slack", 0.1))
    for name, tf in sorted((evidence.get("teacher_forced") or {}).items()):
        b, n = tf["browser"], tf["native"]
        figures[f"teacher_forced_top1_{name}"] = Measurement(b["fraction"], "fraction", b["of"])
        figures[f"teacher_forced_top1_native_{name}"] = Measurement(n["fraction"], "fraction", n["of"])
        if b["fraction"] < n["fraction"] - slack:
            reasons.append(f"{lane}: teacher-forced top-1 agreement with the native fp32 graph's continuation in cell "
                           f"{name} is {b['equal']}/{b['of']} in the browser against {n['equal']}/{n['of']} for the "
                           f"same graph natively (slack {slack}): the browser lane computes something else")
    return Verdict.from_checks(reasons, figures)
