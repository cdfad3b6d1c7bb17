"""The overlay behavior gate: its rule on recorded evidence (the subjects must be the backbone and that backbone
overlaid, then the behavior gate's rule unchanged), the overlaid evaluation's cache identity (the overlay's
SHA-256 is in it, so it never shares a cache entry with the backbone's), and a real run on the CI model with
the shipped donor through the same fixtures as suites/test_overlay_behavior.py."""

from __future__ import annotations

import shutil

import pytest

from harness import gates
from harness.behavior import evaluate
from harness.domain import Variant
from harness.errors import ArtifactError, CampaignError, EvidenceError
from harness.fields import Where
from harness.gates import overlay_behavior as rule
from harness.gates.behavior import BehaviorPolicy
from harness.hashing import sha256_file
from harness.verdict import Verdict


def typed_decide_gate(e, *args):
    """The rule on the test's dict of evidence, typed as the gate's."""
    return rule.decide_gate(rule.OverlayBehaviorEvidence.pick(e), *args)


GRAPH = "a" * 64
OVERLAY = "b" * 64
POLICY = BehaviorPolicy(rule="margin", margin=0.15, margins={"greedy.agreement": 0.5}, minimum=("greedy.format", "greedy.agreement"),
                        maximum=("greedy.garbage",))


def report(fmt: int, agree: int, garbage: int = 0, overlay: str | None = None, graph: str = GRAPH,
           kind: str = "onnx") -> dict:
    subject = {"kind": kind, "model": "m", "dtype": "q4", "graph_sha256": graph, "graph_bytes": 10, "path": "/g"}
    if overlay is not None:
        subject |= {"overlay_sha256": overlay, "overlay_bytes": 5, "overlay_path": "/o"}
    counts = {"greedy.format": (fmt, 20), "greedy.agreement": (agree, 20), "greedy.garbage": (garbage, 20)}
    return {"status": "complete", "suite_sha256": "s" * 64, "contract": {"seed": 1, "threads": 2}, "subject": subject,
            "quality_index": 50.0, "rates": {k: n / d for k, (n, d) in counts.items()},
            "rate_counts": {k: {"numerator": n, "denominator": d} for k, (n, d) in counts.items()}}


def test_the_rule_is_the_behavior_gates_rule_on_backbone_and_overlaid():
    ok = typed_decide_gate({"reference": report(18, 20), "candidate": report(16, 11, overlay=OVERLAY),
                           "overlay_sha256": OVERLAY}, POLICY)
    assert ok.passed, ok.render()
    assert ok.figures["greedy_agreement_rate"].value == 0.55 and ok.figures["quality_index"].unit == "points/100"
    bad = typed_decide_gate({"reference": report(18, 20), "candidate": report(14, 9, garbage=4, overlay=OVERLAY)},
                           POLICY)
    assert not bad.passed
    assert {r.split(":")[0] for r in bad.reasons} == {"greedy.format", "greedy.agreement", "greedy.garbage"}


@pytest.mark.parametrize("reference, candidate, pinned, says", [
    (report(18, 20), report(18, 20), None, "the candidate evaluation records no overlay"),
    (report(18, 20, overlay=OVERLAY), report(18, 20, overlay=OVERLAY), None, "the reference evaluation had an overlay"),
    (report(18, 20), report(18, 20, overlay=OVERLAY, graph="c" * 64), None,
     "the evaluations measured different graphs"),
    (report(18, 20, kind="torch"), report(18, 20, overlay=OVERLAY), None, "both evaluations must be of an ONNX graph"),
    (report(18, 20), report(18, 20, overlay=OVERLAY), "d" * 64, "not the pinned overlay dddddddddddd"),
])
def test_evidence_that_is_not_backbone_against_overlaid_is_refused(reference, candidate, pinned, says):
    evidence = {"reference": reference, "candidate": candidate}
    if pinned:
        evidence["overlay_sha256"] = pinned
    v = typed_decide_gate(evidence, POLICY)
    assert not v.passed and any(says in r for r in v.reasons), v.render()


def test_the_gate_is_registered_run_level_and_decides_with_the_behavior_policy(campaign):
    spec = gates.get("overlay_behavior")
    assert (spec.level, spec.applies_to, spec.decide) == ("run", ("fp32", "q8", "q4"), rule.decide_gate)
    own = campaign.policy["overlay_behavior"]
    assert isinstance(own, rule.OverlayBehaviorPolicy)
    with pytest.raises(TypeError, match="behavior gate's policy"):
        spec.decide(rule.OverlayBehaviorEvidence(report(18, 20), report(18, 20, overlay=OVERLAY)), own)


