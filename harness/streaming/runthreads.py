"""The moving parts of one engine run, below :mod:`harness.streaming.capture`: the run's limits, the state its
threads share, the consumer that timestamps every engine line on receipt, the wall-clock paced 20 ms feeder (a
Python thread, or the native feeder process and its helper threads) and the process-group kill."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from harness.streaming import feeder as native_feeder
from harness.streaming import gnutime
from harness.streaming.profile import FRAME_SAMPLES, SAMPLE_RATE

BYTES_PER_SAMPLE = 4


@dataclass(frozen=True)
class Limits:
    """Bounds on one engine run; exceeding any is a recorded failure and the group is killed."""

    ready_timeout_seconds: float = 30.0
    run_timeout_seconds: float = 120.0
    max_events: int = 20_000
    max_line_bytes: int = 1 << 20
    chunk_samples: int = FRAME_SAMPLES
    kill_grace_seconds: float = 2.0
    rss_interval_seconds: float = 0.1
    feeder: native_feeder.FeederSettings = native_feeder.FeederSettings()


class RunState:
    """The shared state of one run's threads; failures are first-come, the rest kept as context."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self.cancel = threading.Event()
        self.ready = threading.Event()
        self.lock = threading.Lock()
        self.failures: list[str] = []
        self.events: list[dict] = []
        self.observations: list[dict] = []
        self.feeder: list[dict] = []
        self.ready_at: float | None = None
        self.feeder_start: float | None = None
        self.feeder_setup: dict | None = None
        self.engine_error: str | None = None

    def fail(self, why: str):
        with self.lock:
            self.failures.append(why)
        self.cancel.set()
        self.ready.set()

    def wait_ready(self) -> bool:
        """Wait for the engine's ``ready`` (bounded); False, with the failure recorded, if it never came."""
        if not self.ready.wait(self.limits.ready_timeout_seconds):
            self.fail(f"engine sent no ready event within {self.limits.ready_timeout_seconds} s")
            return False
        if self.ready_at is None:
            if not self.cancel.is_set():
                self.fail("engine output closed before a ready event")
            return False
        return not self.cancel.is_set()


def consume(run: RunState, fd: int, raw, started: float):
    buf = b""
    try:
        while True:
            chunk = os.read(fd, 65536)
            now = time.monotonic()  # receipt of the bytes, before parsing or logging
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            if len(buf) > run.limits.max_line_bytes:
                return run.fail(f"engine wrote a line longer than {run.limits.max_line_bytes} bytes")
            for line in lines:
                raw.write(line + b"\n")
                try:
                    ev = json.loads(line)
                except ValueError:
                    return run.fail(f"engine event #{len(run.events)} is not JSON: {line[:120]!r}")
                if not isinstance(ev, dict):
                    return run.fail(f"engine event #{len(run.events)} is not a JSON object: {line[:120]!r}")
                run.events.append(ev)
                run.observations.append({"event_index": len(run.observations), "kind": ev.get("kind"),
                                         "index": ev.get("index"), "since_process_start_seconds": now - started})
                if len(run.events) > run.limits.max_events:
                    return run.fail(f"engine flooded: more than {run.limits.max_events} events")
                if ev.get("kind") == "error":
                    run.engine_error = str(ev.get("reason"))
                if ev.get("kind") == "ready":
                    if run.ready_at is not None:
                        return run.fail("engine sent a second ready event")
                    run.ready_at = now
                    run.ready.set()
            raw.flush()
        if buf:
            run.fail(f"engine output ended inside a line (no newline): {buf[:120]!r}")
    except OSError as e:
        if not run.cancel.is_set():
            run.fail(f"consumer: {type(e).__name__}: {e}")
    finally:
        raw.flush()
        run.ready.set()


def pace(deadline: float, cancel: threading.Event) -> bool:
    """Wait until ``time.monotonic() >= deadline``, never returning early; False if cancelled."""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return True
        if remaining > 0.0015:
            if cancel.wait(min(remaining - 0.001, 0.05)):
                return False
        elif cancel.is_set():
            return False
        # the last millisecond is spun: sleep granularity would make chunks late


