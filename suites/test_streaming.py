"""The rolling-trim streaming protocol gate: the native engine fed at the real pace, every event checked."""

from __future__ import annotations

import functools

import pytest

from harness import progress
from harness.errors import CampaignError
from harness.streaming import gate as stream_gate, release, scope, suite
from harness.streaming.capture import Limits, run_stream
from harness.streaming.engine import FEEDER, engine_command
from harness.streaming.profile import emission_count
from harness.streaming.tokens import TokenTable

pytestmark = [pytest.mark.gate("streaming"), pytest.mark.native, pytest.mark.exclusive]
SUITE = suite.load()
TIER_MARKS = {"ci": pytest.mark.ci, "benchmark": pytest.mark.benchmark}


def _params():
    for tier_name, mark in TIER_MARKS.items():
        tier = SUITE.tiers[tier_name]
        for p in tier.profiles:
            for c in tier.cases:
                marks = [mark] + ([pytest.mark.slow] if tier_name == "benchmark" or c == "long" else [])
                yield pytest.param(tier_name, p, c, marks=marks, id=f"{tier_name}-{p}-{c}")


@functools.lru_cache(maxsize=4)
def _torch_model(path):
    from harness.streaming import model as M   # torch: not at collection, which every pytest of the suite pays

    return M.load(path)


@pytest.mark.parametrize("tier_name,profile_name,case_name", list(_params()))
def test_streaming_protocol(tier_name, profile_name, case_name, request, gate, policy, receipt, streaming_engine,
                            streaming_models, streaming_cases):
    tier, profile, spec = SUITE.tiers[tier_name], SUITE.profiles[profile_name], SUITE.cases[case_name]
    receipt.set(parameters={"case": case_name, "role": spec.role, "tier": tier_name})
    selection = release.decide_case(case_name, spec.role, request.config.getoption(release.FLAG),
                                    policy.release_candidate)
    receipt.note("scope", scope.receipt_scope(spec.role, selection.reason))   # what these results are not
    if selection.action == "skip":
        pytest.skip(selection.reason)
    if selection.action == "refuse":
        raise CampaignError(selection.reason)
    candidate = release.reverify(policy.release_candidate) if spec.role == "heldout" else None
    model = streaming_models(tier.model)
    case = streaming_cases(case_name)
    identity = model.identity
    table = TokenTable.load(model.vocab)
    limits_policy = policy.over(tier.policy)
    receipt.set(variant={"model": f"stream-{tier.model}", "dtype": "fp32", "profile": profile_name},
                parameters={"case": case_name, "role": case.role, "audio_samples": case.samples,
                            "profile": profile.as_dict(), "tier": tier_name,
                            "release_candidate": candidate.as_dict() if candidate else None},
                policy=dict(limits_policy.__dict__), seeds={"case": spec.seed, "train": model.training["plan"]["seed"]})
    receipt.pin(model.weights, role="model")
    receipt.pin(case.pcm, role="input")
    receipt.pin(streaming_engine, role="engine")
    if candidate is not None:
        receipt.pin(candidate.path, role="release_candidate_record")
    audio_seconds = case.samples / 16000
    limits = Limits(ready_timeout_seconds=30.0, run_timeout_seconds=60.0 + 3 * audio_seconds,
                    max_events=3 * emission_count(case.samples, profile) + 200)
    command = engine_command(streaming_engine, model.weights, model.vocab, profile)
    pcm = case.pcm.read_bytes()
    progress.emit(f"streaming {profile_name} {case_name}: {audio_seconds:.1f} s of audio fed at the real pace")
    capture = run_stream(command, pcm, receipt.evidence_dir, limits,
                         feeder=streaming_engine.parent / FEEDER, source=str(case.pcm))
    from harness.streaming import model as M

    reference = M.reference_decode(_torch_model(str(model.checkpoint)), case.audio(), profile)
    evidence = stream_gate.Evidence(
        events=capture.events, feeder=capture.feeder, pcm_bytes=len(pcm), samples=case.samples,
        reference_ids=tuple(reference["ids"]), reference_margins=tuple(reference["margins"]),
        reference_text=case.reference, capture_failure=capture.failure, peak_rss_kib=capture.peak_rss_kib,
        rss_samples=capture.rss_samples, must_trim=case.must_trim, score_wer=case.role == "heldout",
        observations=capture.observations, engine_cpu_seconds=capture.cpu_seconds)
    verdict = gate.decide(gate.evidence(evidence, profile, identity, table, tier.policy), policy)
    for name, m in sorted(verdict.figures.items()):
        receipt.measure(name, m.value, m.unit, count=m.count)
    receipt.note("training", model.training)
    receipt.note("logs", {k: v.name for k, v in capture.logs.items()})   # files in this receipt's evidence folder
    receipt.note("feeder", {"kind": capture.feeder_kind, "requested": dict(limits.feeder.__dict__),
                            "applied": capture.feeder_setup,
                            "started_after_ready_seconds": capture.feeder_started_after_ready_seconds})
    receipt.decide(verdict)
    assert verdict.passed, verdict.render()
