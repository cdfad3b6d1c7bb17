"""One decode step with a long past through Python onnxruntime, timed in process by pytest-benchmark.

What a timing cannot show is gated: the step's logits are finite and identical in every round.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .. import fields
from ..fields import Where
from ..verdict import Verdict
from .spec import GateSpec, Policy


@dataclass(frozen=True)
class StepLatencyPolicy(Policy):
    cell: str = "long"        # the workload cell whose prompt is the past
    rounds: int = 30
    warmup_rounds: int = 3

    @classmethod
    def parse(cls, raw, where: Where) -> "StepLatencyPolicy":
        if raw is None:
            return cls()
        fields.table(where, raw, {"cell", "rounds", "warmup_rounds"})
        d = cls()
        return cls(fields.text(where.child("cell"), raw.get("cell", d.cell)),
                   fields.integer(where.child("rounds"), raw.get("rounds", d.rounds), 1),
                   fields.integer(where.child("warmup_rounds"), raw.get("warmup_rounds", d.warmup_rounds), 0))


def decide(evidence: Mapping[str, Any], policy: StepLatencyPolicy) -> Verdict:
    """``evidence``: ``finite`` (every round's logits finite), ``identical`` (every round equal the first),
    ``figures`` (the timer's statistics, when it ran)."""
    reasons = []
    if not evidence["finite"]:
        reasons.append("the step returned non-finite logits")
    elif not evidence["identical"]:
        reasons.append("the same step returned different logits across rounds")
    return Verdict.from_checks(reasons, evidence.get("figures"))


SPEC = GateSpec(
    name="step_latency", level="variant", applies_to=("fp32", "q8", "q4", "recipe"), policy=StepLatencyPolicy, decide=decide,
    required=False, describe="one decode step with a long past, timed by pytest-benchmark; logits finite and stable")
