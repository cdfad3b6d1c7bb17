"""The skill-overlay behavior gate (issue 17): the general scenario suite, overlaid against backbone, with the
behavior gate's own rule.

Reference = the backbone graph (the variant's graph, same dtype) evaluated by the behavior machinery; candidate
= the same graph with the overlay applied by onnxruntime at session creation. Both run the same rendered suite
under the same sampling contract, so they differ only by the overlay's tensors. The rule is
:func:`harness.behavior.rates.decide` with the campaign's ``[policy.behavior]`` (its margins, minimum and maximum
metrics): a skill may change what it claims to, but must leave general behavior within the margins the behavior
gate allows a quantized graph. Before the rates are compared, the evidence must show what it claims: the
reference measured the backbone graph with no overlay, the candidate measured the same graph with an overlay,
and (when the evidence names it) exactly the overlay file the test pinned.

The gate's own table, ``[policy.overlay_behavior]``, is optional and holds only ``margins``: per-metric margins
that replace ``[policy.behavior]``'s for this gate (a skill that rewrites every FFN layer is expected to move
the backbone's greedy ids; whether ``greedy.agreement`` should then be held is the campaign's choice, written
down there). Without it the rule is exactly the behavior gate's. The test passes the effective behavior policy
(:meth:`OverlayBehaviorPolicy.over`) to :func:`decide_gate` and records it in the receipt. Run-level, as the other
overlay gates.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import EvidenceError
from ..fields import knob
from ..verdict import Measurement, Verdict
from . import behavior
from .spec import Figure, GateSpec, Policy


@dataclass(frozen=True)
class OverlayBehaviorPolicy(Policy):
    """``[policy.overlay_behavior]``: ``margins`` (metric -> margin in [0, 1]) replacing ``[policy.behavior]``'s
    margins for this gate only; empty (the default) = the behavior gate's policy unchanged."""

    margins: dict[str, float] = knob(default_factory=dict, hi=1.0, **behavior._METRIC_KEYS)

    def over(self, base: behavior.BehaviorPolicy) -> behavior.BehaviorPolicy:
        """The behavior policy this gate decides with: ``base`` with this table's margins in place of its own;
        a margin for a metric ``base`` does not compare is refused (it would silently do nothing)."""
        compared = {*base.minimum, *base.maximum}
        idle = sorted(k for k in self.margins if k not in compared)
        if idle:
            raise EvidenceError(f"policy.overlay_behavior.margins: {', '.join(idle)} is not compared by "
                                f"[policy.behavior] (minimum/maximum): its margin would do nothing")
        return dataclasses.replace(base, margins={**base.margins, **self.margins})


def _subject(report: Mapping[str, Any]) -> Mapping[str, Any]:
    s = report.get("subject")
    return s if isinstance(s, Mapping) else {}


@dataclass(frozen=True)
class OverlayBehaviorEvidence(behavior.BehaviorEvidence):
    """The behavior gate's evidence with the backbone as reference and the overlaid graph as candidate, and the
    overlay file the test pinned (None: not named)."""

    overlay_sha256: str | None = None


def subjects(evidence: OverlayBehaviorEvidence) -> list[str]:
    """Why the two reports are not the backbone graph and that graph overlaid (empty when they are)."""
    ref, cand = _subject(evidence.reference), _subject(evidence.candidate)
    reasons = []
    if ref.get("kind") != "onnx" or cand.get("kind") != "onnx":
        reasons.append(f"both evaluations must be of an ONNX graph through onnxruntime (reference "
                       f"{ref.get('kind')!r}, candidate {cand.get('kind')!r})")
    if ref.get("overlay_sha256") is not None:
        reasons.append(f"the reference evaluation had an overlay applied ({str(ref['overlay_sha256'])[:12]}); "
                       f"it must be the backbone alone")
    if not cand.get("overlay_sha256"):
        reasons.append("the candidate evaluation records no overlay: it is not the overlaid graph")
    if not ref.get("graph_sha256") or ref.get("graph_sha256") != cand.get("graph_sha256"):
        reasons.append(f"the evaluations measured different graphs (reference {str(ref.get('graph_sha256'))[:12]}, "
                       f"candidate {str(cand.get('graph_sha256'))[:12]}): the overlay must sit on the backbone "
                       f"it is compared with")
    pinned = evidence.overlay_sha256
    if pinned is not None and cand.get("overlay_sha256") and cand["overlay_sha256"] != pinned:
        reasons.append(f"the candidate evaluation applied overlay {str(cand['overlay_sha256'])[:12]}, not the pinned "
                       f"overlay {str(pinned)[:12]}")
    return reasons


def decide_gate(evidence: OverlayBehaviorEvidence, policy: behavior.BehaviorPolicy) -> Verdict:
    """``policy``: the effective behavior policy (``[policy.behavior]``, with
    ``[policy.overlay_behavior].margins`` over it: :meth:`OverlayBehaviorPolicy.over`)."""
    if not isinstance(policy, behavior.BehaviorPolicy):
        raise TypeError(f"overlay_behavior decides with the behavior gate's policy, got {type(policy).__name__}")
    rates = behavior.judge(evidence, policy)
    figures = dict(rates.figures)
    for key, report in (("quality_index", evidence.candidate), ("reference_quality_index", evidence.reference)):
        q = report.get("quality_index")
        if isinstance(q, (int, float)) and not isinstance(q, bool):
            figures[key] = Measurement(q, "points/100")
    return Verdict.from_checks([*subjects(evidence), *rates.reasons], figures)


SPEC = GateSpec(name="overlay_behavior", level="run", applies_to=("fp32", "q8", "q4"), policy=OverlayBehaviorPolicy,
                evidence=OverlayBehaviorEvidence, decide=decide_gate,
                figures=(Figure("quality_index", "points/100", "higher"), Figure("reference_quality_index", "points/100")),
                describe="the general scenario suite, overlaid vs backbone through onnxruntime, with the behavior "
                         "gate's rule and the campaign's [policy.behavior]")
