"""Hosts on this machine for the multi-host tests: each an execnet socket server (``bin/gatehouse host``'s
server) in its own checkout copy, artifact cache, lock directory, temporary directory and hostname.

The hostname is set in a UTS namespace (``unshare -u``, root or CAP_SYS_ADMIN) where permitted; elsewhere the
host keeps the machine's name and ``Host.named`` says so. A host's checkout is a copy of this one's source (the
files git tracks or would track); its set-up products (the native probe's build, the page's npm packages) are
copied (the packages as hard links) from this checkout instead of installed again, and its artifact cache starts as copies of the cache
entries it is given (what restoring a CI cache gives a runner; hard links would not do: onnx refuses external
data with several links), then grows on its own.
"""

from __future__ import annotations

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
