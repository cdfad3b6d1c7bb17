"""The native paced feeder (``native/streaming/feeder.cpp``) as seen from the capture: its command line, the
thread that loads it and sends the go byte after ``ready``, and the thread that reads its JSON-line reports.

The feeder is a process of its own so that nothing in the test process (the GIL, the consumer's parsing, the
memory sampler) sits between a chunk's deadline and its write; it asks for SCHED_FIFO and reports what it got.
Why SCHED_FIFO: measured on a loaded 2-core VM, almost all of the old thread feeder's lateness was inside the
write (write p99 1.38 ms, wake-up p99 0.05 ms): the write wakes the engine, which preempted the writer before
its "after" time.  A separate process alone barely helped (p99 1.14 -> 0.96 ms); SCHED_FIFO, which the woken
engine cannot preempt, took it to about 0.05-0.1 ms.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

BINARY = "gatehouse-feed"
CHUNK_KEYS = ("chunk", "samples", "deadline_seconds", "before_seconds", "after_seconds")


@dataclass(frozen=True)
class FeederSettings:
    """What the feeder process is asked for; each request is applied only where permitted (see ``setup``)."""

    realtime_priority: int = 10       # SCHED_FIFO priority; 0 leaves the default scheduler
    nice: int | None = None
    cpu: int | None = None            # pin to one CPU; None lets the kernel place it
    spin_us: int = 300                # sleep until this long before a deadline, then spin

    def args(self) -> list[str]:
        out = ["--realtime-priority", str(self.realtime_priority), "--spin-us", str(self.spin_us)]
        if self.nice is not None:
            out += ["--nice", str(self.nice)]
        if self.cpu is not None:
            out += ["--cpu", str(self.cpu)]
        return out


def command(binary, total_bytes: int, chunk_bytes: int, bytes_per_second: int, settings: FeederSettings) -> list[str]:
    return [str(binary), "--bytes", str(total_bytes), "--chunk-bytes", str(chunk_bytes),
            "--bytes-per-second", str(bytes_per_second), *settings.args()]


def load_and_go(run, fd: int, pcm: bytes):
    """Write the input to the feeder, wait for the engine's ready, then send the go byte; closing ``fd``
    without the go byte cancels the feeder (it exits without writing)."""
    try:
        view = memoryview(pcm)
        while view:
            view = view[os.write(fd, view):]
        if run.wait_ready():
            os.write(fd, b"g")
    except OSError as e:
        if not run.cancel.is_set():
            run.fail(f"feeder input: {type(e).__name__}: {e}")
    finally:
        try:
            os.close(fd)
        except OSError:
            pass


def read_reports(run, fd: int, log):
    """Read the feeder's stderr: every line is kept in ``log``; chunk records go to ``run.feeder`` as they come."""
    buf, ended = b"", False
    try:
        while True:
            data = os.read(fd, 65536)
            if not data:
                break
            log.write(data)
            buf += data
            *lines, buf = buf.split(b"\n")
            for line in lines:
                ended = _report(run, line) or ended
        if buf:
            log.write(b"\n")
            ended = _report(run, buf) or ended
    except OSError as e:
        if not run.cancel.is_set():
            run.fail(f"feeder reports: {type(e).__name__}: {e}")
    finally:
        log.flush()
        if not ended and not run.cancel.is_set():
            run.fail("feeder exited without an end report")


def _report(run, line: bytes) -> bool:
    """Handle one report; True for the end report."""
    try:
        rec = json.loads(line)
    except ValueError:
        rec = None
    if not isinstance(rec, dict):
        run.fail(f"feeder wrote a line that is not a JSON object: {line[:160]!r}")
        return False
    kind = rec.get("kind")
    if kind == "chunk":
        run.feeder.append({k: rec[k] for k in CHUNK_KEYS})
    elif kind == "start":
        run.feeder_start = rec["monotonic_seconds"]
    elif kind == "setup":
        run.feeder_setup = {k: v for k, v in rec.items() if k != "kind"}
    elif kind == "end":
        status = rec.get("status")
        if status == "broken_pipe" and not run.cancel.is_set():
            run.fail(f"engine closed its input after {rec['sent_bytes'] // 4} of {rec['total_bytes'] // 4} samples")
        elif status == "error":
            run.fail(f"feeder: {rec.get('message')}")
        return True
    return False
