"""Runs an engine in its own process group: a wall-clock paced 20 ms feeder after ``ready`` (the native feeder
process when one is given, else a Python thread), a consumer that timestamps every line on receipt, bounded
events, readiness and run timeouts, and a clean kill."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import ArtifactError
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


@dataclass(frozen=True)
class Capture:
    """Everything observed in one run.  ``failure`` is None only for a clean, complete run."""

    events: tuple = ()
    observations: tuple = ()
    feeder: tuple = ()
    failure: str | None = None
    returncode: int | None = None
    engine_error: str | None = None
    peak_rss_kib: int | None = None
    cpu_seconds: float | None = None      # GNU time's user + system seconds of the engine
    rss_samples: tuple = ()
    group_left: tuple = ()
    logs: dict = field(default_factory=dict)
    feeder_started_after_ready_seconds: float | None = None
    feeder_kind: str = "thread"
    feeder_setup: dict | None = None


class _Run:
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


def _consume(run: _Run, fd: int, raw, started: float):
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


def _pace(deadline: float, cancel: threading.Event) -> bool:
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


def _feed(run: _Run, fd: int, pcm: bytes):
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
            if not _pace(start + deadline, run.cancel):
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


def _kill_group(proc: subprocess.Popen, grace: float) -> tuple[int, ...]:
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


def partial_sample(pcm_bytes: int, source: str) -> str | None:
    """Why ``pcm_bytes`` of float32 input cannot be fed (pure): a byte count that is not a multiple of 4 ends
    in a truncated sample, which the feeder would otherwise send as it is (the engine then drops it or waits
    for the rest) or silently drop.  None for a whole number of samples."""
    partial = pcm_bytes % BYTES_PER_SAMPLE
    if not partial:
        return None
    return (f"{source}: partial F32 sample: {pcm_bytes} bytes is not a whole number of {BYTES_PER_SAMPLE}-byte "
            f"float32 samples ({pcm_bytes // BYTES_PER_SAMPLE} whole samples, then a truncated final sample of "
            f"{partial} byte{'s' if partial > 1 else ''}); refused rather than fed or dropped")


def run_stream(command: list[str], pcm: bytes, evidence_dir: Path, limits: Limits = Limits(), *,
               measure_memory: bool = True, cwd: Path | None = None, feeder: Path | None = None,
               source: str = "pcm input") -> Capture:
    """Run ``command`` with ``pcm`` (raw float32 bytes, fed as-is) on stdin; every log is kept in ``evidence_dir``.

    ``feeder`` is the native feeder binary (``gatehouse-feed``); the gate always passes it.  Without it a
    Python thread feeds, sharing the GIL with the consumer (kept for machines without a compiler).
    ``source`` names the input (its file) in a refusal: input with a partial final sample raises
    :class:`~harness.errors.ArtifactError` before anything starts."""
    refusal = partial_sample(len(pcm), source)
    if refusal:
        raise ArtifactError(refusal)
    evidence_dir = Path(evidence_dir)
    evidence_dir.mkdir(parents=True, exist_ok=True)
    logs = {k: evidence_dir / n for k, n in (("events", "events.jsonl"), ("observed", "observed.jsonl"),
                                             ("feeder", "feeder.jsonl"), ("stderr", "stderr.txt"),
                                             ("time", "time.txt"), ("capture", "capture.json"))}
    if feeder is not None:
        logs["feeder_reports"] = evidence_dir / "feeder-reports.jsonl"
        return _run_stream(command, pcm, evidence_dir, logs, limits, measure_memory, cwd, feeder)
    # The feeder thread reacquires the GIL after every write; at the default 5 ms switch interval a busy
    # consumer would make chunks late by that much, so hand the GIL over faster for the run.
    switch = sys.getswitchinterval()
    sys.setswitchinterval(min(switch, 0.0002))
    try:
        return _run_stream(command, pcm, evidence_dir, logs, limits, measure_memory, cwd, None)
    finally:
        sys.setswitchinterval(switch)


class _Feeder:
    """The feeder side of one run: a Python thread, or the native process and its two helper threads."""

    def __init__(self, run: _Run, binary: Path | None, pcm: bytes, logs: dict):
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
            self.threads.append(threading.Thread(target=_feed, args=(run, stdin_fd, self.pcm), daemon=True))
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
        left = _kill_group(self.proc, grace) if self.proc is not None else ()
        for t in self.threads:
            t.join(timeout=5)
        if self.proc is not None:
            self.proc.stderr.close()
            self.reports.close()
        return left


def _run_stream(command, pcm, evidence_dir, logs, limits, measure_memory, cwd, feeder_binary) -> Capture:
    prefix = gnutime.time_prefix(logs["time"]) if measure_memory else []
    run = _Run(limits)
    rss: list[tuple[float, int]] = []
    left: tuple = ()
    proc = None
    feed = _Feeder(run, feeder_binary, pcm, logs)
    with open(logs["events"], "xb") as raw, open(logs["stderr"], "xb") as stderr:
        started = time.monotonic()
        stdin = feed.engine_stdin()
        try:
            proc = subprocess.Popen([*prefix, *command], stdin=stdin, stdout=subprocess.PIPE,
                                    stderr=stderr, start_new_session=True, bufsize=0, cwd=cwd)
        except OSError as e:
            run.fail(f"engine could not start: {e}")
            if feeder_binary is not None:
                os.close(feed.read_end)
                os.close(feed.write_end)
        if proc is not None:
            consumer = threading.Thread(target=_consume, args=(run, proc.stdout.fileno(), raw, started), daemon=True)
            consumer.start()
            feed.start(proc)
            next_rss = started
            try:
                while proc.poll() is None and not run.cancel.is_set():
                    now = time.monotonic()
                    if run.ready_at is None and now - started > limits.ready_timeout_seconds:
                        run.fail(f"engine sent no ready event within {limits.ready_timeout_seconds} s")
                    elif now - started > limits.run_timeout_seconds:
                        run.fail(f"engine did not finish within the {limits.run_timeout_seconds} s run timeout")
                    if measure_memory and now >= next_rss:
                        pids = gnutime.children(proc.pid) if prefix else [proc.pid]
                        kib = gnutime.rss_kib(pids[0]) if pids else None
                        if kib is not None:
                            rss.append((now - started, kib))
                        next_rss = now + limits.rss_interval_seconds
                    time.sleep(0.005)
                if not run.cancel.is_set():  # a clean exit: let the consumer drain what is left
                    consumer.join(timeout=5)
                    if consumer.is_alive():
                        run.fail("engine output did not close after the engine exited")
                    elif not feed.finish(timeout=5):
                        run.fail("feeder did not finish after the engine exited")
            finally:
                run.cancel.set()
                run.ready.set()
                left = _kill_group(proc, limits.kill_grace_seconds)
                left += feed.stop(limits.kill_grace_seconds)
                consumer.join(timeout=5)
                proc.stdout.close()
    fs = run.feeder_start
    observations = [{**o, "since_feeder_start_seconds": None if fs is None or started + o["since_process_start_seconds"] < fs
                     else started + o["since_process_start_seconds"] - fs} for o in run.observations]
    with open(logs["observed"], "x") as fh:
        fh.writelines(json.dumps(o) + "\n" for o in observations)
    with open(logs["feeder"], "x") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in run.feeder)
    rc = proc.returncode if proc is not None else None
    failures = list(run.failures)
    if proc is not None and rc != 0 and not failures:
        failures.append(f"engine exited with status {rc}")
    elif proc is not None and rc != 0:
        failures.append(f"engine exit status {rc}")
    if run.engine_error is not None:
        failures.insert(0, f"engine reported an error: {run.engine_error}")
    if left:
        failures.append(f"process group {proc.pid} or the feeder's still has live members {list(left)} after SIGKILL")
    if not failures and run.events and run.events[-1].get("kind") != "complete":
        failures.append("engine exited cleanly without a complete event")
    report = gnutime.parse_time_report(logs["time"].read_text()) if logs["time"].exists() else {}
    if failures:
        tail = logs["stderr"].read_bytes()[-600:].decode("utf-8", "replace").strip()
        if tail:
            failures.append(f"engine stderr ends: {tail}")
    kind = "thread" if feeder_binary is None else "process"
    capture = Capture(
        events=tuple(run.events), observations=tuple(observations), feeder=tuple(run.feeder),
        failure="; ".join(failures) or None, returncode=rc, engine_error=run.engine_error,
        peak_rss_kib=report.get("peak_rss_kib"), rss_samples=tuple(rss), group_left=left, logs=logs,
        cpu_seconds=None if report.get("user_seconds") is None or report.get("system_seconds") is None
        else report["user_seconds"] + report["system_seconds"],
        feeder_started_after_ready_seconds=(run.feeder_start - run.ready_at)
        if run.feeder_start is not None and run.ready_at is not None else None,
        feeder_kind=kind, feeder_setup=run.feeder_setup)
    logs["capture"].write_text(json.dumps({
        "command": [*prefix, *command], "failure": capture.failure, "returncode": rc,
        "engine_error": run.engine_error, "events": len(run.events), "feeder_chunks": len(run.feeder),
        "peak_rss_kib": capture.peak_rss_kib, "group_left": list(left),
        "feeder_started_after_ready_seconds": capture.feeder_started_after_ready_seconds,
        "feeder_kind": kind, "feeder_setup": run.feeder_setup,
    }, indent=2, sort_keys=True) + "\n")
    return capture


def feeder_violations(records, pcm_bytes: int, chunk_samples: int = FRAME_SAMPLES) -> list[str]:
    """The feeder's own invariants: every chunk sent, in order, none before its wall-clock deadline."""
    out = []
    partial = partial_sample(pcm_bytes, "feeder input")
    if partial:
        out.append(partial)
    step = chunk_samples * BYTES_PER_SAMPLE
    want = -(-pcm_bytes // step)
    if len(records) != want:
        out.append(f"feeder coverage: {len(records)} chunks written, expected {want}")
    elif records and records[-1]["samples"] != pcm_bytes / BYTES_PER_SAMPLE:
        out.append(f"feeder coverage: last chunk ends at sample {records[-1]['samples']}, expected "
                   f"{pcm_bytes / BYTES_PER_SAMPLE}")
    # the records are checked against the input, not trusted: chunk k ends at its own sample, due then
    total = pcm_bytes / BYTES_PER_SAMPLE
    odd = [i for i, r in enumerate(records) if r["chunk"] != i or r["samples"] != min((i + 1) * chunk_samples, total)
           or r["deadline_seconds"] != r["samples"] / SAMPLE_RATE or r["after_seconds"] < r["before_seconds"]]
    if odd:
        out.append(f"feeder records: chunks at positions {odd[:5]} have the wrong index, end sample, deadline or "
                   f"write times")
    early = [r["chunk"] for r in records if r["before_seconds"] < r["deadline_seconds"]]
    if early:
        out.append(f"feeder pacing: chunks {early[:5]} were written before their deadline")
    return out
