"""Report sections on what a figure rests on besides its verdict: the machine during each timing (steal,
other processes' CPU, run queue, clock, from the receipts' ``machine_during``) and the invalid-output
counters of the behavior evaluations (repetition, empty, garbage, budget exhausted), per model.

Both render receipt views (:mod:`harness.report.collect`) and decide nothing.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Mapping, Sequence

from .. import fmt
from ..view import BEHAVIOR_MODES, INVALID_OUTPUT_COUNTERS, ReceiptView


def _subject(v: ReceiptView) -> str:
    """What a receipt measured, short: the node id's parameters (``ci-tiny-q4-ort-web``) or its test name."""
    name = v.nodeid.split("::")[-1]
    return name[name.index("[") + 1:-1] if "[" in name and name.endswith("]") else name


def _mhz(m: Mapping[str, Any]) -> str:
    lo, hi = m.get("cpu_mhz_min"), m.get("cpu_mhz_max")
    if lo is None or hi is None:
        return "—"
    span = fmt.num(lo) if round(lo) == round(hi) else f"{fmt.num(lo)}–{fmt.num(hi)}"
    return span + (f" ({m['cpu_mhz_source']})" if m.get("cpu_mhz_source") else "")


def machine_during_lines(views: Sequence[ReceiptView]) -> list[str]:
    """One row per timing receipt: what the sampler saw while it timed (fractions of the machine's CPU time).
    An exclusive receipt with no sample says so: its figures carry no account of the machine."""
    rows = [v for v in views if v.machine_during is not None or v.data["timing"].get("exclusive")]
    if not rows:
        return []
    lines = ["## The machine during each timing", "",
             "Sampled every interval while the test timed (harness/sampler.py): steal is CPU time the hypervisor "
             "took, foreign CPU the busy time of processes outside the test's own process tree, both as fractions "
             "of the machine's CPU time; a reading the machine does not expose is listed under absent.", "",
             *fmt.table(["gate", "test", "timed", "duration", "samples", "steal", "steal peak", "iowait", "foreign CPU",
                         "run queue mean/peak", "MHz", "absent"], "lllrrrrrrrll")]
    for v in sorted(rows, key=lambda v: (v.gate, v.nodeid)):
        m = v.machine_during
        if m is None:
            lines.append(fmt.row([v.gate, _subject(v), "not sampled", *("—",) * 9]))
            continue
        queue = "—" if m.get("run_queue_mean") is None else f"{fmt.num(m['run_queue_mean'])}/{fmt.num(m.get('run_queue_peak'))}"
        lines.append(fmt.row([v.gate, _subject(v), m.get("covers", "—"), fmt.figure(m.get("duration_s"), "s"),
                              fmt.num(m.get("samples")), fmt.pct(m.get("steal_fraction")),
                              fmt.pct(m.get("steal_fraction_peak")), fmt.pct(m.get("iowait_fraction")),
                              fmt.pct(m.get("foreign_cpu_share")), queue, _mhz(m),
                              ", ".join(m.get("absent") or []) or "—"]))
    return lines


def invalid_output_lines(views: Sequence[ReceiptView]) -> list[str]:
    """Per model, each evaluated graph's invalid-output counters (outputs of that kind / cases) beside its
    reference's; a reference shared by several variants (the fp32 graph) is one row naming them."""
    blocks = [(v.model, v.dtype, v.behavior) for v in views
              if v.behavior is not None and v.model is not None and v.dtype is not None]
    blocks = [(m, d, b) for m, d, b in blocks if b["invalid_outputs"] or b["reference_invalid_outputs"]]
    if not blocks:
        return []
    cols = [f"{mode}.{c}" for mode in BEHAVIOR_MODES for c in INVALID_OUTPUT_COUNTERS
            if any(f"{mode}.{c}" in b["invalid_outputs"] or f"{mode}.{c}" in b["reference_invalid_outputs"]
                   for _, _, b in blocks)]
    lines = ["## Invalid outputs in the behavior evaluations", "",
             "Cases whose reply ran away in repetition, was empty, was garbage, or used its whole token budget "
             "without an end-of-turn, out of all cases, per mode (counters that must not rise; the behavior "
             "gate's policy names the ones it bounds)."]
    by_model: dict[str, list] = defaultdict(list)
    for m, d, b in blocks:
        by_model[m].append((d, b))
    for model in sorted(by_model):
        lines += ["", f"### {model}", "",
                  *fmt.table(["graph", "reference of", *(c.replace("_", " ") for c in cols)], "ll" + "r" * len(cols))]
        refs: dict[tuple, list[str]] = {}
        for dtype, b in sorted(by_model[model], key=lambda db: db[0]):
            lines.append(fmt.row([dtype, "", *(fmt.counts(b["invalid_outputs"].get(c)) for c in cols)]))
            if b["reference_invalid_outputs"]:
                key = (b.get("reference") or "reference",
                       tuple(fmt.counts(b["reference_invalid_outputs"].get(c)) for c in cols))
                refs.setdefault(key, []).append(dtype)
        for (label, counts), dtypes in refs.items():
            lines.append(fmt.row([f"reference: {label}", ", ".join(dtypes), *counts]))
    return lines
