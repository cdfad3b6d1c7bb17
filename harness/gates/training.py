"""The CI model's own receipt: it is trained, not random (its loss falls well below where it started)."""

from __future__ import annotations

from dataclasses import dataclass

from ..fields import knob
from ..verdict import Measurement, Verdict
from .spec import Evidence, Figure, GateSpec, Policy


@dataclass(frozen=True)
class TrainingPolicy(Policy):
    max_final_over_initial_train_loss: float = knob(0.6, hi=1.0)
    max_heldout_after_over_before: float = knob(0.7, hi=1.0)


@dataclass(frozen=True)
class TrainingEvidence(Evidence):
    """The trainer's record (``training.json``): losses before and after, on the training and held-out text."""

    initial_train_loss: float
    final_train_loss: float
    heldout_loss_before: float
    heldout_loss_after: float


def decide(r: TrainingEvidence, policy: TrainingPolicy) -> Verdict:
    reasons = []
    train = r.final_train_loss / r.initial_train_loss
    held = r.heldout_loss_after / r.heldout_loss_before
    if not train < policy.max_final_over_initial_train_loss:
        reasons.append(f"training loss fell only to {train:.3f} of its start ({r.initial_train_loss:.4f} -> "
                       f"{r.final_train_loss:.4f}); the policy asks for below {policy.max_final_over_initial_train_loss}")
    if not held < policy.max_heldout_after_over_before:
        reasons.append(f"held-out loss fell only to {held:.3f} of its start ({r.heldout_loss_before:.4f} -> "
                       f"{r.heldout_loss_after:.4f}); the policy asks for below {policy.max_heldout_after_over_before}")
    return Verdict.from_checks(reasons, {"final_over_initial_train_loss": Measurement(train, "ratio"),
                                         "heldout_after_over_before": Measurement(held, "ratio")})


SPEC = GateSpec(name="training", level="run", applies_to=(), policy=TrainingPolicy, evidence=TrainingEvidence,
                decide=decide, describe="the CI model's training and held-out losses fall",
                figures=(Figure("final_over_initial_train_loss", "ratio", "lower"),
                         Figure("heldout_after_over_before", "ratio", "lower")))
