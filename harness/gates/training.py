"""The CI model's own receipt: it is trained, not random (its loss falls well below where it started)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .. import fields
from ..fields import Where
from ..verdict import Measurement, Verdict
from .spec import GateSpec, Policy


@dataclass(frozen=True)
class TrainingPolicy(Policy):
    max_final_over_initial_train_loss: float = 0.6
    max_heldout_after_over_before: float = 0.7

    @classmethod
    def parse(cls, raw, where: Where) -> "TrainingPolicy":
        if raw is None:
            return cls()
        fields.table(where, raw, {"max_final_over_initial_train_loss", "max_heldout_after_over_before"})
        return cls(**{k: fields.number(where.child(k), v, 0.0, 1.0) for k, v in raw.items()})


def decide(evidence: Mapping[str, Any], policy: TrainingPolicy) -> Verdict:
    """``evidence``: the trainer's record (``initial_train_loss``, ``final_train_loss``,
    ``heldout_loss_before``, ``heldout_loss_after``)."""
    r = evidence
    reasons = []
    train = r["final_train_loss"] / r["initial_train_loss"]
    held = r["heldout_loss_after"] / r["heldout_loss_before"]
    if not train < policy.max_final_over_initial_train_loss:
        reasons.append(f"training loss fell only to {train:.3f} of its start ({r['initial_train_loss']:.4f} -> "
                       f"{r['final_train_loss']:.4f}); the policy asks for below {policy.max_final_over_initial_train_loss}")
    if not held < policy.max_heldout_after_over_before:
        reasons.append(f"held-out loss fell only to {held:.3f} of its start ({r['heldout_loss_before']:.4f} -> "
                       f"{r['heldout_loss_after']:.4f}); the policy asks for below {policy.max_heldout_after_over_before}")
    return Verdict.from_checks(reasons, {"final_over_initial_train_loss": Measurement(train, "ratio"),
                                         "heldout_after_over_before": Measurement(held, "ratio")})


SPEC = GateSpec(name="training", level="run", applies_to=(), policy=TrainingPolicy, decide=decide,
                describe="the CI model's training and held-out losses fall")
