"""The routing gate's pure parts (fit, route, judge, windows, the rule, the policy) and a real run on the CI model
through the same evidence function the gate test calls (harness/evidence/overlay_routing.py:for_variant)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from harness.domain import Variant
from harness.errors import CampaignError, EvidenceError
from harness.evidence import overlay_routing as evidence_mod
from harness.fields import Where
from harness.gates import overlay_routing as gate
from harness.gates.overlay_routing import RoutingPolicy
from harness.overlay import routing
from harness.overlay.routing import GENERAL, SKILL

WHERE = Where("campaigns/c.toml", "policy.overlay_routing")


def _cluster(rng, n, hidden, mean, directions, spread=3.0, noise=0.05):
    """``n`` points near ``mean + span(directions)``: large along the directions, small noise elsewhere."""
    coeffs = rng.normal(0, spread, (n, directions.shape[0]))
    return mean + coeffs @ directions + rng.normal(0, noise, (n, hidden))


def _two_clusters(seed=0, hidden=32, n=40):
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(hidden, hidden)))
    a_dirs, b_dirs = q[:4].copy(), q[4:8].copy()   # orthogonal planes: each cluster is flat in the other's plane
    a_mean, b_mean = rng.normal(0, 1, hidden), rng.normal(0, 1, hidden)
    return (lambda k: _cluster(rng, k, hidden, a_mean, a_dirs)), (lambda k: _cluster(rng, k, hidden, b_mean, b_dirs))


# -- fit: the rank clamp and the one-prompt degenerate case -----------------------------------------------
@pytest.mark.parametrize(("prompts", "rank", "expected"), [(1, 8, 0), (2, 8, 1), (5, 8, 4), (9, 8, 8), (40, 8, 8),
                                                          (40, 3, 3), (40, 20, 8)])
def test_the_rank_is_clamped_to_min_of_rank_n_minus_one_and_eight(prompts, rank, expected):
    phis = np.random.default_rng(prompts).normal(size=(prompts, 16))
    s = routing.fit(phis, rank)
    assert s.rank == expected == routing.effective_rank(rank, prompts)
    assert np.allclose(s.basis @ s.basis.T, np.eye(expected))   # orthonormal rows
    assert np.allclose(s.mean, phis.mean(0))


def test_a_single_prompt_degenerates_to_the_distance_to_its_mean_and_still_routes():
    a, b = np.zeros(8), np.full(8, 2.0)
    subspaces = {SKILL: routing.fit(a[None], 8), GENERAL: routing.fit(b[None], 8)}
    assert subspaces[SKILL].rank == subspaces[GENERAL].rank == 0
    x = np.full(8, 0.5)
    assert routing.error(x, subspaces[SKILL]) == pytest.approx(np.mean((x - a) ** 2))
    assert routing.route(x, subspaces) == SKILL                     # nearer the skill's single prompt
    assert routing.route(np.full(8, 1.6), subspaces) == GENERAL


def test_a_tie_routes_to_general():
    s = routing.fit(np.zeros((1, 4)), 8)
    assert routing.route(np.ones(4), {SKILL: s, GENERAL: s}) == GENERAL
    assert routing.assess(np.ones((1, 4)), {SKILL: s, GENERAL: s})[0]["route"] == GENERAL


# -- route and judge on synthetic clusters ---------------------------------------------------------------------
def test_synthetic_clusters_route_to_their_own_subspace():
    skill_of, general_of = _two_clusters()
    subspaces = {SKILL: routing.fit(skill_of(40), 8), GENERAL: routing.fit(general_of(40), 8)}
    held_skill, held_general = skill_of(50), general_of(50)
    figures = routing.judge(list(held_skill), list(held_general), subspaces, SKILL)
    assert figures == {"domain_prompts": 50, "general_prompts": 50, "accuracy": 1.0, "false_route_rate": 0.0}
    assessed = routing.assess(held_skill, subspaces)
    assert all(a["route"] == SKILL and a["errors"][SKILL] < a["errors"][GENERAL] for a in assessed)


def test_the_subspace_not_only_the_mean_decides():
    """Two clusters sharing one mean, spread along orthogonal planes: the distance to the mean alone cannot tell
    them apart, the fitted basis can."""
    rng = np.random.default_rng(3)
    hidden = 24
    q, _ = np.linalg.qr(rng.normal(size=(hidden, hidden)))
    mean = np.zeros(hidden)
    skill_of = lambda k: _cluster(rng, k, hidden, mean, q[:3].copy())      # noqa: E731
    general_of = lambda k: _cluster(rng, k, hidden, mean, q[3:6].copy())   # noqa: E731
    ranked = {SKILL: routing.fit(skill_of(30), 8), GENERAL: routing.fit(general_of(30), 8)}
    flat = {SKILL: routing.fit(skill_of(30), 0), GENERAL: routing.fit(general_of(30), 0)}
    held = skill_of(40)
    assert routing.judge(list(held), [], ranked, SKILL)["accuracy"] == 1.0
    assert routing.judge(list(held), [], flat, SKILL)["accuracy"] < 0.8


# -- prompts: evenly spaced disjoint windows, pinned by SHA-256 ------------------------------------------------
def test_prompts_are_evenly_spaced_disjoint_windows():
    ids = list(range(100))
    w = routing.windows(ids, 4, 10)
    assert [x[0] for x in w] == [0, 30, 60, 90] and all(len(x) == 10 for x in w)
    assert routing.windows(ids, 10, 10) == [tuple(range(s, s + 10)) for s in range(0, 100, 10)]
    assert routing.windows(ids, 1, 5) == [tuple(range(5))]
    assert len({routing.prompt_sha256(x) for x in w}) == 4
    assert routing.prompt_sha256([1, 2, 3]) == routing.prompt_sha256((1, 2, 3))
    with pytest.raises(ValueError, match="100 tokens cannot give 11 disjoint prompts of 10 tokens"):
        routing.windows(ids, 11, 10)


def test_too_short_a_text_is_refused_naming_it():
    with pytest.raises(EvidenceError, match=r"\[corpus\] heldout \(GPL-3\): 50 tokens cannot give 32 disjoint"):
        evidence_mod.gather(_Model(), fit={SKILL: list(range(5000)), GENERAL: list(range(5000))},
                            judge={SKILL: list(range(5000)), GENERAL: list(range(50))}, layer=1, rank=8,
                            prompt_tokens=64, fit_prompts=32, judge_prompts=32,
                            names={"judge.general": "[corpus] heldout (GPL-3)"})


class _Model:
    """Just enough of a decoder (OrtDecoder) for gather's checks before any forward pass."""

    n_layers, kv_heads, head_dim, graph = 3, 2, 4, "decoder.onnx"


