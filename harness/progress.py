"""Progress while Gatehouse works: a line per step of long work, shown in the terminal as it happens.

Long work (an artifact build, a behavior evaluation, throughput repeats, streaming cases, the win rule's
starts) calls :func:`emit` (or a :func:`ticker` for counted work).  Where the line goes is the plugin's
choice, made once per process with :func:`install`:

- a pytest process without xdist: pytest's terminal writer, with capture suspended for the line (as
  pytest's own live logging does), so it shows with capture on; nothing under ``-q``;
- an xdist worker: a line appended to ``<run>/progress/<worker>.log``; the controller (:class:`Tail`)
  reads those files and shows each new line through its own terminal writer, prefixed with the worker;
- no plugin (a library call, ``bin/gatehouse report``): standard error.

Every shown line starts with the seconds since the process began its work, so a silent minute is visible
as a gap.  Emitting never raises: progress is a courtesy, never a reason for a measurement to fail.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Callable, Optional

Sink = Callable[[str], None]

EVERY_S = 5.0                 # a ticker shows a count at most this often (and always the last one)

_t0 = time.monotonic()
_sink: Optional[Sink] = None


def _stderr(line: str) -> None:
    print(line, file=sys.__stderr__, flush=True)


def stamp(seconds: float) -> str:
    """Elapsed seconds as the line's prefix: ``  42s``, ``3m07s``, ``1h02m``."""
    s = int(seconds)
    if s < 60:
        return f"{s:4d}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def install(sink: Optional[Sink]) -> Optional[Sink]:
    """Where lines go in this process from now on (None: standard error); restarts the clock.  Returns the
    sink it replaced, for a nested session (pytester in process) to put back when it ends."""
    global _sink, _t0
    previous, _sink, _t0 = _sink, sink, time.monotonic()
    return previous


def emit(message: str) -> None:
    """One progress line (``message`` without a trailing newline)."""
    line = f"[gatehouse {stamp(time.monotonic() - _t0)}] {message}"
    try:
        (_sink or _stderr)(line)
    except Exception:   # noqa: BLE001 - a closed terminal or a full disk must not fail a measurement
        pass


def ticker(what: str, total: int, every_s: float = EVERY_S, say: Optional[Sink] = None,
           ends: bool = True) -> Callable[[int], None]:
    """``tick(done)`` for counted work: ``<what>: done/total`` at most every ``every_s`` seconds, and always the
    first and the last count (so a short job shows its start and end, a long one a line every few seconds);
    ``ends=False``: only once ``every_s`` has passed since the start or the last line (a caller that announced the
    work already: a short job adds nothing). ``say`` is where the line goes (default :func:`emit`; a build passes
    its labelled progress)."""
    say = say or emit
    t_start = time.monotonic()
    last = [None if ends else t_start]

    def tick(done: int) -> None:
        now = time.monotonic()
        if (ends and (done == total or last[0] is None)) or (last[0] is not None and now - last[0] >= every_s):
            last[0] = now
            say(f"{what}: {done}/{total}" + (f" in {now - t_start:.1f} s" if done == total else ""))

    return tick


def file_sink(path: Path) -> Sink:
    """An xdist worker's sink: append the line to ``path`` (the controller tails it); the folder is made at the
    first line, so a worker that shows nothing leaves nothing."""

    def sink(line: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            f.write(line.replace("\n", " ") + "\n")

    return sink


class Tail:
    """The xdist controller's reader of its workers' progress logs: every ``interval_s`` it shows the new
    complete lines of ``<folder>/*.log`` through ``show`` (prefixed with the worker's name), on a thread
    that :meth:`stop` ends after a last read."""

    def __init__(self, folder: Path, show: Sink, interval_s: float = 1.0, skip_existing: bool = False):
        self.folder, self.show, self.interval_s = Path(folder), show, interval_s
        self._offsets: dict[Path, int] = {}
        if skip_existing and self.folder.is_dir():   # a reused run directory: earlier sessions' lines were shown then
            self._offsets = {path: path.stat().st_size for path in self.folder.glob("*.log")}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gatehouse-progress", daemon=True)

    def start(self) -> "Tail":
        self._thread.start()
        return self

    def poll(self) -> int:
        """Show what the workers wrote since the last poll; how many lines were shown."""
        shown = 0
        for path in sorted(self.folder.glob("*.log")) if self.folder.is_dir() else []:
            start = self._offsets.get(path, 0)
            try:
                with open(path, "rb") as f:
                    f.seek(start)
                    data = f.read()
            except OSError:
                continue
            end = data.rfind(b"\n") + 1          # a line still being written waits for the next poll
            self._offsets[path] = start + end
            for raw in data[:end].splitlines():
                self.show(f"{path.stem} {raw.decode('utf-8', 'replace')}")
                shown += 1
        return shown

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.poll()
            except Exception:   # noqa: BLE001 - see emit
                pass

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        try:
            self.poll()
        except Exception:   # noqa: BLE001
            pass
