"""The skill-overlay routing gate (issues 17 and 34, seed 004): can a router tell when to apply the skill?

Two selection subspaces are fitted from pinned prompts (:mod:`harness.overlay.routing`): ``skill`` from the
domain training text, ``general`` from the campaign's training corpus, each the mean of the prompts' features
φ(x) plus a PCA basis of rank ``min(rank, N - 1, 8)``. φ(x) is read from the variant's own graph: the mean and the
spread over the prompt's tokens of ``present.<layer>.value`` after a prefill on the backbone (routing decides
before the skill is applied). The subspaces go into the skill's bundle (:mod:`harness.overlay.bundle`) and the
native probe, loaded with it, routes the held-out prompts (the held-out domain text and the campaign's held-out
text) to the subspace that reconstructs their φ best, applying the chosen overlay. The rule, on the probe's
choices: the fraction of held-out domain prompts routed to the skill (accuracy) at least ``min_accuracy``, the
fraction of held-out general prompts routed to it (false routes) at most ``max_false_route``, over at least the
policy's ``judge_prompts`` of each, with no subspace of a rank above the clamp. The time routing adds to a request
(the backbone's prefill, φ and the choice) is a figure, not gated. Run-level, as the other overlay gates.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from .. import fmt
from ..fields import Where, knob
from ..overlay.routing import GENERAL, MAX_RANK, SKILL, effective_rank
from ..verdict import Measurement, Verdict
from .spec import Evidence, Figure, GateSpec, Policy

if TYPE_CHECKING:
    from ..view import ReceiptView


@dataclass(frozen=True)
class RoutingPolicy(Policy):
    """``[policy.overlay_routing]``: ``layer`` (φ reads ``present.<layer>.value``, the values decoder layer
    ``layer`` (0-based) computes from its normalized input; 0..num_layers - 1, default ``num_layers * 2 // 3``),
    ``rank`` (1-8), ``prompt_tokens`` per prompt, ``fit_prompts`` and ``judge_prompts`` per side (domain and general),
    ``min_accuracy`` and ``max_false_route`` (fractions)."""

    layer: int | None = knob(None, lo=0)
    rank: int = knob(8, lo=1)                  # at most MAX_RANK, the selection subspace's rank cap (finish)
    prompt_tokens: int = knob(64, lo=2)
    fit_prompts: int = knob(32, lo=1)
    judge_prompts: int = knob(32, lo=1)
    min_accuracy: float = knob(0.9, hi=1.0)
    max_false_route: float = knob(0.1, hi=1.0)

    @classmethod
    def finish(cls, values: dict[str, Any], where: Where) -> dict[str, Any]:
        rank = values.get("rank", cls.rank)
        if rank > MAX_RANK:
            raise where.child("rank").fail(f"must be <= {MAX_RANK} (the selection subspace's rank cap), got {rank}")
        return values

    def layer_of(self, num_layers: int) -> int:
        """The layer φ reads for a model of ``num_layers`` decoder layers (the policy's, or two thirds down)."""
        return num_layers * 2 // 3 if self.layer is None else self.layer


@dataclass(frozen=True)
class RoutingEvidence(Evidence):
    """The probe's choices (:func:`harness.evidence.overlay_routing.probe_routes`) over the fitted subspaces
    (:func:`harness.evidence.overlay_routing.gather`)."""

    routes: Mapping[str, Sequence[str]]            # skill: the route of each held-out domain prompt; general: of each
    subspaces: Mapping[str, Mapping[str, int]]     # name -> {"rank", "fit_prompts"}
    route_ms: Sequence[float] = ()                 # per routed prompt: the time routing added (prefill, φ, choice)


def decide(evidence: RoutingEvidence, policy: RoutingPolicy) -> Verdict:
    reasons, figures = [], {}
    domain, general = list(evidence.routes[SKILL]), list(evidence.routes[GENERAL])
    for side, routes in (("domain", domain), ("general", general)):
        if len(routes) < policy.judge_prompts:
            reasons.append(f"only {len(routes)} held-out {side} prompts were routed; the policy judges "
                           f"{policy.judge_prompts}")
    for name, s in sorted(evidence.subspaces.items()):
        cap = effective_rank(policy.rank, s["fit_prompts"])
        if s["rank"] > cap:
            reasons.append(f"the {name} subspace has rank {s['rank']}, above min(rank {policy.rank}, "
                           f"{s['fit_prompts']} - 1, {MAX_RANK}) = {cap}")
        figures[f"{name}_rank"] = Measurement(s["rank"], "dimensions", s["fit_prompts"])
    hits, false = sum(r == SKILL for r in domain), sum(r == SKILL for r in general)
    accuracy = hits / len(domain) if domain else float("nan")
    false_rate = false / len(general) if general else float("nan")
    figures["accuracy"] = Measurement(accuracy, "fraction", len(domain))
    figures["false_route_rate"] = Measurement(false_rate, "fraction", len(general))
    both = (f"accuracy {accuracy:.1%}: {hits} of {len(domain)} held-out domain prompts routed to the skill; "
            f"false-route rate {false_rate:.1%}: {false} of {len(general)} held-out general prompts routed to it")
    if domain and accuracy < policy.min_accuracy:
        reasons.append(f"routing accuracy is below min_accuracy {policy.min_accuracy:.1%} ({both})")
    if general and false_rate > policy.max_false_route:
        reasons.append(f"false-route rate is above max_false_route {policy.max_false_route:.1%} ({both})")
    if evidence.route_ms:
        n = len(evidence.route_ms)
        figures["route_ms_median"] = Measurement(statistics.median(evidence.route_ms), "ms", n)
        figures["route_ms_max"] = Measurement(max(evidence.route_ms), "ms", n)
    return Verdict.from_checks(reasons, figures)


def section(views: Sequence["ReceiptView"]) -> list[fmt.Section]:
    """One row per bundle the routing gate wrote: where it is (the receipt's evidence), its SHA-256, the probe's
    routing figures and the contract's verdicts."""
    rows = []
    for v in sorted((v for v in views if v.gate == "overlay_routing"), key=lambda v: (str(v.model), str(v.dtype),
                                                                                     str(v.parameters.get("donor")))):
        pinned, record = v.artifact("bundle"), v.parameters.get("bundle") or {}
        if pinned is None:
            continue
        link = f"{v.evidence}/{PurePath(pinned['path']).name}" if v.evidence else pinned["path"]
        contract = sorted((record.get("contract") or {}).items())
        verdicts = ", ".join(f"{g.removeprefix('overlay_')} {o}" for g, o in contract)
        rows.append([v.model, v.dtype, v.parameters.get("donor") or "—", f"[{PurePath(pinned['path']).name}]({link})",
                     f"`{pinned['sha256'][:16]}`", fmt.figure(pinned["bytes"], "B"), fmt.pct(v.value("accuracy")),
                     fmt.pct(v.value("false_route_rate")), fmt.num(v.value("route_ms_median")), verdicts or "—"])
    if not rows:
        return []
    return [fmt.Section("Skill bundles", (
        "One file per skill: the overlay's tensors, its routing subspaces and the contract it was judged under "
        "(harness/overlay/bundle.py). Routing figures are the native probe's choices with the bundle loaded; "
        "added ms is the median time routing added to a request (a prefill on the backbone, φ, the choice).", "",
        fmt.table_of(["model", "dtype", "skill", "bundle", "SHA-256", "size", "accuracy", "false routes",
                      "added ms", "contract"], "llllrrrrrl", rows)))]


SPEC = GateSpec(name="overlay_routing", level="run", applies_to=("fp32", "q8", "q4"), policy=RoutingPolicy,
                evidence=RoutingEvidence, decide=decide, section=section,
                figures=(Figure("accuracy", "fraction", "higher"), Figure("false_route_rate", "fraction", "lower"),
                         Figure("skill_rank", "dimensions"), Figure("general_rank", "dimensions"),
                         Figure("route_ms_median", "ms", "lower"), Figure("route_ms_max", "ms", "lower")),
                describe="a selection subspace per side (skill, general) fitted at a backbone layer and shipped in the "
                         "skill's bundle; the native probe's held-out routing accuracy and false-route rate within "
                         "policy, and the time routing adds")
