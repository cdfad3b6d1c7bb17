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

A LOSS fails the gate only when a control decode step takes at least ``[policy.overlay_cost].min_token_ms``
(default 1 ms): below it, three control processes do not bound process-to-process spread. Measured on the
CI model (a step takes about 0.06 ms), three back-to-back windows of the same overlay read per-repeat changes
of +0.6 to +48 %, -13 to +19 % and -31 to +5 %, and one CI run read a LOSS of -21 to -45 % while its controls
agreed within 7 %: on such a model the window's verdict is recorded and shown, never gated.
"""

from __future__ import annotations

from dataclasses import dataclass
from ..verdict import Verdict
from ..winrule.decision import INVALID
from ..winrule.statistics import LOSS
from .spec import GateSpec, Policy
from .winrule import WINDOW_FIGURES, WindowEvidence, timing_floor


@dataclass(frozen=True)
class CostPolicy(Policy):
    """``[policy.overlay_cost]``: ``min_token_ms``, the shortest control decode step (ms per token) at which a
    LOSS fails the gate; a faster model's window is recorded and reported, not gated."""

    min_token_ms: float = 1.0


def decide(evidence: WindowEvidence, policy: CostPolicy) -> Verdict:
    """The overlay's cost window (control: the backbone; candidate: the backbone overlaid)."""
    reasons, figures = [], dict(evidence.figures)
    if evidence.verdict == LOSS and timing_floor(evidence.control_token_ms, policy.min_token_ms, figures):
        reasons.append("the overlay made decoding slower than the backbone beyond the registered effect (LOSS)")
    if evidence.verdict == INVALID:
        reasons.append("the cost window is INVALID: " + "; ".join(evidence.reasons))
    return Verdict.from_checks(reasons, figures)


SPEC = GateSpec(name="overlay_cost", level="run", applies_to=("q4",), policy=CostPolicy, evidence=WindowEvidence,
                decide=decide, figures=WINDOW_FIGURES,
                describe="decode tokens/s with the overlay applied vs without, decided by the OFF/ON/OFF win rule "
                         "on the native probe (not a LOSS, on a model whose decode step takes at least min_token_ms)")
