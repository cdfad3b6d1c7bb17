"""``pytest -n 2`` gives the same receipts and report as a serial run on real gates, not only a toy one.

Two nested runs of the CI tier's cache, quantization and Python-lane gates on the CI model (artifacts
come from the shared store, so this measures, it does not rebuild): the same receipts, the same
outcomes, the same measurement names, the same deterministic figures, the same report verdicts.
Throughput values differ by the machine's noise, so only their names are compared.

The serial run is made once per test session (``socket_hosts.serial_real_gates``): test_remote_hosts.py's two
workers on one host are compared with the same run.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import socket_hosts
from socket_hosts import QUIET, REAL_GATES as SELECT

ROOT = Path(__file__).resolve().parents[2]
NOISY = ("decode_tok_s", "prefill_ms", "load_ms", "cpu_per_wall", "evaluation_seconds")


def _run(run_dir: Path, lock_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**socket_hosts.child_env(), "GATEHOUSE_LOCK_DIR": str(lock_dir)}   # the outer run holds the machine lock
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", *QUIET, "-p", "no:cacheprovider", "-q",
                           "--ignore=suites/harness", "-m", SELECT, f"--run-dir={run_dir}", *extra], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1200)


def _receipts(run_dir: Path) -> dict:
    return {d["nodeid"]: d for d in (json.loads(p.read_text()) for p in (run_dir / "receipts").glob("*.json"))}


@pytest.mark.ci
@pytest.mark.slow
def test_parallel_and_serial_runs_of_real_gates_agree(tmp_path_factory, tmp_path, campaign):
    a = socket_hosts.serial_real_gates(tmp_path_factory)
    serial, parallel = Path(a["run"]), tmp_path / "parallel"
    b = _run(parallel, tmp_path / "locks-parallel", "-n", "2")
    assert a["returncode"] == b.returncode, (a["output"], b.stdout[-2000:])
    ra, rb = _receipts(serial), _receipts(parallel)
    assert ra and set(ra) == set(rb)
    gates = {d["gate"] for d in ra.values()}
    assert {"cache", "quantization", "throughput_python"} <= gates
    for nodeid, x in ra.items():
        y = rb[nodeid]
        for key in ("gate", "variant", "artifacts", "parameters", "policy"):
            assert x[key] == y[key], (nodeid, key)
        assert x["verdict"]["outcome"] == y["verdict"]["outcome"], nodeid
        assert set(x["measurements"]) == set(y["measurements"]), nodeid
        for name, m in x["measurements"].items():
            if not any(n in name for n in NOISY):
                assert m == y["measurements"][name], (nodeid, name)
    assert {d["run"]["worker"] for d in rb.values()} <= {"gw0", "gw1"}
    verdicts = lambda d: sorted((v["model"], v["dtype"], v["status"], tuple(v["blockers"]),
                                 tuple(sorted((g, s["outcome"]) for g, s in v["gates"].items())))
                                for v in json.loads((d / "report.json").read_text())["variants"])
    assert verdicts(serial) == verdicts(parallel)
