"""The throughput goal ratios (:func:`goal`) and the measurement-name spelling of a lane (:func:`lane_key`).

A lane's own verdict is :func:`harness.gates.lanes.decide`.
"""

from __future__ import annotations

import re

from typing import Any

from .stats import ratio


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
