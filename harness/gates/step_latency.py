"""One decode step with a long past through Python onnxruntime, timed in process by pytest-benchmark.

What a timing cannot show is gated: the step's logits are finite and identical in every round.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ..fields import knob
from ..verdict import Measurement, Verdict
from .spec import Evidence, Figure, GateSpec, Policy


@dataclass(frozen=True)
class StepLatencyPolicy(Policy):
    cell: str = "long"                 # the workload cell whose prompt is the past
    rounds: int = knob(30, lo=1)
    warmup_rounds: int = knob(3, lo=0)


@dataclass(frozen=True)
class StepEvidence(Evidence):
    finite: bool                       # every round's logits finite
    identical: bool                    # every round's logits equal the first's
    figures: Mapping[str, Measurement] = field(default_factory=dict)   # the timer's statistics, when it ran


def decide(evidence: StepEvidence, policy: StepLatencyPolicy) -> Verdict:
    reasons = []
    if not evidence.finite:
        reasons.append("the step returned non-finite logits")
    elif not evidence.identical:
        reasons.append("the same step returned different logits across rounds")
    return Verdict.from_checks(reasons, dict(evidence.figures))


SPEC = GateSpec(
    name="step_latency", level="variant", applies_to=("fp32", "q8", "q4", "recipe"), policy=StepLatencyPolicy,
    evidence=StepEvidence, decide=decide,
    figures=(Figure("step_ms_median", "ms", "lower", table=True), Figure("step_ms_iqr", "ms", "lower", table=True),
             Figure("step_ms_min", "ms", "lower")),
    required=False, describe="one decode step with a long past, timed by pytest-benchmark; logits finite and stable")
