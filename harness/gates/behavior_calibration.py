"""The behavior rule's own error rates on a model (run level): null conditions pass, damaged conditions fail.

The conditions and their measurement are :mod:`harness.behavior.calibration`; this module declares the gate,
its policy and its report section.  The test (``suites/test_behavior_calibration.py``) runs the conditions on
each model's fp32 graph and PyTorch weights with the campaign's behavior suite, contract and paired rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .. import fields
from ..behavior import calibration
from ..fields import Where
from .. import fmt
from ..verdict import Verdict
from .spec import GateSpec, Policy


@dataclass(frozen=True)
class CalibrationPolicy(Policy):
    """``[policy.behavior_calibration]``: the error rates the paired rule must show, how they are resampled, and
    the conditions: ``seeds`` other sampling seeds (null), ``noise`` relative weight-noise levels (damaged),
    ``truncate`` decoder layers removed (damaged; 0: none), ``other_threads`` the intra-op thread count of the
    thread null condition (0: 1 when the campaign runs more, else 2), ``damaged_per_category`` the cases of each
    category the damaged conditions evaluate (0: the model's whole suite; a slice makes their measured power a
    lower bound of the whole suite's, and saves PyTorch's slow generation)."""

    max_false_fail: float = 0.05
    min_power: float = 0.9
    resamples: int = 400
    seeds: int = 2
    noise: tuple[float, ...] = (0.3,)
    truncate: int = 1
    other_threads: int = 0
    damaged_per_category: int = 0

    @classmethod
    def parse(cls, raw, where: Where) -> "CalibrationPolicy":
        if raw is None:
            return cls()
        fields.table(where, raw, {"max_false_fail", "min_power", "resamples", "seeds", "noise", "truncate",
                                  "other_threads", "damaged_per_category"})
        out: dict[str, Any] = {}
        for key in ("max_false_fail", "min_power"):
            if key in raw:
                out[key] = fields.number(where.child(key), raw[key], 0.0, 1.0)
        for key, lo in (("resamples", 50), ("seeds", 0), ("truncate", 0), ("other_threads", 0),
                        ("damaged_per_category", 0)):
            if key in raw:
                out[key] = fields.integer(where.child(key), raw[key], minimum=lo)
        if "noise" in raw:
            nw = where.child("noise")
            if not isinstance(raw["noise"], list):
                raise nw.fail(f"expected a list of relative noise levels, got {raw['noise']!r}")
            out["noise"] = tuple(fields.number(nw.child(i), v, 0.0001, 10.0) for i, v in enumerate(raw["noise"]))
        return cls(**out)


def decide(evidence: Mapping[str, Any], policy: CalibrationPolicy) -> Verdict:
    """``evidence``: ``conditions`` (each :meth:`calibration.Condition.as_dict`)."""
    conditions = [calibration.Condition.from_dict(c) for c in evidence["conditions"]]
    return calibration.decide(conditions, policy.max_false_fail, policy.min_power)


def section(views: Sequence[Any]) -> list[str]:
    """Each model's conditions: kind, what changed, the verdict on the real pair, the resampled rate, the flips
    of the metric that moved most."""
    rows = []
    for v in views:
        if v.gate != SPEC.name:
            continue
        conds = v.data.get("calibration") or []
        for c in conds:
            worst = max(c["flips"], key=lambda f: (f["lost"] - f["gained"]) / f["n"], default=None)
            rows.append(fmt.row([v.model or "?", c["name"], c["kind"], c["describe"],
                                 "fail" if c["failed"] else "pass",
                                 f"{'false-fail' if c['kind'] == 'null' else 'power'} {fmt.figure(c['fail_rate'])} "
                                 f"({c['resamples']} resamples)",
                                 f"{worst['metric']} {worst['lost']}/{worst['gained']} of {worst['n']}" if worst else "",
                                 ", ".join(f"{k} {fmt.figure(x)}" for k, x in (c.get("measured") or {}).items())]))
    if not rows:
        return []
    return ["## Behavior rule's own error rates", "",
            "Null conditions change nothing a user calls quality and must pass; damaged conditions must fail. Each "
            "rate resamples the condition's cases (with replacement) and applies the paired rule to each resample.",
            "", *fmt.table(["model", "condition", "kind", "what changed", "rule on the real pair", "rate",
                            "largest drop (lost/gained)", "measured"], "llllllll"), *rows]


SPEC = GateSpec(name="behavior_calibration", level="run", applies_to=("fp32",), policy=CalibrationPolicy,
                decide=decide, section=section,
                describe="the paired behavior rule's false-fail on null conditions and power on damaged ones, "
                         "measured on the model")
