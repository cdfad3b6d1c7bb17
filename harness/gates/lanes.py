"""What every throughput lane's gate shares: a policy naming where greedy parity is required, the lane's typed
evidence, and the rule on it.

Throughput is recorded, never asserted: a lane fails only when it gave no valid result for a cell (an error, too
few repeats, a generation of the wrong length), ran on other threads than the workload asks, or its greedy ids
differ from the reference where the policy requires parity (fp32 against the Python onnxruntime lane; the probe on
the ORT-GenAI graph against ORT-GenAI's own loop).  The goal ratios are the goal gate's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..domain import DTYPES, PEERS
from ..fields import knob
from ..verdict import Measurement, Verdict
from .spec import Evidence, Figure, Policy


def parity_dtypes(default: tuple[str, ...]):
    """The ``require_parity_dtypes`` field (a subclass's own default): dtypes and peer labels, possibly none."""
    return knob(default, choices=DTYPES + tuple(PEERS), nonempty=False)


@dataclass(frozen=True)
class LanePolicy(Policy):
    """``[policy.<lane gate>]``: the dtypes (or peer labels) whose greedy ids must equal the reference's."""

    require_parity_dtypes: tuple[str, ...] = parity_dtypes(("fp32",))


@dataclass(frozen=True)
class LaneEvidence(Evidence):
    """One lane's measurement (:func:`harness.lanes.run_lane`) on the shared workload."""

    lane: str                                        # native-probe, python-ort, ort-genai, llama.cpp, ...
    dtype: str
    workload: Mapping[str, Any]                      # Workload.describe(): threads, repeats, cells
    cells: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)   # cell -> summary (harness.lanes)
    load: Mapping[str, Any] | None = None            # load_ms, threads
    parity: Mapping[str, Mapping[str, Any]] | None = None   # cell -> agreement (harness.throughput.stats.agreement)
    parity_reference: str = "the reference"
    error: str | None = None


# the figures a lane's verdict carries, per cell (``decode_tok_s_short``, ...) and per lane
CELL_FIGURES = (("decode_tok_s_{}", "tokens/s", "higher"), ("decode_tok_s_{}_cv", "ratio", "lower"),
                ("decode_tok_s_iqr_{}", "tokens/s", "lower"), ("prefill_ms_{}", "ms", "lower"),
                ("prefill_ms_{}_iqr", "ms", "lower"), ("cpu_per_wall_{}", "cpu s per wall s", "higher"),
                ("greedy_agreement_{}", "fraction", "higher"))
FIGURES = (Figure("load_ms", "ms", "lower"), Figure("threads_used", "threads"),
           *(Figure(name.format("<cell>"), unit, better) for name, unit, better in CELL_FIGURES))


def decide(evidence: LaneEvidence, policy: LanePolicy) -> Verdict:
    reasons: list[str] = []
    figures: dict[str, Measurement] = {}
    lane, work = evidence.lane, evidence.workload
    threads, repeats = int(work["threads"]), int(work["repeats"])
    require_parity = evidence.dtype in policy.require_parity_dtypes
    if evidence.error:
        reasons.append(f"{lane}: {evidence.error}")
    load = evidence.load or {}
    if load.get("load_ms") is not None:
        figures["load_ms"] = Measurement(float(load["load_ms"]), "ms")
    if load.get("threads") is not None:
        figures["threads_used"] = Measurement(int(load["threads"]), "threads")
        if int(load["threads"]) != threads:
            reasons.append(f"{lane}: ran on {load['threads']} threads, the workload asks for {threads}")
    for name in (c["name"] for c in work["cells"]):
        cell = evidence.cells.get(name)
        if cell is None:
            if not evidence.error:
                reasons.append(f"{lane}: no result for cell {name}")
            continue
        if cell["repeats"] < repeats:
            reasons.append(f"{lane}: cell {name} has {cell['repeats']} measured repeats, the workload asks for "
                           f"{repeats}")
        n = cell["repeats"]
        figures[f"decode_tok_s_{name}"] = Measurement(cell["decode_tok_s"], "tokens/s", n)
        figures[f"decode_tok_s_{name}_cv"] = Measurement(cell["decode_tok_s_cv"], "ratio", n)
        figures[f"decode_tok_s_iqr_{name}"] = Measurement(cell["decode_tok_s_iqr"], "tokens/s", n)
        figures[f"prefill_ms_{name}"] = Measurement(cell["prefill_ms_median"], "ms", n)
        figures[f"prefill_ms_{name}_iqr"] = Measurement(cell["prefill_ms_iqr"], "ms", n)
        if cell.get("cpu_per_wall") is not None:  # below the thread count: the lane lost CPU to other work
            figures[f"cpu_per_wall_{name}"] = Measurement(cell["cpu_per_wall"], "cpu s per wall s", n)
    parity, reference = evidence.parity, evidence.parity_reference
    if require_parity and parity is None and not evidence.error:
        reasons.append(f"{lane}: greedy parity against {reference} was required but not checked")
    for name, agree in sorted((parity or {}).items()):
        figures[f"greedy_agreement_{name}"] = Measurement(agree["fraction"], "fraction", agree["of"])
        if require_parity and not agree["identical"]:
            reasons.append(f"{lane}: {evidence.dtype} greedy ids differ from {reference} in cell {name}: "
                           f"{agree['equal']}/{agree['of']} equal, first divergence at token {agree['first_divergence']}")
    return Verdict.from_checks(reasons, figures)
