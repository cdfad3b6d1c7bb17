"""Runs an engine in its own process group: a wall-clock paced 20 ms feeder after ``ready`` (the native feeder
process when one is given, else a Python thread), a consumer that timestamps every line on receipt, bounded
events, readiness and run timeouts, and a clean kill (the threads and the feeder: :mod:`.runthreads`); what was
observed comes back as a :class:`Capture`, every log kept in the evidence directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import ArtifactError
from harness.streaming import gnutime
from harness.streaming.profile import FRAME_SAMPLES, SAMPLE_RATE
from harness.streaming.runthreads import BYTES_PER_SAMPLE, Feeder, Limits, RunState, consume, kill_group

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


def _supervise(proc: subprocess.Popen, run: RunState, feed: Feeder, raw, started: float, limits: Limits,
               measure_memory: bool, prefix: list[str], rss: list[tuple[float, int]]) -> tuple[int, ...]:
    """Watch the started engine to its end: the consumer and the feeder started, the ready and run timeouts
    enforced, its RSS sampled into ``rss``; then its group and the feeder's killed.  Returns the members still
    alive after SIGKILL."""
    consumer = threading.Thread(target=consume, args=(run, proc.stdout.fileno(), raw, started), daemon=True)
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
        left = kill_group(proc, limits.kill_grace_seconds)
        left += feed.stop(limits.kill_grace_seconds)
        consumer.join(timeout=5)
        proc.stdout.close()
    return left


def _failures(run: RunState, proc: subprocess.Popen | None, rc: int | None, left: tuple[int, ...],
              stderr_log: Path) -> list[str]:
    """Everything that went wrong in the run, first-come, the engine's own error first and the end of its
    stderr last."""
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
    if failures:
        tail = stderr_log.read_bytes()[-600:].decode("utf-8", "replace").strip()
        if tail:
            failures.append(f"engine stderr ends: {tail}")
    return failures


def _run_stream(command, pcm, evidence_dir, logs, limits, measure_memory, cwd, feeder_binary) -> Capture:
    prefix = gnutime.time_prefix(logs["time"]) if measure_memory else []
    run = RunState(limits)
    rss: list[tuple[float, int]] = []
    left: tuple = ()
    proc = None
    feed = Feeder(run, feeder_binary, pcm, logs)
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
            left = _supervise(proc, run, feed, raw, started, limits, measure_memory, prefix, rss)
    fs = run.feeder_start
    observations = [{**o, "since_feeder_start_seconds": None if fs is None or started + o["since_process_start_seconds"] < fs
                     else started + o["since_process_start_seconds"] - fs} for o in run.observations]
    with open(logs["observed"], "x") as fh:
        fh.writelines(json.dumps(o) + "\n" for o in observations)
    with open(logs["feeder"], "x") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in run.feeder)
    rc = proc.returncode if proc is not None else None
    report = gnutime.parse_time_report(logs["time"].read_text()) if logs["time"].exists() else {}
    failures = _failures(run, proc, rc, left, logs["stderr"])
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
