"""File locks: the machine-wide shared/exclusive timing lock and per-artifact build locks."""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .errors import HarnessError

_local = threading.local()
HELD_ENV = "GATEHOUSE_MACHINE_LOCK_HELD"


def lock_dir() -> Path:
    """One lock directory per machine (override with GATEHOUSE_LOCK_DIR, for the suite's own tests)."""
    base = Path(os.environ.get("GATEHOUSE_LOCK_DIR") or f"/tmp/gatehouse-{os.getuid()}")
    base.mkdir(parents=True, exist_ok=True)
    return base


@dataclass
class Held:
    """How a lock was held: the mode, how long it took to get it, and whether it was nested."""

    mode: str
    wait_s: float
    nested: bool = False


def holders(path: Path) -> list[str]:
    """Who holds ``flock(2)`` locks on ``path``: "pid N (command)" per holder, read from ``/proc/locks`` (empty
    where it cannot be read)."""
    try:
        inode = os.stat(path).st_ino
        rows = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    found = []
    for row in rows:
        parts = row.split()
        if len(parts) > 5 and parts[1] == "FLOCK" and parts[5].rsplit(":", 1)[-1] == str(inode):
            pid = parts[4]
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                cmd = "?"
            found.append(f"pid {pid} ({cmd[:120]})")
    return sorted(set(found))


def _take(fd: int, mode: int, path: Path, timeout_s: float | None, poll_s: float = 0.02,
          first_say_s: float = 2.0, say_every_s: float = 10.0) -> None:
    """Take the lock, polling; a wait past ``first_say_s`` says so, and again every ``say_every_s`` (a progress line
    naming the lock, its holders and the time waited), so a run queued behind another Gatehouse run on this machine
    is never silent; the usual short waits between two workers of one run print nothing."""
    from . import progress

    kind = "exclusive" if mode == fcntl.LOCK_EX else "shared"
    t0 = time.monotonic()
    said = None
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            if said is not None:
                progress.emit(f"lock {path.name}: taken ({kind}) after {time.monotonic() - t0:.0f} s")
            return
        except BlockingIOError:
            waited = time.monotonic() - t0
            if timeout_s is not None and waited > timeout_s:
                raise HarnessError(f"{path}: could not take the {kind} lock within {timeout_s:.1f} s") from None
            if (said is None and waited >= first_say_s) or (said is not None and waited - said >= say_every_s):
                who = ", ".join(holders(path)) or "another process"
                progress.emit(f"lock {path.name}: waiting {waited:.0f} s for the {kind} lock, held by {who}")
                said = waited
            time.sleep(min(poll_s * (1 + waited), 0.25))


@contextlib.contextmanager
def flock(path: Path, *, exclusive: bool, timeout_s: float | None = None) -> Iterator[Held]:
    """Hold ``flock(2)`` on ``path``, shared or exclusive, on a descriptor of its own."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    t0 = time.monotonic()
    try:
        _take(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH, path, timeout_s)
        yield Held("exclusive" if exclusive else "shared", time.monotonic() - t0)
    finally:
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


@contextlib.contextmanager
def machine(exclusive: bool = False, timeout_s: float | None = None) -> Iterator[Held]:
    """The machine-wide lock: every test and build holds it shared; a timing test holds it exclusive.

    Writers are not starved: a process waiting for the exclusive lock first takes
    a turnstile lock, and shared takers pass the turnstile before they take their
    shared lock, so once a timing test is waiting no new shared holder starts.
    Re-entry in the same process is a no-op (an exclusive holder that builds an
    artifact must not wait on itself), and so is a child process of a holder
    (``GATEHOUSE_MACHINE_LOCK_HELD`` is inherited): a test's subprocess runs as
    part of that test, and waiting for the turnstile there would deadlock.
    """
    depth = getattr(_local, "depth", 0)
    if depth or os.environ.get(HELD_ENV):
        _local.depth = depth + 1 if depth else 0
        try:
            yield Held(getattr(_local, "mode", None) or os.environ.get(HELD_ENV), 0.0, nested=True)
        finally:
            if depth:
                _local.depth = depth
        return
    t0 = time.monotonic()
    held = _hold(exclusive, timeout_s)
    try:
        yield Held(held.mode, time.monotonic() - t0)
    finally:
        _release()


def _hold(exclusive: bool, timeout_s: float | None) -> Held:
    """Take the machine lock through the turnstile and record it as this process's (``_local``, ``HELD_ENV``)."""
    base = lock_dir()
    with flock(base / "machine.turnstile", exclusive=True, timeout_s=timeout_s):
        ctx = flock(base / "machine.lock", exclusive=exclusive, timeout_s=timeout_s)
        held = ctx.__enter__()
    _local.depth, _local.mode, _local.ctx = 1, held.mode, ctx
    os.environ[HELD_ENV] = held.mode
    return held


def _release() -> None:
    ctx = getattr(_local, "ctx", None)
    _local.depth, _local.mode, _local.ctx = 0, None, None
    os.environ.pop(HELD_ENV, None)
    if ctx is not None:
        ctx.__exit__(None, None, None)
