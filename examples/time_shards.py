"""Wall time of each job of a sharded selection, round-robin against weighted by a previous run's durations, the
jobs run one after another on this machine (a CI matrix runs them at once on N machines; its wall time is the
longest job's): .venv/bin/python examples/time_shards.py "ci" N PREVIOUS_RUN_DIR WORK_DIR."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sel, n, previous, base = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]).resolve(), Path(sys.argv[4])
if base.exists():
    sys.exit(f"{base}: exists; name a new work directory")
base.mkdir(parents=True)
env = {**os.environ, "PYTHONPATH": str(ROOT), "GATEHOUSE_LOCK_DIR": str(base / "locks")}
for label, extra in (("round-robin", []), ("by durations", [f"--shard-durations={previous}"])):
    walls = []
    for k in range(1, n + 1):
        run = base / f"{label.replace(' ', '-')}-{k}"
        t = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "pytest", "-m", sel, "-p", "no:cacheprovider", "-q",
                            f"--run-dir={run}", f"--shard={k}/{n}", *extra], cwd=str(ROOT), env=env,
                           capture_output=True, text=True)
        walls.append(time.monotonic() - t)
        print(f"{label} {k}/{n}: rc {r.returncode} wall {walls[-1]:.1f} s: {r.stdout.splitlines()[-1]}", flush=True)
    print(f"{label}: the longest job {max(walls):.1f} s; all jobs {sum(walls):.1f} s", flush=True)
    merged = base / f"{label.replace(' ', '-')}-merged"
    m = subprocess.run([sys.executable, "-m", "harness.report", "--merge",
                        *[str(base / f"{label.replace(' ', '-')}-{k}") for k in range(1, n + 1)], "--out", str(merged)],
                       cwd=str(ROOT), env=env, capture_output=True, text=True)
    verdicts = {p.name: json.loads(p.read_text())["verdict"]["outcome"] for p in (merged / "receipts").glob("*.json")}
    before = {p.name: json.loads(p.read_text())["verdict"]["outcome"] for p in (previous / "receipts").glob("*.json")}
    print(f"{label}: merge rc {m.returncode}; merged verdicts equal the previous run's: {verdicts == before}", flush=True)
