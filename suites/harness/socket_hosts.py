"""Hosts on this machine for the multi-host tests: each an execnet socket server (``bin/gatehouse host``'s
server) in its own checkout copy, artifact cache, lock directory, temporary directory and hostname.

The hostname is set in a UTS namespace (``unshare -u``, root or CAP_SYS_ADMIN) where permitted; elsewhere the
host keeps the machine's name and ``Host.named`` says so. A host's checkout is a copy of this one's source (the
files git tracks or would track); its set-up products (the native probe's build, the page's npm packages) are
copied (the packages as hard links) from this checkout instead of installed again, and its artifact cache starts as copies of the cache
entries it is given (what restoring a CI cache gives a runner; hard links would not do: onnx refuses external
data with several links), then grows on its own.

Also what the suite's tests that start child pytests of real gates share: :data:`QUIET` (plugins those children
never use, not loaded) and :func:`shared` (a child run made once per test session, whichever xdist worker asks
first).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HELD_ENV = "GATEHOUSE_MACHINE_LOCK_HELD"   # harness.locks.HELD_ENV: set while a test of this suite holds the lock
# Entry-point plugins no gate test uses (hypothesis, anyio; pytest-benchmark stays: the step-latency gate times with
# it), kept out of a child pytest: loading them is about 1.5 s of CPU per process (hypothesis most of it), and the CI
# tier starts dozens of such children. xdist hands a controller's arguments to its workers, remote ones included. One
# word each ("-pno:NAME"): nothing in the arguments pytest reads as a path when it looks for its root directory
# (suites/harness/test_reruns.py).
QUIET = ("-pno:hypothesispytest", "-pno:anyio")


def shared(tmp_path_factory, name: str, make) -> dict:
    """``make(folder) -> dict`` (JSON: paths as strings) made once per test session, however many xdist workers ask:
    pytest-xdist's documented pattern, a file lock in the folder the session's workers share
    (``getbasetemp().parent``; without workers the session's own ``getbasetemp()``, never the user's pytest folder
    other sessions share). Whoever takes the lock first makes it; the others wait and read what it returned. A
    ``make`` that raises records nothing (the next asker makes it again, and fails the same way)."""
    from harness.atomic import write_text
    from harness.locks import flock

    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder, done = root / f"shared-{name}", root / f"shared-{name}.json"
    with flock(root / f"shared-{name}.lock", exclusive=True):
        if done.is_file():
            return json.loads(done.read_text())
        shutil.rmtree(folder, ignore_errors=True)   # what a make that raised left behind
        folder.mkdir()
        made = make(folder)
        write_text(done, json.dumps(made))   # atomic: a killed maker leaves no half record for the next asker
        return made


# The CI tier's cache, quantization and Python-lane gates on the CI model: the serial run test_xdist_real_gates.py
# compares its -n 2 run with is the local run test_remote_hosts.py compares a host's two workers with, made once
# (:func:`serial_real_gates`).
REAL_GATES = "ci and (cache or quantization or throughput_python)"


def child_env(locks: Path | None = None) -> dict[str, str]:
    """A child pytest's environment: no xdist worker's variables of the calling process, this checkout first on the
    path; with ``locks`` (a folder) it takes its own machine lock there instead of running as part of the calling
    test's (the lock that test holds is then not inherited)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))}
    env["PYTHONPATH"] = str(ROOT)
    if locks is not None:
        env.pop(HELD_ENV, None)
        env["GATEHOUSE_LOCK_DIR"] = str(locks)
    return env


def serial_real_gates(tmp_path_factory) -> dict:
    """One serial child pytest of :data:`REAL_GATES` per test session (:func:`shared`): {"run": its run directory,
    "returncode", "output": the tail of what it printed}. It runs as part of the test that makes it (the machine
    lock that test holds is inherited), with a lock directory of its own."""
    def make(folder: Path) -> dict:
        env = {**child_env(), "GATEHOUSE_LOCK_DIR": str(folder / "locks")}
        done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", *QUIET, "-p", "no:cacheprovider",
                               "-q", "--ignore=suites/harness", "-m", REAL_GATES, f"--run-dir={folder / 'run'}"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
        return {"run": str(folder / "run"), "returncode": done.returncode,
                "output": done.stdout[-3000:] + done.stderr[-3000:]}

    return shared(tmp_path_factory, "serial-real-gates", make)


