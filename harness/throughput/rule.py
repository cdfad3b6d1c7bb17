"""The throughput rules: pure functions of a lane's evidence and the policy.

A lane fails when it produced no valid result for a cell (an error, too few repeats, a generation of
the wrong length), when it ran on fewer threads than asked, or when its greedy ids differ from the
reference where the policy requires parity (fp32 against the Python onnxruntime lane; the probe on
the ORT-GenAI graph against ORT-GenAI's own loop). Throughput figures are recorded, never judged
against targets; the goal ratios are recorded by :func:`goal`.
"""

from __future__ import annotations

import re

from typing import Any

from ..verdict import Measurement, Verdict
from .stats import ratio


def decide(evidence: dict[str, Any], policy: dict[str, Any]) -> Verdict:
    """``evidence``: {lane, dtype, error, load: {load_ms, threads}, cells: {name: summary},
    parity: {name: agreement} | absent, parity_reference}. ``policy``: {threads, repeats, cells,
    require_parity: bool}."""
    reasons: list[str] = []
    figures: dict[str, Measurement] = {}
    lane = evidence["lane"]
    if evidence.get("error"):
        reasons.append(f"{lane}: {evidence['error']}")
    load = evidence.get("load") or {}
    if load.get("load_ms") is not None:
        figures["load_ms"] = Measurement(float(load["load_ms"]), "ms")
    if load.get("threads") is not None:
        figures["threads_used"] = Measurement(int(load["threads"]), "threads")
        if int(load["threads"]) != int(policy["threads"]):
            reasons.append(f"{lane}: ran on {load['threads']} threads, the workload asks for {policy['threads']}")
    cells = evidence.get("cells") or {}
    for name in policy["cells"]:
        cell = cells.get(name)
        if cell is None:
            if not evidence.get("error"):
                reasons.append(f"{lane}: no result for cell {name}")
            continue
        if cell["repeats"] < int(policy["repeats"]):
            reasons.append(f"{lane}: cell {name} has {cell['repeats']} measured repeats, the workload asks for "
                           f"{policy['repeats']}")
        n = cell["repeats"]
        figures[f"decode_tok_s_{name}"] = Measurement(cell["decode_tok_s"], "tokens/s", n)
        figures[f"decode_tok_s_{name}_cv"] = Measurement(cell["decode_tok_s_cv"], "ratio", n)
        figures[f"decode_tok_s_iqr_{name}"] = Measurement(cell["decode_tok_s_iqr"], "tokens/s", n)
        figures[f"prefill_ms_{name}"] = Measurement(cell["prefill_ms_median"], "ms", n)
        figures[f"prefill_ms_{name}_iqr"] = Measurement(cell["prefill_ms_iqr"], "ms", n)
        if cell.get("cpu_per_wall") is not None:  # below the thread count: the lane lost CPU to other work
            figures[f"cpu_per_wall_{name}"] = Measurement(cell["cpu_per_wall"], "cpu s per wall s", n)
    parity = evidence.get("parity")
    reference = evidence.get("parity_reference", "the reference")
    if policy.get("require_parity") and parity is None and not evidence.get("error"):
        reasons.append(f"{lane}: greedy parity against {reference} was required but not checked")
    for name, agree in sorted((parity or {}).items()):
        figures[f"greedy_agreement_{name}"] = Measurement(agree["fraction"], "fraction", agree["of"])
        if policy.get("require_parity") and not agree["identical"]:
            reasons.append(f"{lane}: {evidence['dtype']} greedy ids differ from {reference} in cell {name}: "
                           f"{agree['equal']}/{agree['of']} equal, first divergence at token {agree['first_divergence']}")
    return Verdict.from_checks(reasons, figures)


def lane_key(name: str) -> str:
    """A lane's (or a recipe's) label as measurement names spell it: ``q4-gptq-b32`` -> ``q4_gptq_b32``."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def goal(rates: dict[str, dict[str, float | None]], targets: dict[str, float]) -> dict[str, Any]:
    """The goal ratios from one run's pooled decode rates, per cell.

    ``rates``: {lane_key: {cell: tok/s}} with keys ``"<dtype>"`` for the probe on each of our
    variants, ``"ort-genai"`` (and ``"ort-genai-kquant"``, its best-quality build: the faster of the two is the
    bar), ``"ort-genai-probe"`` and ``"llama.cpp"``. ``targets``: {"vs_ortgenai":
    1.0, "vs_llamacpp": 1.3, "probe_vs_ortgenai_tolerance": 0.03}. Returns per variant and cell the
    ratio to ORT-GenAI's own loop and to llama.cpp, whether each target is met (None when a lane is
    missing), and the probe-on-the-ORT-GenAI-graph ratio."""
    default = rates.get("ort-genai", {})
    best = rates.get("ort-genai-kquant", {})
    # ORT-GenAI's own loop: the faster of its default build and its best-quality build, per cell (the stricter bar)
    own = {c: max(r for r in (default.get(c), best.get(c)) if r is not None)
           for c in set(default) | set(best) if default.get(c) is not None or best.get(c) is not None}
    llama = rates.get("llama.cpp", {})
    probe = rates.get("ort-genai-probe", {})
    out: dict[str, Any] = {"variants": {}, "probe_on_ortgenai_graph": {}}
    for key, cells in sorted(rates.items()):
        if key in ("ort-genai", "ort-genai-kquant", "ort-genai-probe", "llama.cpp"):
            continue
        for cell, rate in sorted(cells.items()):
            g = ratio(rate, own.get(cell))
            l = ratio(rate, llama.get(cell))
            out["variants"].setdefault(key, {})[cell] = {
                "decode_tok_s": rate, "vs_ortgenai": g, "vs_llamacpp": l,
                "meets_vs_ortgenai": None if g is None else g >= targets["vs_ortgenai"],
                "meets_vs_llamacpp": None if l is None else l >= targets["vs_llamacpp"]}
    for cell, rate in sorted(probe.items()):
        r = ratio(rate, default.get(cell))   # the probe on the default build's graph against that build's loop
        out["probe_on_ortgenai_graph"][cell] = {
            "ratio": r, "within_tolerance": None if r is None else abs(r - 1.0) <= targets["probe_vs_ortgenai_tolerance"]}
    return out