def test_the_own_table_only_replaces_margins_of_compared_metrics():
    where = Where("c.toml", "policy.overlay_behavior")
    assert rule.OverlayBehaviorPolicy.parse(None, where).over(POLICY) == POLICY   # no table: the behavior policy
    own = rule.OverlayBehaviorPolicy.parse({"margins": {"greedy.agreement": 1.0}}, where)
    eff = own.over(POLICY)
    assert eff.margins == {"greedy.agreement": 1.0} and (eff.minimum, eff.maximum, eff.margin) == (
        POLICY.minimum, POLICY.maximum, POLICY.margin)
    evidence = {"reference": report(18, 20), "candidate": report(17, 1, overlay=OVERLAY)}
    assert not typed_decide_gate(evidence, POLICY).passed and typed_decide_gate(evidence, eff).passed
    with pytest.raises(EvidenceError, match=r"sampled\.factual is not compared by \[policy\.behavior\]"):
        rule.OverlayBehaviorPolicy.parse({"margins": {"sampled.factual": 0.2}}, where).over(POLICY)
    for raw, says in (({"margins": {"greedy.agreement": 2.0}},
                       r"policy\.overlay_behavior\.margins\.greedy\.agreement: must be <= 1\.0, got 2\.0"),
                      ({"margins": {"agreement": 0.5}},
                       r"policy\.overlay_behavior\.margins\.agreement: expected a metric name"),
                      ({"margin": 0.5}, r"policy\.overlay_behavior: unknown key\(s\) margin")):
        with pytest.raises(CampaignError, match=r"^c\.toml: " + says):
            rule.OverlayBehaviorPolicy.parse(raw, where)


@pytest.fixture(scope="module")
def ci(campaign):
    return next(m for m in campaign.models if m.source == "train")


def _overlay(models, campaign, variant):
    spec = campaign.overlay.donors_of(variant.model.id)[0]
    return models.overlay(variant, spec, campaign.policy["overlay_delta"].min_delta)[0]


def test_the_overlaid_subject_carries_the_overlay_and_never_shares_the_backbones_cache_entry(
        models, campaign, behavior, artifact_store, ci, tmp_path):
    variant = Variant(ci, "q4")
    path = _overlay(models, campaign, variant)
    base, base_key = behavior.identity(variant)
    over, over_key = behavior.identity(variant, overlay=path)
    assert "overlay_sha256" not in base and over["overlay_sha256"] == sha256_file(path)
    assert {k: v for k, v in over.items() if not k.startswith("overlay_")} == base
    assert over_key != base_key
    # the path is not the identity: the same bytes elsewhere share the entry; other bytes do not
    copy = shutil.copyfile(path, tmp_path / "copy.safetensors")
    assert behavior.identity(variant, overlay=copy)[1] == over_key
    other = tmp_path / "other.safetensors"
    other.write_bytes(path.read_bytes() + b" ")
    assert behavior.identity(variant, overlay=other)[1] != over_key
    # the same overlay on another dtype's graph is another subject (and another backbone: refused at build)
    q8_key = behavior.identity(Variant(ci, "q8"), overlay=path)[1]
    assert q8_key != over_key
    with pytest.raises(ArtifactError, match="encoded for another backbone"):   # OverlayError is an ArtifactError
        behavior.evaluate(Variant(ci, "q8"), overlay=path)
    assert not (artifact_store.root / f"behavior-{q8_key[:20]}").exists()   # nothing cached for the refused one
    # a PyTorch subject takes no overlay
    with pytest.raises(EvidenceError, match="applies to a graph through onnxruntime"):
        behavior.identity(None, ci, overlay=path)


@pytest.mark.parametrize("dtype", ["fp32", "q8", "q4"])
def test_the_shipped_donor_on_the_ci_model(models, campaign, behavior, ci, dtype):
    variant = Variant(ci, dtype)
    path = _overlay(models, campaign, variant)
    policy = campaign.policy["behavior"]
    contract = behavior.contract(ci)
    ref_art, ref, ref_rows = behavior.evaluate(variant)
    cand_art, cand, cand_rows = behavior.evaluate(variant, overlay=path)
    assert ref_art.key != cand_art.key and cand["subject"]["overlay_sha256"] == sha256_file(path)
    assert cand["subject"]["graph_sha256"] == ref["subject"]["graph_sha256"]
    found = evaluate.comparison(ref, ref_rows, cand, cand_rows, policy.agreement_tokens, tuple(contract.modes))
    verdict: Verdict = gates.get("overlay_behavior").decide(
        rule.OverlayBehaviorEvidence.pick(found, overlay_sha256=sha256_file(path)), policy)
    f = verdict.figures
    print(f"\n{variant.id} overlay {path.parent.name}: {'PASS' if verdict.passed else 'FAIL'} "
          f"(evaluations {ref['timing']['seconds']:.1f} s backbone, {cand['timing']['seconds']:.1f} s overlaid; "
          f"cached {ref_art.hit}/{cand_art.hit})")
    for name in sorted(k[:-len("_reference_rate")] for k in f if k.endswith("_reference_rate")):
        print(f"  {name}: backbone {f[name + '_reference_rate'].value:.2f} -> overlaid {f[name + '_rate'].value:.2f}")
    print(f"  quality index: {f['reference_quality_index'].value:.1f} -> {f['quality_index'].value:.1f}")
    print(verdict.render())
    # the overlay is applied: its greedy transcripts differ from the backbone's somewhere
    assert f["greedy_agreement_rate"].value < 1.0
    # the evidence is what it claims; whether the rates pass is the gate test's verdict
    assert not rule.subjects(rule.OverlayBehaviorEvidence.pick(found, overlay_sha256=sha256_file(path)))
