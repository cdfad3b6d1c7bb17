"""The goal ratios, measured side by side: every lane of a model timed in interleaved rounds.

The ratios are recorded, never asserted (a benchmark on a shared machine); the gate fails only when
a lane gave no valid result or the probe's greedy ids on ORT-GenAI's graph differ from ORT-GenAI's own
loop.  The targets are campaign data (``[policy.throughput_goal]``); the report reads them back from
this gate's receipts to mark each ratio met or missed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from .. import fmt
from ..verdict import Verdict
from . import goal_ratios
from .spec import Evidence, GateSpec, Policy

if TYPE_CHECKING:
    from ..view import ReceiptView

@dataclass(frozen=True)
class GoalPolicy(Policy):
    vs_ortgenai: float = 1.0                    # fastest passing variant on the probe / ORT-GenAI's own loop
    vs_llamacpp: float = 1.3                    # fastest passing variant on the probe / llama.cpp
    probe_vs_ortgenai_within: float = 0.03      # the probe on ORT-GenAI's graph / ORT-GenAI's own loop, within
    browser_over_native: float = 0.5            # best passing browser variant (ort-web) / fastest passing native one
    ort_web_over_transformers_js: float = 1.0   # per graph
    browser_over_peer: float = 1.0              # fastest passing browser variant (and the smallest) / wllama

    def rule_targets(self) -> dict[str, float]:
        """The mapping :func:`harness.throughput.rule.goal` reads."""
        return {"vs_ortgenai": self.vs_ortgenai, "vs_llamacpp": self.vs_llamacpp,
                "probe_vs_ortgenai_tolerance": self.probe_vs_ortgenai_within}


@dataclass(frozen=True)
class GoalEvidence(Evidence):
    """The interleaved rounds of every lane of a model."""

    setup_errors: tuple[str, ...]                            # lanes that could not start
    lanes: Mapping[str, Mapping[str, Any]]                   # name -> its rounds ({"error": ...} when one failed)
    ortgenai_probe_parity: Mapping[str, Mapping[str, Any]] | None = None   # cell -> agreement, when both ran


def decide(evidence: GoalEvidence, policy: GoalPolicy) -> Verdict:
    reasons = list(evidence.setup_errors)
    reasons += [f"{name}: {e['error']}" for name, e in sorted(evidence.lanes.items()) if e.get("error")]
    for cell, a in sorted((evidence.ortgenai_probe_parity or {}).items()):
        if not a["identical"]:
            reasons.append(f"ort-genai-probe: greedy ids differ from ORT-GenAI's own loop in cell {cell}: first "
                           f"divergence at token {a['first_divergence']}")
    return Verdict.from_checks(reasons)


def section(views: Sequence[ReceiptView]) -> list[fmt.Section]:
    """The goal's speed ratios from the run's sequential lane receipts, each marked against the targets
    this gate's receipts recorded, then this gate's own receipts (the interleaved, paired figures)."""
    ratios = goal_ratios.ratios(views, SPEC.name)
    own = [v for v in views if v.gate == SPEC.name]
    if not ratios and not own:
        return []
    blocks: list[str | fmt.Table] = []
    if ratios:
        cells = []
        for q in ratios:
            goal = ("—" if q["met"] is None else
                    (f"within {fmt.pct(q['within'])}" if q.get("within") is not None else f"≥ {fmt.num(q['target'])}")
                    + f": {'met' if q['met'] else 'missed'}")
            cells.append([q["model"], q["cell"], q["ratio"], q["numerator"], q["denominator"], fmt.num(q["value"]), goal])
        blocks.append(fmt.table_of(["model", "cell", "ratio", "numerator", "denominator", "value", "goal"], "lllllrl",
                                   cells))
    blocks += _paired_goal(views, own)
    if own:
        blocks += ["", "Interleaved rounds (every lane of a model loaded at once, order rotated per round):", "",
                   *fmt.receipt_lines(own)]
    return [fmt.Section("Speed ratios measured in this run (sequential lane receipts; the throughput_goal receipts "
                        "below have the interleaved, paired ratios)", tuple(blocks))]


def _value(m):
    return m.get("value") if isinstance(m, Mapping) else m


def _paired_goal(views: Sequence[ReceiptView], own: Sequence[ReceiptView]) -> list[str | fmt.Table]:
    """The native goal read from the interleaved rounds: per model, the fastest variant that passed every gate
    (a fixed dtype or a recipe, by its pooled short-prompt rate in those rounds) and its per-round paired ratios
    to ORT-GenAI's own loop (each build) and to llama.cpp, against the targets."""
    from ..throughput.rule import lane_key as key

    rows = []
    for g in own:
        m = g.measurements
        passing = {v.dtype for v in views if v.model == g.model and v.own and v.variant_passed}
        timed = [(_value(m.get(f"decode_tok_s_{key(label)}_short")) or 0, label) for label in passing
                 if f"decode_tok_s_{key(label)}_short" in m]
        if not timed:
            continue
        _, best = max(timed)
        targets = g.policy.get("targets") or {}
        prefix = f"decode_tok_s_{key(best)}_"
        cells = sorted({n[len(prefix):] for n in m if n.startswith(prefix) and "_" not in n[len(prefix):]})
        for cell in cells:
            def pr(peer):
                return _value(m.get(f"paired_{key(best)}_over_{key(peer)}_{cell}"))
            vs = [pr("ort-genai"), pr("ort-genai-kquant"), pr("llama.cpp")]
            bar = min((x for x in vs[:2] if x is not None), default=None)   # against the faster ORT-GenAI build
            met = [None if bar is None else bar >= targets.get("vs_ortgenai", 1.0),
                   None if vs[2] is None else vs[2] >= targets.get("vs_llamacpp", 1.3)]
            rows.append([g.model, cell, best, fmt.num(_value(m.get(f"decode_tok_s_{key(best)}_{cell}"))),
                         *(fmt.num(x) for x in vs),
                         "; ".join(f"{name} {'met' if ok else 'missed'}" for name, ok in
                                   zip(("ORT-GenAI", "llama.cpp"), met) if ok is not None) or "—"])
    if not rows:
        return []
    return ["", "The native goal, paired per interleaved round (median of the per-round ratios): the fastest variant "
                "that passed every gate against each peer; ORT-GenAI's bar is the faster of its default build and its "
                "best-quality build (k-quant, int8 head).", "",
            fmt.table_of(["model", "cell", "fastest qualified", "tok/s", "/ ORT-GenAI default", "/ ORT-GenAI k-quant",
                          "/ llama.cpp", "goal"], "lllrrrrl", rows)]


SPEC = GateSpec(
    name="throughput_goal", level="run", applies_to=("fp32",), policy=GoalPolicy, evidence=GoalEvidence, decide=decide, section=section,
    describe="every lane of a model in interleaved rounds: paired ratios against ORT-GenAI and llama.cpp")