def test_a_layer_out_of_range_is_refused_naming_the_policy_field():
    with pytest.raises(EvidenceError, match=r"policy\.overlay_routing\.layer: layer 3 is out of 0\.\.2"):
        evidence_mod.gather(_Model(), fit={}, judge={}, layer=3, rank=8, prompt_tokens=8, fit_prompts=2,
                            judge_prompts=2)


# -- the rule ----------------------------------------------------------------------------------------------------
def _evidence(domain_hits, domain_n, general_false, general_n, rank=8, fit_prompts=32):
    return {"routes": {SKILL: [SKILL] * domain_hits + [GENERAL] * (domain_n - domain_hits),
                       GENERAL: [SKILL] * general_false + [GENERAL] * (general_n - general_false)},
            "subspaces": {SKILL: {"rank": rank, "fit_prompts": fit_prompts},
                          GENERAL: {"rank": rank, "fit_prompts": fit_prompts}}}


def test_the_rule_passes_within_policy_and_names_its_figures():
    v = gate.decide(gate.RoutingEvidence.pick(_evidence(30, 32, 3, 32)), RoutingPolicy())
    assert v.passed, v.render()
    assert v.figures["accuracy"].value == pytest.approx(30 / 32) and v.figures["accuracy"].count == 32
    assert v.figures["false_route_rate"].value == pytest.approx(3 / 32)
    assert v.figures["skill_rank"].value == 8


def test_the_rule_refuses_low_accuracy_and_false_routes_naming_both_figures():
    v = gate.decide(gate.RoutingEvidence.pick(_evidence(20, 32, 8, 32)), RoutingPolicy())
    assert not v.passed
    assert len(v.reasons) == 2
    assert v.reasons[0].startswith("routing accuracy is below min_accuracy 90.0%")
    assert v.reasons[1].startswith("false-route rate is above max_false_route 10.0%")
    for r in v.reasons:   # each reason carries both figures
        assert "accuracy 62.5%: 20 of 32" in r and "false-route rate 25.0%: 8 of 32" in r
    print(v.render())


def test_the_rule_refuses_too_few_judged_prompts_and_a_rank_above_the_clamp():
    v = gate.decide(gate.RoutingEvidence.pick(_evidence(10, 10, 0, 10, rank=8, fit_prompts=5)), RoutingPolicy())
    assert not v.passed
    assert "only 10 held-out domain prompts were routed; the policy judges 32" in v.reasons
    assert "only 10 held-out general prompts were routed; the policy judges 32" in v.reasons
    assert "the skill subspace has rank 8, above min(rank 8, 5 - 1, 8) = 4" in v.reasons


