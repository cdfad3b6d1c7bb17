"""Gate 6, the OFF/ON/OFF win rule on the native lane: a real A/B/A window and an A/A window.

Each window launches three fresh probe processes in the order control, candidate, control on the
same graph, runs the registered cells (short and long prompt decode) for the registered repeats and
waves, and decides with :func:`harness.winrule.decide`.  The real candidate is a configuration change
whose direction is known in advance (the campaign says which and why); the A/A window's candidate is
the control itself and must never be reported as a WIN.  Control starts are appended to the archive,
whose day-to-day spread for the same definition is reported beside the required effect.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import pytest

from harness import fingerprint, winrule
from harness.errors import HarnessError
from harness.throughput import probe
from harness.throughput.lanes import ProbeLane
from harness.verdict import Measurement
from harness.winrule.lane import measure_start

WINDOWS = ("real", "aa")


def _registration(policy, window):
    return winrule.Registration(
        name=f"{policy.name}-{window}", version=policy.version, cells=policy.cells,
        repeats=policy.repeats, waves_per_repeat=policy.waves_per_repeat,
        primary=winrule.Metric("decode_tok_s", "tokens/s", True),
        guards=(winrule.Metric("prefill_ms", "ms", False, policy.guard_effect),),
        reported=(winrule.Metric("cpu_per_wall", "cpu s/s", False),),
        required_effect=policy.required_effect, alpha=policy.alpha, seeds="matched")


def _archive_path(gatehouse) -> Path:
    env = os.environ.get("GATEHOUSE_WINRULE_ARCHIVE")
    return Path(env) if env else gatehouse.store.root.parent / "winrule-archive.jsonl"


@pytest.fixture(scope="session")
def probe_for_winrule():
    return probe.ensure_built()


@pytest.mark.native
@pytest.mark.exclusive
@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.gate("winrule")
def test_win_rule(variant, window, models, gatehouse, gate, policy, receipt, probe_for_winrule):
    if not policy.declared:
        pytest.skip("the campaign declares no [policy.winrule]")
    if window == "real" and variant.model.id not in policy.expected:
        pytest.skip(f"[policy.winrule].expected declares no verdict for {variant.model.id}")
    registration = _registration(policy, window)
    work = models.workload(variant.model)
    graph, identity = models.graph(variant)
    models.pin_graph(receipt, variant)
    control = dict(policy.control)
    candidate = dict(policy.candidate) if window == "real" else dict(control)
    expected = policy.expected[variant.model.id] if window == "real" else "not WIN"
    drift = winrule.DriftPolicy(equal=winrule.DriftPolicy.default().equal,
                                bounds={"cpu_mhz": winrule.Bound(max_rel=0.05),
                                        "thermal_max_c": winrule.Bound(max_abs=10.0)},
                                max_loadavg=policy.max_loadavg)
    receipt.set(parameters={"window": window, "registration": registration.as_dict(), "control": control,
                            "candidate": candidate, "workload_sha256": work.sha256,
                            "why": policy.explain if window == "real" else "A/A: the candidate is the control"},
                policy={"expected": expected, "drift": drift.as_dict()})
    max_seq = max(len(work.cell(c).prompt_ids) for c in registration.cells) + work.new_tokens + 8
    commit = fingerprint.harness_source().get("git_commit")
    starts, raws = [], {}
    for i, (role, config) in enumerate(zip(winrule.evidence.ORDER, (control, candidate, control))):
        label = f"{window}-{i + 1}-{role}"
        name = ",".join(f"{k}={v}" for k, v in sorted(config.items()))
        fp = fingerprint.machine()
        with ProbeLane(probe_for_winrule, graph, int(config["threads"]), name=label, max_seq=max_seq) as lane:
            try:
                lane.load()
            except HarnessError as exc:
                starts.append(winrule.Start(label, role, registration.key, name, {}, {}, fp, False, str(exc), commit))
                continue
            start, raw = measure_start(label, role, name, registration, lane, work, fp, commit)
        starts.append(start)
        raws[label] = raw
    archive_file = _archive_path(gatehouse)
    archive = winrule.read(archive_file) if archive_file.exists() else ()
    decision = winrule.decide(starts, registration, drift, archive)
    rows = winrule.control_rows(starts, registration, window=f"{gatehouse.run_path.name}/{window}",
                                date=dt.date.today().isoformat(), machine_keys=drift.equal)
    if rows:
        winrule.append(archive_file, rows)
    record = decision.as_dict()
    (receipt.evidence_dir / "decision.json").write_text(json.dumps(record, indent=1))
    (receipt.evidence_dir / "decision.md").write_text(winrule.render_markdown(decision))
    (receipt.evidence_dir / "starts.json").write_text(json.dumps(raws, indent=1))
    winrule.draw_chart(decision, receipt.evidence_dir / "chart.png")
    block = {"window": window, "verdict": decision.verdict, "verdict_before_override": decision.verdict_before_override,
             "reasons": list(decision.reasons), "expected": expected, "markdown": "decision.md", "chart": "chart.png",
             "archive": str(archive_file), "archived_rows": len(rows), "bad_evidence": list(decision.bad_evidence)}
    receipt.record_winrule(block)
    figures = {}
    for s in decision.series:
        if s.metric == "decode_tok_s" and s.result is not None:
            figures[f"{s.cell}_candidate_over_control"] = Measurement(
                sum(s.candidate) / sum(s.control), "ratio", len(s.candidate))
    evidence = {"window": window, "verdict": decision.verdict, "expected": expected, "figures": figures}
    verdict = receipt.decide(gate.decide(evidence, policy))
    assert verdict.passed, verdict.render() + "\n" + winrule.render_markdown(decision)