def source_files(root: Path = ROOT) -> list[str]:
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         capture_output=True, check=True).stdout.decode()
    return [f for f in out.split("\0") if f and (root / f).is_file()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_run(n: int) -> int:
    """The first of ``n`` consecutive free ports."""
    for _ in range(50):
        first = free_port()
        try:
            for i in range(1, n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", first + i))
            return first
        except OSError:
            continue
    raise RuntimeError(f"no {n} consecutive free ports")


def can_set_hostname() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-u", "true"], capture_output=True).returncode == 0


class Host:
    def __init__(self, base: Path, name: str, seed: list[Path] = (), workers: int = 1):
        self.name, self.base, self.workers = name, base, workers
        self.checkout = base / "checkout"
        self.cache, self.locks, self.tmp = base / "cache", base / "locks", base / "tmp"
        for f in source_files():
            target = self.checkout / f
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, target)
        (self.checkout / "native").mkdir(exist_ok=True)
        shutil.copytree(ROOT / "native" / "build", self.checkout / "native" / "build", symlinks=True)
        # hard links, not a symlink: the page server refuses a path that resolves outside the checkout
        subprocess.run(["cp", "-al", str((ROOT / "web" / "node_modules").resolve()),
                        str(self.checkout / "web" / "node_modules")], check=True)
        self.locks.mkdir(parents=True)
        self.tmp.mkdir()
        self.cache.mkdir()
        for entry in seed:
            subprocess.run(["cp", "-a", str(entry), str(self.cache / Path(entry).name)], check=True)
        self.port = free_port_run(workers)
        self.proc: subprocess.Popen | None = None
        self.named = can_set_hostname()

    @property
    def tx(self) -> str:
        return self.txs[0]

    @property
    def txs(self) -> list[str]:
        """One ``--tx`` per worker (ports PORT .. PORT+N-1); a lone worker's id is the host's name."""
        ids = [self.name] if self.workers == 1 else [f"{self.name}-w{i + 1}" for i in range(self.workers)]
        return [f"socket=127.0.0.1:{self.port + i}//id={w}//chdir={self.checkout}" for i, w in enumerate(ids)]

    def start(self) -> "Host":
        env = {**os.environ, "PYTHONPATH": str(self.checkout), "GATEHOUSE_CACHE": str(self.cache),
               "GATEHOUSE_LOCK_DIR": str(self.locks), "TMPDIR": str(self.tmp)}
        env.pop("PYTEST_XDIST_WORKER", None)
        env.pop(HELD_ENV, None)   # the host takes its own machine lock (its own lock directory), never "nested"
        serve = [sys.executable, "-m", "harness.host", f"127.0.0.1:{self.port}", f"--workers={self.workers}"]
        cmd = ["unshare", "-u", "sh", "-c", f'hostname "$0" && exec "$@"', self.name, *serve] if self.named else serve
        self.log = open(self.base / "server.log", "wb")
        self.proc = subprocess.Popen(cmd, cwd=self.checkout, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 30
        waiting = [self.port + i for i in range(self.workers)]
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", waiting[0]), timeout=1).close()
                waiting.pop(0)
                if not waiting:
                    return self
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"host {self.name}: server exited: {(self.base / 'server.log').read_text()}")
                time.sleep(0.1)
        raise RuntimeError(f"host {self.name}: no server on port {self.port} after 30 s")

    def kill(self) -> None:
        """SIGKILL the host's whole process group (the server, its worker and their children)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        self.kill()
        if getattr(self, "log", None):
            self.log.close()
