"""Skill overlays (issues 17 and 34): can a router tell when to apply the skill? Selection subspaces (skill, general)
fitted from pinned prompts at a layer of the variant's graph, shipped in the skill's bundle with its tensors and
its contract, and judged on held-out prompts routed by the native probe loaded with that bundle
(harness/gates/overlay_routing.py).

The bundle is written into this receipt's evidence and pinned (role ``bundle``). Its contract holds the verdicts
and figures of ``overlay_delta``, ``overlay_quality`` and ``overlay_behavior``, decided here from the same
fixtures their own tests use (the builder's record, the memoized quality evidence, the cached behavior
evaluations), and this gate's own: the probe measures a draft of the bundle without it, then the bundle is
written again with it (only ``__metadata__.contract`` differs; both SHA-256s are recorded). ``overlay_cost`` is
a timing window with its own receipt: the contract names it under ``not_judged``."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from importlib.metadata import version

import pytest

from harness import fingerprint, gates
from harness.behavior import evaluate
from harness.evidence import overlay_routing
from harness.hashing import file_identity, sha256_file
from harness.overlay import bundle as bundles
from harness.overlay import fileformat
from harness.overlay.routing import GENERAL, SKILL
from harness.throughput import pins, probe

NOT_JUDGED = {"overlay_cost": "a timing (the OFF/ON/OFF win rule) with its own receipt; not reproduced here"}


@pytest.fixture(scope="session")
def routing_probe():
    return probe.ensure_built()


@pytest.mark.native
@pytest.mark.gate("overlay_routing")
def test_overlay_routing(variant, donor, models, behavior, gatehouse, gate, policy, receipt, routing_probe):
    campaign = gatehouse.campaign
    graph, identity = models.graph(variant)
    models.pin_graph(receipt, variant)
    path, record = models.overlay(variant, donor, campaign.policy["overlay_delta"].min_delta)
    receipt.pin(path, "overlay")
    evidence, reused = overlay_routing.for_variant(models, variant, campaign, policy)
    verdicts, policies, suite_sha = _other_gates(variant, donor, models, behavior, campaign, record, path)
    common = dict(skill=donor.id, model=variant.model.id, dtype=variant.dtype, backbone_sha256=identity["sha256"],
                  not_judged=NOT_JUDGED, harness_sha256=fingerprint.harness_source()["sha256"],
                  suite_sha256=suite_sha, campaign_sha256=campaign.sha256, onnxruntime=version("onnxruntime"))
    overlay = fileformat.read(path, identity["sha256"])
    draft = bundles.write(receipt.evidence_dir / f"{donor.id}.draft.bundle.safetensors", overlay, donor.id,
                          evidence["routing"], bundles.contract(verdicts=verdicts, policies=policies,
                                                                judged_at=_now(), **common))
    routed = overlay_routing.probe_routes(routing_probe, graph, [draft.path], evidence["judge_windows"],
                                          campaign.threads)
    pins.pin_runtime(receipt, probe_binary=routing_probe, probe_load=routed["load"])
    routes = {side: [SKILL if r["bundle"] == donor.id else GENERAL for r in routed["routes"][side]]
              for side in (SKILL, GENERAL)}
    route_ms = [r["route_ms"] for side in (SKILL, GENERAL) for r in routed["routes"][side]]
    found = {"routes": routes, "subspaces": evidence["subspaces"], "route_ms": route_ms}
    verdict = receipt.decide(gate.decide(gate.evidence.pick(found), policy))

    final = bundles.write(receipt.evidence_dir / f"{donor.id}.bundle.safetensors", overlay, donor.id,
                          evidence["routing"], bundles.contract(
                              verdicts={**verdicts, gate.name: verdict}, policies={**policies, gate.name:
                                                                                    policy.as_dict()},
                              judged_at=_now(), **common))
    measured = file_identity(draft.path)
    draft.path.unlink()
    kept = file_identity(final.path)   # pinned where the evidence folder settles when the receipt is written
    receipt.pin_identity("bundle", str(gatehouse.run_dir.evidence(receipt.nodeid) / final.path.name),
                         kept["sha256"], kept["bytes"])
    receipt.set(parameters={"donor": donor.id, "layer": evidence["layer"], "num_layers": evidence["num_layers"],
                            "feature": evidence["feature"], "prompt_tokens": evidence["prompt_tokens"],
                            "rank": evidence["rank_requested"], "subspaces": evidence["subspaces"],
                            "bundle": {"file": final.path.name, "sha256": kept["sha256"],
                                       "measured_sha256": measured["sha256"],
                                       "contract": {g: v["outcome"] for g, v in final.contract["gates"].items()}}})
    receipt.note("prompts_sha256", evidence["prompts"])   # the pinned prompts: fit and held-out, per side
    receipt.note("texts", evidence["texts"])
    receipt.note("evidence_reused", reused)
    receipt.note("python_router_agrees", {side: sum(a == b for a, b in zip(routes[side], evidence["routes"][side]))
                                          for side in (SKILL, GENERAL)})
    receipt.note("added_latency", "per request, by the probe (route_ms: the backbone's prefill, φ, the choice); no "
                                  "win-rule window: see docs/gates/overlay_routing.md")
    for name, s in evidence["seconds"].items():
        receipt.measure(f"{name}_seconds", s, "s")
    (receipt.evidence_dir / "routes.json").write_text(json.dumps(
        {side: [{"sha256": h, "route": r, **{k: p[k] for k in ("bundle", "subspace", "errors", "prefill_ms",
                                                                "phi_ms", "choose_ms", "route_ms")},
                 "python_route": py, "python_errors": e}
                for h, r, p, py, e in zip(evidence["prompts"]["judge"][side], routes[side], routed["routes"][side],
                                          evidence["routes"][side], evidence["errors"][side])]
         for side in (SKILL, GENERAL)}, indent=1, sort_keys=True))
    assert sha256_file(final.path) == kept["sha256"]
    assert verdict.passed, verdict.render()


def _other_gates(variant, donor, models, behavior, campaign, record, overlay_path):
    """The verdicts of overlay_delta, overlay_quality and overlay_behavior on this overlay, each decided as its own
    test decides it; their policies; the scenario suite's SHA-256."""
    pol = campaign.policy
    delta, quality, judge = (gates.get(n) for n in ("overlay_delta", "overlay_quality", "overlay_behavior"))
    verdicts = {delta.name: delta.decide(delta.evidence.pick(record), pol[delta.name]),
                quality.name: quality.decide(quality.evidence.pick(
                    models.overlay_quality(variant, donor, pol[quality.name])), pol[quality.name])}
    rule = pol[judge.name].over(pol["behavior"])
    rendered, contract = behavior.suite(variant.model), behavior.contract(variant.model)
    _, ref, ref_rows = behavior.evaluate(variant)
    _, cand, cand_rows = behavior.evaluate(variant, overlay=overlay_path)
    found = evaluate.comparison(ref, ref_rows, cand, cand_rows, rule.agreement_tokens, tuple(contract.modes))
    verdicts[judge.name] = judge.decide(judge.evidence.pick(found, overlay_sha256=sha256_file(overlay_path)), rule)
    policies = {delta.name: pol[delta.name].as_dict(), quality.name: pol[quality.name].as_dict(),
                judge.name: rule.as_dict()}
    return verdicts, policies, sha256_file(rendered.suite.path)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
