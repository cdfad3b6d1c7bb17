"""Reruns always work: a gate run again into the same run directory replaces its receipt and its evidence
cleanly (the earlier ones kept under superseded/), an interrupted run completes with a rerun, and the run
directory option means the same in every spelling and location."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from socket_hosts import QUIET   # plugins no child pytest here uses, not loaded (1.5 s of CPU per child)

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = '''
from harness import gates
from harness.gates.spec import GateSpec, NoEvidence, NoPolicy

gates.register(GateSpec(name="toy_evidence", level="variant", applies_to=("fp32", "q8", "q4"), policy=NoPolicy, evidence=NoEvidence,
                        decide=lambda evidence, policy: evidence, describe="writes evidence once", required=False))
'''

GATE_TEST = '''
import os
import time
import pytest
from harness.verdict import Verdict

@pytest.mark.gate("toy_evidence")
@pytest.mark.parametrize("n", range(int(os.environ.get("TOY_N", "1"))))
def test_writes_evidence_once(variant, n, receipt):
    with open(receipt.evidence_dir / "events.jsonl", "x") as fh:   # exclusive create, as the streaming gate does
        fh.write(os.environ.get("TOY_TAG", "first") + "\\n")
    time.sleep(float(os.environ.get("TOY_SLEEP", "0")))
    verdict = receipt.decide(Verdict.from_checks([]))
    assert verdict.passed
'''


@pytest.fixture
def sandbox(gate_sandbox):
    return gate_sandbox(GATE_TEST, CONFTEST)


def _receipts(run_dir: Path) -> dict:
    return {d["nodeid"]: d for d in (json.loads(p.read_text()) for p in (run_dir / "receipts").glob("*.json"))}


def test_a_gate_run_twice_into_one_run_directory_replaces_its_evidence(sandbox, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    args = ("--campaign", "campaign.toml", f"--run-dir={run_dir}", "-p", "no:cacheprovider", *QUIET)
    sandbox.runpytest_subprocess(*args).assert_outcomes(passed=3)
    monkeypatch.setenv("TOY_TAG", "second")
    sandbox.runpytest_subprocess(*args).assert_outcomes(passed=3)
    receipts = _receipts(run_dir)
    assert {r["verdict"]["outcome"] for r in receipts.values()} == {"pass"}
    evidence = sorted(p for p in (run_dir / "evidence").iterdir())
    assert len(evidence) == 3 and all((p / "events.jsonl").read_text() == "second\n" for p in evidence)
    kept = sorted((run_dir / "superseded").glob("*.evidence"))
    assert len(kept) == 3 and all((p / "events.jsonl").read_text() == "first\n" for p in kept)
    assert len(list((run_dir / "superseded").glob("*.json"))) == 3


def test_an_interrupted_run_completes_with_a_rerun_and_keeps_what_passed(sandbox, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    monkeypatch.setenv("TOY_N", "4")
    monkeypatch.setenv("TOY_SLEEP", "0.4")
    cmd = [sys.executable, "-m", "pytest", *QUIET, "--campaign", "campaign.toml", "--run-dir", str(run_dir), "-q"]
    for kill_after in (1, 5):          # receipts written before the SIGKILL of the process group
        proc = subprocess.Popen(cmd, cwd=sandbox.path, start_new_session=True, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while len(list((run_dir / "receipts").glob("*.json"))) < kill_after and time.monotonic() < deadline:
            time.sleep(0.05)
        before = {n: r["verdict"]["outcome"] for n, r in _receipts(run_dir).items()}
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        assert not list((run_dir / "receipts").glob(".*")), "a half-written receipt"
        assert set(before.values()) <= {"pass"}
    done = subprocess.run(cmd + ["--lf"], cwd=sandbox.path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    receipts = _receipts(run_dir)
    assert len(receipts) == 12 and {r["verdict"]["outcome"] for r in receipts.values()} == {"pass"}
    report = json.loads((run_dir / "report.json").read_text())
    assert all(v["gates"]["toy_evidence"]["outcome"] == "pass" for v in report["variants"])
    for name in (p.name for p in (run_dir / "evidence").iterdir() if not p.name.startswith(".")):
        assert (run_dir / "evidence" / name / "events.jsonl").read_text() == "first\n"


# (a fourth case, "two words", gave the very same arguments as "outside, two words": the same two runs again)
@pytest.mark.parametrize("spelling", ["equals", "relative", "outside, two words"])
def test_the_run_directory_option_means_the_same_in_every_spelling(sandbox, tmp_path, spelling):
    import tempfile

    # outside the checkout, sharing only the file system's root with it (the case that lost pytest.ini)
    top = Path("/var/tmp") if not str(tmp_path).startswith("/var/") else Path("/dev/shm")
    outside = Path(tempfile.mkdtemp(prefix="gatehouse-run-", dir=top)) / "run"
    given = {"equals": [f"--run-dir={outside}"], "relative": ["--run-dir", "runs/mine"],
             "outside, two words": ["--run-dir", str(outside)]}[spelling]
    expected = sandbox.path / "runs" / "mine" if spelling == "relative" else outside
    for attempt in range(2):           # the second run finds the directory existing (the rerun case)
        result = sandbox.runpytest_subprocess("--campaign", "campaign.toml", *given, "-p", "no:cacheprovider", *QUIET)
        result.assert_outcomes(passed=3)
        assert f"rootdir: {sandbox.path}" in result.stdout.str(), result.stdout.str()[:600]
    assert len(_receipts(expected)) == 3


@pytest.mark.ci
@pytest.mark.slow
def test_real_gates_rerun_into_one_run_directory(tmp_path, campaign):
    """The CI tier's streaming gate (the one whose evidence collided), the cache gate and the model receipts,
    run twice into one run directory: every second receipt passes, the first ones and their evidence are
    kept under superseded/."""
    run_dir = tmp_path / "run"
    env = {**os.environ, "GATEHOUSE_LOCK_DIR": str(tmp_path / "locks"),
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "pytest", *QUIET, "-p", "no:cacheprovider", "-q", "--run-dir", str(run_dir),
           "-m", "ci and (streaming or cache or training or export)", "-k", "rt80_b1-short or fp32 or training or export",
           "--ignore=suites/harness"]   # one streaming configuration is enough to see its evidence kept
    for attempt in range(2):
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
        assert done.returncode == 0, done.stdout[-3000:]
    receipts = _receipts(run_dir)
    gates = {r["gate"] for r in receipts.values()}
    assert {"streaming", "cache", "training", "export"} <= gates
    assert {r["verdict"]["outcome"] for r in receipts.values()} == {"pass"}
    superseded = run_dir / "superseded"
    assert len(list(superseded.glob("*.json"))) == len(receipts)
    kept = list(superseded.glob("*.evidence"))
    assert any((k / "events.jsonl").is_file() for k in kept)        # the streaming evidence, kept