def feed_pcm(run: RunState, fd: int, pcm: bytes):
    try:
        if not run.wait_ready():
            return
        start = time.monotonic()
        run.feeder_start = start
        step = run.limits.chunk_samples * BYTES_PER_SAMPLE
        sent = 0
        while sent < len(pcm):
            data = memoryview(pcm)[sent:sent + step]
            samples = (sent + len(data)) / BYTES_PER_SAMPLE
            deadline = samples / SAMPLE_RATE
            if not pace(start + deadline, run.cancel):
                return
            before = time.monotonic() - start
            while data:
                data = data[os.write(fd, data):]
            after = time.monotonic() - start
            sent += min(step, len(pcm) - sent)
            run.feeder.append({"chunk": len(run.feeder), "samples": samples, "deadline_seconds": deadline,
                               "before_seconds": before, "after_seconds": after})
    except BrokenPipeError:
        if not run.cancel.is_set():
            run.fail(f"engine closed its input after {sent // BYTES_PER_SAMPLE} of "
                     f"{len(pcm) // BYTES_PER_SAMPLE} samples")
    except OSError as e:
        if not run.cancel.is_set():
            run.fail(f"feeder: {type(e).__name__}: {e}")
    finally:
        try:
            os.close(fd)
        except OSError:
            pass


def kill_group(proc: subprocess.Popen, grace: float) -> tuple[int, ...]:
    """SIGTERM the group, SIGKILL what is left after ``grace``; return any live members that remain."""
    pgid = proc.pid
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass
        end = time.monotonic() + wait
        while time.monotonic() < end:
            proc.poll()
            if proc.returncode is not None and not gnutime.group_members(pgid):
                return ()
            time.sleep(0.01)
    proc.poll()
    return tuple(gnutime.group_members(pgid))


class Feeder:
    """The feeder side of one run: a Python thread, or the native process and its two helper threads."""

    def __init__(self, run: RunState, binary: Path | None, pcm: bytes, logs: dict):
        self.run, self.binary, self.pcm, self.logs = run, binary, pcm, logs
        self.proc: subprocess.Popen | None = None
        self.threads: list[threading.Thread] = []
        self.reports = None

    def engine_stdin(self):
        """What the engine's stdin is: a pipe the feeder process writes, or PIPE for the thread."""
        if self.binary is None:
            return subprocess.PIPE
        self.read_end, self.write_end = os.pipe()
        return self.read_end

    def start(self, engine: subprocess.Popen):
        run = self.run
        if self.binary is None:
            stdin_fd = os.dup(engine.stdin.fileno())
            engine.stdin.close()
            self.threads.append(threading.Thread(target=feed_pcm, args=(run, stdin_fd, self.pcm), daemon=True))
        else:
            os.close(self.read_end)
            cmd = native_feeder.command(self.binary, len(self.pcm), run.limits.chunk_samples * BYTES_PER_SAMPLE,
                                        SAMPLE_RATE * BYTES_PER_SAMPLE, run.limits.feeder)
            try:
                self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=self.write_end,
                                             stderr=subprocess.PIPE, start_new_session=True, bufsize=0)
            except OSError as e:
                run.fail(f"feeder {self.binary} could not start: {e}")
                return
            finally:
                os.close(self.write_end)
            try:  # room for every report of a long run, so a slow reader never blocks the feeder's next chunk
                fcntl.fcntl(self.proc.stderr.fileno(), fcntl.F_SETPIPE_SZ, 1 << 20)
            except OSError:
                pass
            self.reports = open(self.logs["feeder_reports"], "xb")
            go = os.dup(self.proc.stdin.fileno())
            self.proc.stdin.close()
            self.threads += [
                threading.Thread(target=native_feeder.load_and_go, args=(run, go, self.pcm), daemon=True),
                threading.Thread(target=native_feeder.read_reports, args=(run, self.proc.stderr.fileno(), self.reports),
                                 daemon=True)]
        for t in self.threads:
            t.start()

    def finish(self, timeout: float) -> bool:
        """After a clean engine exit: wait for the feeder's end; False if it did not end within ``timeout``."""
        if self.proc is None:
            return True
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        self.threads[-1].join(timeout)
        return not self.threads[-1].is_alive()

    def stop(self, grace: float) -> tuple[int, ...]:
        left = kill_group(self.proc, grace) if self.proc is not None else ()
        for t in self.threads:
            t.join(timeout=5)
        if self.proc is not None:
            self.proc.stderr.close()
            self.reports.close()
        return left
