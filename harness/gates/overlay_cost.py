"""The skill overlay's cost gate: decode speed with the overlay applied against without, decided by the
OFF/ON/OFF win rule on the native probe (:mod:`harness.winrule`).

Control: the backbone graph in a fresh probe process; candidate: the same graph with the overlay applied by
onnxruntime (``--overlay``). The overlay changes the greedy ids by design, so the registration declares the
candidate numerics-changing and the window carries the overlay's held-out quality verdict on the same graph
(``overlay_quality``'s rule) as its attached verdict: without a passing one the window is INVALID. The gate
fails on a LOSS (the overlay slows decoding beyond the guard's effect: the registration's required effect is
``[policy.winrule].guard_effect``, 5 % in the default campaign) or an INVALID window;
a TIE, a WIN or an INCONCLUSIVE (a guard fired) pass with the verdict recorded. Its registration, drift
policy and waivers are the campaign's ``[policy.winrule]``.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..verdict import Verdict
from ..winrule.decision import INVALID
from ..winrule.statistics import LOSS
from .spec import GateSpec, NoPolicy


def decide(evidence: Mapping[str, Any], policy: NoPolicy) -> Verdict:
    """``evidence``: ``verdict`` (the window's), ``reasons``, ``figures``."""
    reasons = []
    if evidence["verdict"] == LOSS:
        reasons.append("the overlay made decoding slower than the backbone beyond the registered effect (LOSS)")
    if evidence["verdict"] == INVALID:
        reasons.append("the cost window is INVALID: " + "; ".join(evidence.get("reasons", ())))
    return Verdict.from_checks(reasons, evidence.get("figures"))


SPEC = GateSpec(name="overlay_cost", level="run", applies_to=("q4",), policy=NoPolicy, decide=decide,
                describe="decode tokens/s with the overlay applied vs without, decided by the OFF/ON/OFF win rule "
                         "on the native probe (not a LOSS)")
