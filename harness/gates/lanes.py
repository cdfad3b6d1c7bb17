"""What every throughput lane's gate shares: a policy naming where greedy parity is required, and the
decision on one lane's measured evidence (:func:`harness.throughput.rule.decide`).

Throughput is recorded, never asserted: a lane fails only when it gave no valid result, ran on other
threads or fewer repeats than the workload asks, or its greedy ids differ where parity is required.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .. import fields
from ..domain import DTYPES, PEERS
from ..fields import Where
from ..throughput import rule
from ..verdict import Verdict
from .spec import Policy


@dataclass(frozen=True)
class LanePolicy(Policy):
    """``[policy.<lane gate>]``: the dtypes (or peer labels) whose greedy ids must equal the reference's."""

    require_parity_dtypes: tuple[str, ...] = ("fp32",)

    @classmethod
    def parse(cls, raw, where: Where):
        if raw is None:
            return cls()
        fields.table(where, raw, {"require_parity_dtypes"})
        if "require_parity_dtypes" not in raw:
            return cls()
        return cls(fields.strings(where.child("require_parity_dtypes"), raw["require_parity_dtypes"],
                                  DTYPES + tuple(PEERS), nonempty=False))


def workload_rule(evidence: Mapping[str, Any], require_parity: bool) -> dict[str, Any]:
    w = evidence["workload"]
    return {"threads": w["threads"], "repeats": w["repeats"], "cells": [c["name"] for c in w["cells"]],
            "require_parity": require_parity}


def decide(evidence: Mapping[str, Any], policy: LanePolicy) -> Verdict:
    """One lane's measured evidence (``lane``, ``dtype``, ``workload``, ``cells``, ``load``, ``parity``)."""
    return rule.decide(dict(evidence), workload_rule(evidence, evidence["dtype"] in policy.require_parity_dtypes))
