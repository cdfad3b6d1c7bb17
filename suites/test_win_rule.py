"""Gate 6, the OFF/ON/OFF win rule on the native lane: a real A/B/A window and an A/A window.

Each window launches three fresh probe processes (control, candidate, control) on the same graph and
runs them in A/B/A order through :func:`harness.winrule.lane.run_window`: the registered cells (short and
long prompt decode), each wave fed its own frozen prompt from the registered schedule, the machine sampled
during every start, the greedy ids of every wave kept; the rule decides after each block and a TIE adds
``step`` repeats to the same three processes up to ``max_repeats``.  The real candidate is a configuration change
whose direction is known in advance (the campaign says which and why); the A/A window's candidate is
the control itself and must never be reported as a WIN.  Control starts are appended to the archive,
whose day-to-day spread for the same definition is reported beside the required effect.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
from pathlib import Path

import pytest

from harness import fingerprint, sampler, winrule
from harness.throughput import pins, probe
from harness.throughput.lanes import ProbeLane
from harness.verdict import Measurement
from harness.winrule.lane import Schedule, registered, run_window

WINDOWS = ("real", "aa")


def _registration(policy, window, schedule):
    reg = winrule.Registration(
        name=f"{policy.name}-{window}", version=policy.version, cells=policy.cells,
        repeats=policy.repeats, waves_per_repeat=policy.waves_per_repeat,
        primary=winrule.Metric("decode_tok_s", "tokens/s", True),
        guards=(winrule.Metric("prefill_ms", "ms", False, policy.guard_effect),),
        reported=(winrule.Metric("cpu_per_wall", "cpu s/s", False),),
        required_effect=policy.required_effect, alpha=policy.alpha, seeds="greedy",
        max_repeats=policy.max_repeats, step=policy.step, max_off_off=policy.max_off_off)
    return registered(reg, schedule)


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
    work = models.workload(variant.model)
    longest = max(policy.repeats, policy.max_repeats or 0) * policy.waves_per_repeat
    schedule = Schedule.build(models.heldout_ids(variant.model),
                              {c: len(work.cell(c).prompt_ids) for c in policy.cells}, longest)
    registration = _registration(policy, window, schedule)
    graph, identity = models.graph(variant)
    models.pin_graph(receipt, variant)
    control = dict(policy.control)
    candidate = dict(policy.candidate) if window == "real" else dict(control)
    expected = policy.expected[variant.model.id] if window == "real" else "not WIN"
    default = winrule.DriftPolicy.default()
    drift = winrule.DriftPolicy(equal=default.equal, bounds=default.bounds, max_loadavg=policy.max_loadavg,
                                sampled=policy.sampled, waived=policy.waive)
    receipt.set(parameters={"window": window, "registration": registration.as_dict(), "control": control,
                            "candidate": candidate, "workload_sha256": work.sha256,
                            "schedule_sha256": schedule.sha256,
                            "why": policy.explain if window == "real" else "A/A: the candidate is the control"},
                policy={"expected": expected, "drift": drift.as_dict()})
    max_seq = max(len(work.cell(c).prompt_ids) for c in registration.cells) + work.new_tokens + 8
    commit = fingerprint.harness_source().get("git_commit")
    _, mhz_source = sampler.read_mhz()
    context = {"workload_sha256": schedule.sha256, "graph_sha256": identity["sha256"],
               "clock_source": f"{mhz_source or 'none'}; probe steady_clock"}
    archive_file = _archive_path(gatehouse)
    archive = winrule.read(archive_file) if archive_file.exists() else ()
    labels = [f"{window}-{i + 1}-{role}" for i, role in enumerate(winrule.evidence.ORDER)]
    configs = [",".join(f"{k}={v}" for k, v in sorted(c.items())) for c in (control, candidate, control)]
    with contextlib.ExitStack() as stack:
        lanes, loads = [], []
        for label, config in zip(labels, (control, candidate, control)):
            lane = stack.enter_context(ProbeLane(probe_for_winrule, graph, int(config["threads"]), name=label,
                                                 max_seq=max_seq))
            loads.append(lane.load())   # a load failure is an error of the test: nothing was measured
            lanes.append(lane)
        pins.pin_runtime(receipt, probe_binary=probe_for_winrule, probe_load=loads[0])
        with receipt.sampling("the A/B/A window: three probe processes, every block"):
            decision, starts, raws = run_window(
                registration, lanes, configs, labels, schedule, new_tokens=work.new_tokens, warmup=work.warmup,
                fingerprint=lambda: {**fingerprint.machine(), **context}, commit=commit,
                decide=lambda s: winrule.decide(s, registration, drift, archive))
    rows = winrule.control_rows(starts, registration, window=f"{gatehouse.run_path.name}/{window}",
                                date=dt.datetime.now(dt.timezone.utc).date().isoformat(), machine_keys=drift.equal)
    if rows:
        winrule.append(archive_file, rows)
    record = decision.as_dict()
    (receipt.evidence_dir / "decision.json").write_text(json.dumps(record, indent=1))
    (receipt.evidence_dir / "decision.md").write_text(winrule.render_markdown(decision))
    (receipt.evidence_dir / "starts.json").write_text(json.dumps(
        {"raw": raws, "starts": [s.as_dict() for s in starts]}, indent=1))
    winrule.draw_chart(decision, receipt.evidence_dir / "chart.png")
    block = {"window": window, "verdict": decision.verdict, "verdict_before_override": decision.verdict_before_override,
             "reasons": list(decision.reasons), "expected": expected, "markdown": "decision.md", "chart": "chart.png",
             "archive": str(archive_file), "archived_rows": len(rows), "bad_evidence": list(decision.bad_evidence),
             "looks": [x.repeats for x in decision.looks], "outputs": decision.outputs,
             "sampled": {s.label: dict(s.samples) for s in starts},
             "waived": dict(decision.drift.waived) if decision.drift else {}, "schedule_sha256": schedule.sha256}
    receipt.record_winrule(block)
    figures = {}
    for s in decision.series:
        if s.metric == "decode_tok_s" and s.result is not None:
            figures[f"{s.cell}_candidate_over_control"] = Measurement(
                sum(s.candidate) / sum(s.control), "ratio", len(s.candidate))
    evidence = {"window": window, "verdict": decision.verdict, "expected": expected, "figures": figures}
    verdict = receipt.decide(gate.decide(evidence, policy))
    assert verdict.passed, verdict.render() + "\n" + winrule.render_markdown(decision)
