"""The goal ratios, measured side by side: every lane of a model timed in interleaved rounds.

The ratios are recorded, never asserted (a benchmark on a shared machine); the gate fails only when
a lane gave no valid result or the probe's greedy ids on ORT-GenAI's graph differ from ORT-GenAI's own
loop.  The targets are campaign data (``[policy.throughput_goal]``); the report reads them back from
this gate's receipts to mark each ratio met or missed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .. import fields
from ..fields import Where
from ..verdict import Verdict
from .spec import GateSpec, Policy

_TARGETS = ("vs_ortgenai", "vs_llamacpp", "probe_vs_ortgenai_within", "browser_over_native",
            "ort_web_over_transformers_js")


@dataclass(frozen=True)
class GoalPolicy(Policy):
    vs_ortgenai: float = 1.0                    # fastest passing variant on the probe / ORT-GenAI's own loop
    vs_llamacpp: float = 1.3                    # fastest passing variant on the probe / llama.cpp
    probe_vs_ortgenai_within: float = 0.03      # the probe on ORT-GenAI's graph / ORT-GenAI's own loop, within
    browser_over_native: float = 0.5            # best browser variant (ort-web) / best native variant
    ort_web_over_transformers_js: float = 1.0   # per graph

    @classmethod
    def parse(cls, raw, where: Where) -> "GoalPolicy":
        if raw is None:
            return cls()
        fields.table(where, raw, _TARGETS)
        return cls(**{k: fields.number(where.child(k), v) for k, v in raw.items()})

    def rule_targets(self) -> dict[str, float]:
        """The mapping :func:`harness.throughput.rule.goal` reads."""
        return {"vs_ortgenai": self.vs_ortgenai, "vs_llamacpp": self.vs_llamacpp,
                "probe_vs_ortgenai_tolerance": self.probe_vs_ortgenai_within}


def decide(evidence: Mapping[str, Any], policy: GoalPolicy) -> Verdict:
    """``evidence``: ``setup_errors`` (lanes that could not start), ``lanes`` {name: {error}}, and
    ``ortgenai_probe_parity`` {cell: agreement} when both ORT-GenAI lanes ran."""
    reasons = list(evidence.get("setup_errors", []))
    reasons += [f"{name}: {e['error']}" for name, e in sorted(evidence.get("lanes", {}).items()) if e.get("error")]
    for cell, a in sorted((evidence.get("ortgenai_probe_parity") or {}).items()):
        if not a["identical"]:
            reasons.append(f"ort-genai-probe: greedy ids differ from ORT-GenAI's own loop in cell {cell}: first "
                           f"divergence at token {a['first_divergence']}")
    return Verdict.from_checks(reasons)


SPEC = GateSpec(
    name="throughput_goal", level="run", applies_to=("fp32",), policy=GoalPolicy, decide=decide,
    describe="every lane of a model in interleaved rounds: paired ratios against ORT-GenAI and llama.cpp")
