"""The behavior rule's own error rates on a model (run level): null conditions pass, damaged conditions fail.

The conditions and their measurement are :mod:`harness.behavior.calibration`; this module declares the gate,
its policy and its report section.  The test (``suites/test_behavior_calibration.py``) runs the conditions on
each model's fp32 graph and PyTorch weights with the campaign's behavior suite, contract and paired rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .. import fmt
from ..behavior import calibration
from ..fields import knob
from ..verdict import Verdict
from .spec import Evidence, GateSpec, Policy


@dataclass(frozen=True)
class CalibrationPolicy(Policy):
    """``[policy.behavior_calibration]``: the error rates the paired rule must show, how they are resampled, and
    the conditions: ``seeds`` other sampling seeds (null), ``noise`` relative weight-noise levels (damaged),
    ``truncate`` decoder layers removed (damaged; 0: none), ``other_threads`` the intra-op thread count of the
    thread null condition (0: 1 when the campaign runs more, else 2), ``damaged_per_category`` the cases of each
    category the damaged conditions evaluate (0: the model's whole suite; a slice makes their measured power a
    lower bound of the whole suite's, and saves PyTorch's slow generation)."""

    max_false_fail: float = knob(0.05, hi=1.0)
    min_power: float = knob(0.9, hi=1.0)
    resamples: int = knob(400, lo=50)
    seeds: int = knob(2, lo=0)
    noise: tuple[float, ...] = knob((0.3,), lo=0.0001, hi=10.0, nonempty=False)
    truncate: int = knob(1, lo=0)
    other_threads: int = knob(0, lo=0)
    damaged_per_category: int = knob(0, lo=0)


@dataclass(frozen=True)
class CalibrationEvidence(Evidence):
    """Each condition the test measured (:meth:`calibration.Condition.as_dict`)."""

    conditions: tuple[Mapping[str, Any], ...]


def decide(evidence: CalibrationEvidence, policy: CalibrationPolicy) -> Verdict:
    conditions = [calibration.Condition.from_dict(c) for c in evidence.conditions]
    return calibration.decide(conditions, policy.max_false_fail, policy.min_power)


def section(views: Sequence[Any]) -> list[fmt.Section]:
    """Each model's conditions: kind, what changed, the verdict on the real pair, the resampled rate, the flips
    of the metric that moved most."""
    rows = []
    for v in views:
        if v.gate != SPEC.name:
            continue
        conds = v.data.get("calibration") or []
        for c in conds:
            worst = max(c["flips"], key=lambda f: (f["lost"] - f["gained"]) / f["n"], default=None)
            rows.append([v.model or "?", c["name"], c["kind"], c["describe"], "fail" if c["failed"] else "pass",
                         f"{'false-fail' if c['kind'] == 'null' else 'power'} {fmt.figure(c['fail_rate'])} "
                         f"({c['resamples']} resamples)",
                         f"{worst['metric']} {worst['lost']}/{worst['gained']} of {worst['n']}" if worst else "",
                         ", ".join(f"{k} {fmt.figure(x)}" for k, x in (c.get("measured") or {}).items())])
    if not rows:
        return []
    return [fmt.Section("Behavior rule's own error rates", (
        "Null conditions change nothing a user calls quality and must pass; damaged conditions must fail. Each "
        "rate resamples the condition's cases (with replacement) and applies the paired rule to each resample.", "",
        fmt.table_of(["model", "condition", "kind", "what changed", "rule on the real pair", "rate",
                      "largest drop (lost/gained)", "measured"], "llllllll", rows)))]


SPEC = GateSpec(name="behavior_calibration", level="run", applies_to=("fp32",), policy=CalibrationPolicy,
                evidence=CalibrationEvidence, decide=decide, section=section,
                describe="the paired behavior rule's false-fail on null conditions and power on damaged ones, "
                         "measured on the model")
