"""The native probe (native/probe/): its build through native/setup.sh, and a running probe process
that takes requests one at a time on its streamed JSON array."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from ..errors import ArtifactError, EvidenceError

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "native" / "probe"
COMMON = ROOT / "native" / "common"  # the headers the probe shares with the streaming programs
SETUP = ROOT / "native" / "setup.sh"
BUILD = ROOT / "native" / "build" / "probe"
BINARY = BUILD / "gatehouse-probe"


def sources_sha256() -> str:
    """The hash native/setup.sh stamps: the files of native/probe/ and then of native/common/, each directory
    in name order, concatenated, dot files left out. The shared headers count, so that a change to them
    rebuilds the probe; the two computations must agree, or every build is refused as stale."""
    h = hashlib.sha256()
    for folder in (SOURCES, COMMON):
        for p in sorted(folder.iterdir(), key=lambda p: p.name):
            if p.is_file() and not p.name.startswith("."):
                h.update(p.read_bytes())
    return h.hexdigest()


def ensure_built(venv: Path | None = None, timeout_s: float = 900) -> Path:
    """The probe binary, (re)built by native/setup.sh when missing or built from other sources.

    A file lock keeps two test workers from building at once."""
    BUILD.mkdir(parents=True, exist_ok=True)
    stamp = BUILD / "SOURCES.sha256"
    want = sources_sha256()
    with open(BUILD / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if BINARY.is_file() and stamp.is_file() and stamp.read_text().strip() == want:
            return BINARY
        env = {**os.environ, "GATEHOUSE_VENV": str(venv or Path(sys.prefix))}
        result = subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, env=env, timeout=timeout_s)
        if result.returncode != 0 or not BINARY.is_file():
            raise ArtifactError(f"{SETUP}: building the native probe failed (status {result.returncode}): "
                                f"{(result.stdout + result.stderr)[-3000:]}")
        if stamp.read_text().strip() != want:
            raise ArtifactError(f"{SETUP}: built the probe, but {stamp} does not match native/probe/ and "
                                f"native/common/ ({want[:12]})")
    return BINARY


class ProbeError(EvidenceError):
    """The probe answered with a JSON error (or exited without one)."""


class ProbeProcess:
    """One probe process on one graph (and optionally a skill overlay on it): ``load`` is its load receipt;
    :meth:`generate` sends one request and returns its result; :meth:`close` ends the request array and waits for
    a clean exit."""

    def __init__(self, binary: Path, graph: Path, threads: int, kv: str = "auto", max_seq: int = 1024,
                 kv_heads: int | None = None, head_dim: int | None = None, overlay: Path | str | None = None,
                 timeout_s: float = 300, bundles: tuple[Path | str, ...] = ()):
        self.cmd = [str(binary), "--graph", str(graph), "--threads", str(threads), "--kv", kv, "--max-seq", str(max_seq)]
        if kv_heads:
            self.cmd += ["--kv-heads", str(kv_heads)]
        if head_dim:
            self.cmd += ["--head-dim", str(head_dim)]
        if overlay is not None:  # a skill overlay (harness/overlay/fileformat.py), applied and checked by the probe
            self.cmd += ["--overlay", str(overlay)]
        for bundle in bundles:   # skill bundles (harness/overlay/bundle.py): the probe routes every request
            self.cmd += ["--bundle", str(bundle)]
        self.timeout_s = timeout_s
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, bufsize=1)
        self._out: queue.Queue = queue.Queue()
        self._err: queue.Queue = queue.Queue()
        self.stderr_lines: list[str] = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, self._out, None), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self._err, self.stderr_lines), daemon=True).start()
        self._sent = 0
        line = self._line(self._err, "the load receipt")
        self.load = json.loads(line)
        if "error" in self.load:
            self._fail(self.load)

    @staticmethod
    def _pump(stream, q: queue.Queue, keep: list[str] | None) -> None:
        for line in stream:
            if keep is not None:
                keep.append(line.rstrip("\n"))
            q.put(line)
        q.put(None)

    def _line(self, q: queue.Queue, what: str) -> str:
        try:
            line = q.get(timeout=self.timeout_s)
        except queue.Empty:
            self.proc.kill()
            raise ProbeError(f"{' '.join(self.cmd)}: no {what} within {self.timeout_s:.0f} s") from None
        if line is None:
            rc = self.proc.wait(timeout=30)
            raise ProbeError(f"{' '.join(self.cmd)}: exited (status {rc}) before {what}; stderr: "
                             f"{' | '.join(self.stderr_lines[-5:])}")
        return line

    def _fail(self, err: dict[str, Any]) -> None:
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = None
        raise ProbeError(f"probe {err.get('stage')} error (exit {rc}), request {err.get('index')}: {err.get('error')}")

    def cpu_s(self) -> float | None:
        """User + system CPU seconds of the probe process so far (Linux /proc)."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return None

    def request(self, req: dict[str, Any]) -> dict[str, Any]:
        """Send one request and return its result line (raises :class:`ProbeError` on a JSON error)."""
        text = ("[" if self._sent == 0 else ",") + json.dumps(req) + "\n"
        self._sent += 1
        try:
            self.proc.stdin.write(text)
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # the probe exited: its error line (or exit status) is on the way
        result = json.loads(self._line(self._out, f"a result for request {self._sent - 1}"))
        if "error" in result:
            self._fail(result)
        return result

    def generate(self, prompt_ids: list[int], new_tokens: int, threads: int) -> dict[str, Any]:
        r = self.request({"id": self._sent, "prompt_ids": list(prompt_ids), "max_new_tokens": new_tokens,
                          "mode": "greedy", "stop_ids": [], "threads": threads})
        return {"ids": r["generated_ids"], "token_ms": r["token_ms"], "result": r}

    def close(self) -> int:
        try:
            if self.proc.poll() is None:
                self.proc.stdin.write("[]\n" if self._sent == 0 else "]\n")
                self.proc.stdin.flush()
                self.proc.stdin.close()
            return self.proc.wait(timeout=60)
        except (BrokenPipeError, subprocess.TimeoutExpired, ValueError):
            self.proc.kill()
            return self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