# -- the policy ------------------------------------------------------------------------------------------------
def test_the_policy_defaults_and_the_default_layer():
    p = RoutingPolicy.parse(None, WHERE)
    assert (p.layer, p.rank, p.prompt_tokens, p.fit_prompts, p.judge_prompts, p.min_accuracy, p.max_false_route) \
        == (None, 8, 64, 32, 32, 0.9, 0.1)
    assert p.layer_of(30) == 20 and p.layer_of(3) == 2
    assert RoutingPolicy.parse({"layer": 1}, WHERE).layer_of(30) == 1


@pytest.mark.parametrize(("raw", "message"), [
    ({"rank": 9}, r"campaigns/c\.toml: policy\.overlay_routing\.rank: must be <= 8 \(.*\), got 9"),
    ({"rank": 0}, r"campaigns/c\.toml: policy\.overlay_routing\.rank: must be >= 1, got 0"),
    ({"layer": -1}, r"campaigns/c\.toml: policy\.overlay_routing\.layer: must be >= 0, got -1"),
    ({"layer": "middle"}, r"campaigns/c\.toml: policy\.overlay_routing\.layer: expected an integer, got 'middle'"),
    ({"min_accuracy": 1.5}, r"campaigns/c\.toml: policy\.overlay_routing\.min_accuracy: must be <= 1\.0, got 1\.5"),
    ({"max_false_route": "low"}, r"policy\.overlay_routing\.max_false_route: expected a finite number, got 'low'"),
    ({"fit_prompts": 0}, r"policy\.overlay_routing\.fit_prompts: must be >= 1, got 0"),
    ({"prompt_tokens": 1}, r"policy\.overlay_routing\.prompt_tokens: must be >= 2, got 1"),
    ({"ranks": 4}, r"campaigns/c\.toml: policy\.overlay_routing: unknown key\(s\) ranks"),
])
def test_a_bad_policy_value_is_refused_naming_file_field_and_value(raw, message):
    with pytest.raises(CampaignError, match=message):
        RoutingPolicy.parse(raw, WHERE)


# -- a real run on the CI model ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ci(campaign):
    return next(m for m in campaign.models if m.source == "train")


def _policy(campaign) -> RoutingPolicy:
    return campaign.policy.get("overlay_routing") or RoutingPolicy()   # before the gate is registered: defaults


def test_the_ci_model_routes_held_out_domain_prompts_to_the_skill(models, campaign, ci):
    policy = _policy(campaign)
    evidence, _ = evidence_mod.for_variant(models, Variant(ci, "fp32"), campaign, policy)
    verdict = gate.decide(gate.RoutingEvidence.pick(evidence), policy)
    print(verdict.render(), {k: (m.value, m.count) for k, m in verdict.figures.items()}, evidence["layer"],
          {k: round(v, 3) for k, v in evidence["seconds"].items()})
    assert verdict.passed, verdict.render()
    assert evidence["layer"] == evidence["num_layers"] * 2 // 3
    assert {s["rank"] for s in evidence["subspaces"].values()} == {routing.effective_rank(policy.rank,
                                                                                          policy.fit_prompts)}
    pins = [h for stage in evidence["prompts"].values() for side in stage.values() for h in side]
    assert len(pins) == 2 * (policy.fit_prompts + policy.judge_prompts) == len(set(pins))   # every prompt distinct
    again, reused = evidence_mod.for_variant(models, Variant(ci, "fp32"), campaign, policy)
    assert reused and again is evidence   # memoized per variant and policy: every donor shares it


def test_the_ci_model_at_the_embeddings_and_with_a_strict_policy(models, campaign, ci):
    """The layer is the policy's: layer 0 (the first layer's values) is another measurement with its own figures;
    a policy asking for no false route at all is refused with both figures whenever one happens."""
    policy = dataclasses.replace(_policy(campaign), layer=0)
    evidence, reused = evidence_mod.for_variant(models, Variant(ci, "fp32"), campaign, policy)
    assert not reused and evidence["layer"] == 0
    strict = dataclasses.replace(policy, min_accuracy=1.0, max_false_route=0.0)
    verdict = gate.decide(gate.RoutingEvidence.pick(evidence), strict)
    false = evidence["routes"][GENERAL].count(SKILL)
    hits = evidence["routes"][SKILL].count(SKILL)
    assert verdict.passed == (false == 0 and hits == len(evidence["routes"][SKILL])), verdict.render()
    print(verdict.render(), {k: m.value for k, m in verdict.figures.items()})
