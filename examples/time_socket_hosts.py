"""Wall time of a pytest selection in one process and on 1, 2 and 3 execnet socket hosts on this machine
(suites/harness/socket_hosts.py): .venv/bin/python examples/time_socket_hosts.py "ci and cache" [WORK_DIR]."""
import sys, subprocess, os, shutil, time, json
from pathlib import Path
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "suites" / "harness"))
import socket_hosts as sh
base = Path(sys.argv[2] if len(sys.argv) > 2 else "/tmp/gatehouse-hosts")
if base.exists():
    sys.exit(f"{base}: exists; name a new work directory (hosts' checkouts, caches and run directories go there)")
base.mkdir(parents=True)
env = {**os.environ, "PYTHONPATH": str(ROOT), "GATEHOUSE_LOCK_DIR": str(base / "ctl-locks")}
sel = sys.argv[1]
common = [sys.executable, "-m", "pytest", "-m", sel, "-p", "no:cacheprovider", "-q"]
t = time.monotonic()
r = subprocess.run(common + [f"--run-dir={base}/one"], cwd=str(ROOT), env=env, capture_output=True, text=True)
print(f"1 host (in process): rc {r.returncode} wall {time.monotonic() - t:.1f} s: {r.stdout.splitlines()[-1]}", flush=True)
seed = sorted({json.loads(l)["path"] for l in open(base / "one/builds.jsonl")})
for n in (1, 2, 3):
    hosts = [sh.Host(base / f"h{n}-{i}", f"host{i}", [Path(p) for p in seed]).start() for i in range(n)]
    args = common + [f"--run-dir={base}/hosts{n}", "--dist=load"] + [a for h in hosts for a in ("--tx", h.tx)]
    t = time.monotonic()
    r = subprocess.run(args, cwd=str(ROOT), env=env, capture_output=True, text=True)
    print(f"{n} socket host(s): rc {r.returncode} wall {time.monotonic() - t:.1f} s: {r.stdout.splitlines()[-1]}", flush=True)
    for h in hosts: h.stop()
