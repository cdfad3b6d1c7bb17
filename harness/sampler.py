"""The machine watched *during* a timing: a background sampler of ``/proc`` and its pure summary.

A fingerprint (:mod:`harness.fingerprint`) is a snapshot taken before a timing; it cannot see a
neighbour that starts in the middle of it, a hypervisor that takes the CPU away (steal), a disk that
stalls the process (iowait) or a clock that drops.  :class:`Sampler` reads, every ``interval_s``
seconds while a timing runs:

- ``/proc/stat``'s aggregate ``cpu`` line (user, nice, system, idle, iowait, irq, softirq, steal) and
  ``procs_running`` (the run-queue length);
- the CPU time of this process's tree (this process and every descendant, from ``/proc/<pid>/stat``:
  utime + stime + the reaped children's cutime + cstime), so that the CPU the rest of the machine used
  (*foreign* CPU) is the machine's busy time minus ours;
- each core's clock: ``cpufreq/scaling_cur_freq`` where the kernel exposes it, else ``/proc/cpuinfo``'s
  ``cpu MHz`` lines (a VM's nominal clock; recorded as such in ``cpu_mhz_source``).

:func:`summarize` turns the raw samples into the flat figures receipts and the win rule's guard read
(:data:`FIGURES`).  A figure the machine cannot give is ``None`` and named in ``absent``, never 0: the
win rule fails closed on an absent reading its policy names (see :mod:`harness.winrule.drift`).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

# The summary's figures (all fractions of the machine's CPU time over the timing, except where named).
FIGURES = ("steal_fraction", "steal_fraction_peak", "iowait_fraction", "foreign_cpu_share", "run_queue_mean", "run_queue_peak", "cpu_mhz_min", "cpu_mhz_max",
           "cpu_mhz_spread")


@dataclass(frozen=True)
class Sample:
    """One reading: monotonic time, the aggregate cpu jiffies, procs_running, our tree's CPU ticks, core MHz."""

    t: float
    cpu: tuple[int, ...]          # user nice system idle iowait irq softirq steal
    running: int | None
    own_ticks: int | None
    mhz: tuple[float, ...]


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def read_proc_stat(text: str | None = None) -> tuple[tuple[int, ...], int | None]:
    """``(cpu jiffies, procs_running)`` from ``/proc/stat`` (or ``text``); empty cpu when unreadable."""
    text = _read("/proc/stat") if text is None else text
    cpu: tuple[int, ...] = ()
    running = None
    for line in (text or "").splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            cpu = tuple(int(x) for x in parts[1:9])
        elif parts and parts[0] == "procs_running":
            running = int(parts[1])
    return cpu, running


def _stat_fields(pid: int) -> tuple[int, int] | None:
    """``(ppid, utime + stime + cutime + cstime)`` of a process, or None when it is gone."""
    text = _read(f"/proc/{pid}/stat")
    if not text:
        return None
    rest = text[text.rfind(")") + 2:].split()   # the command may hold spaces and parentheses
    try:
        return int(rest[1]), sum(int(x) for x in rest[11:15])
    except (IndexError, ValueError):
        return None


def tree_ticks(root: int) -> int | None:
    """CPU ticks of ``root`` and all its live descendants (reaped children are in the parents' cutime)."""
    table: dict[int, tuple[int, int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    for name in entries:
        if name.isdigit():
            got = _stat_fields(int(name))
            if got is not None:
                table[int(name)] = got
    if root not in table:
        return None
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += table[pid][1]
        todo.extend(children.get(pid, ()))
    return total


def read_mhz() -> tuple[tuple[float, ...], str | None]:
    """Each core's clock in MHz and where it came from (``cpufreq``, ``cpuinfo``), or ``((), None)``."""
    freqs = []
    for path in sorted(Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_cur_freq")):
        text = _read(str(path))
        if text and text.strip().isdigit():
            freqs.append(int(text) / 1000.0)
    if freqs:
        return tuple(freqs), "cpufreq"
    values = [float(line.split(":")[1]) for line in (_read("/proc/cpuinfo") or "").splitlines()
              if line.startswith("cpu MHz")]
    return (tuple(values), "cpuinfo") if values else ((), None)


def take(root: int) -> Sample:
    cpu, running = read_proc_stat()
    mhz, _ = read_mhz()
    return Sample(time.monotonic(), cpu, running, tree_ticks(root), mhz)


def _frac(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


def summarize(samples: Sequence[Sample], *, interval_s: float, mhz_source: str | None = None,
              ticks_per_s: int = CLOCK_TICKS) -> dict[str, Any]:
    """The figures of :data:`FIGURES` over consecutive samples (pure).

    Fractions are of the machine's total CPU time (all cores) between the first and the last sample;
    ``*_peak`` is the largest over any one interval.  Foreign CPU is busy time (user, nice, system,
    irq, softirq) minus this process tree's over the whole timing, floored at zero: ``/proc/stat`` counts
    ticks while a process's own times are exact run times published late, so the two agree over a
    timing but not per interval (measured: one 0.65 s interval showed 68 busy ticks and 0 of ours), and
    there is no per-interval foreign peak.  Figures the samples cannot give are ``None`` and listed in
    ``absent``.
    """
    out: dict[str, Any] = {k: None for k in FIGURES}
    out.update({"samples": len(samples), "interval_s": interval_s, "cpu_mhz_source": mhz_source,
                "duration_s": round(samples[-1].t - samples[0].t, 3) if len(samples) >= 2 else 0.0})
    pairs = [(a, b) for a, b in zip(samples, samples[1:]) if len(a.cpu) == 8 and len(b.cpu) == 8]
    if pairs:
        steal, iowait, total, busy_all = [], [], [], 0
        for a, b in pairs:
            d = [y - x for x, y in zip(a.cpu, b.cpu)]
            tot = sum(d)
            busy_all += d[0] + d[1] + d[2] + d[5] + d[6]
            total.append(tot)
            steal.append(d[7])
            iowait.append(d[4])
        all_total = sum(total)
        out["steal_fraction"] = _frac(sum(steal), all_total)
        out["iowait_fraction"] = _frac(sum(iowait), all_total)
        peaks = [_frac(s, t) for s, t in zip(steal, total) if t > 0]
        out["steal_fraction_peak"] = max(peaks) if peaks else None
        first, last = pairs[0][0], pairs[-1][1]
        if first.own_ticks is not None and last.own_ticks is not None:
            out["foreign_cpu_share"] = _frac(max(0, busy_all - (last.own_ticks - first.own_ticks)), all_total)
    running = [s.running for s in samples if s.running is not None]
    if running:
        out["run_queue_mean"] = sum(running) / len(running)
        out["run_queue_peak"] = max(running)
    mhz = [m for s in samples for m in s.mhz]
    if mhz:
        out["cpu_mhz_min"], out["cpu_mhz_max"] = min(mhz), max(mhz)
        out["cpu_mhz_spread"] = (max(mhz) - min(mhz)) / max(mhz) if max(mhz) > 0 else None
    for key in ("steal_fraction", "steal_fraction_peak", "iowait_fraction", "foreign_cpu_share"):
        if out[key] is not None:
            out[key] = round(out[key], 5)
    out["absent"] = [k for k in FIGURES if out[k] is None]
    return out


class Sampler:
    """``with Sampler() as s: <timing>`` then ``s.summary``: samples ``/proc`` every ``interval_s`` in a thread.

    The first sample is taken on entry and the last on exit, so even a timing shorter than one interval
    has a summary.  ``root`` is the process whose tree counts as ours (default: this process).
    """

    def __init__(self, interval_s: float = 0.5, root: int | None = None):
        if not interval_s > 0:
            raise ValueError(f"interval_s must be positive, got {interval_s!r}")
        self.interval_s = interval_s
        self.root = os.getpid() if root is None else root
        self.samples: list[Sample] = []
        self.summary: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        _, self._mhz_source = read_mhz()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.samples.append(take(self.root))

    def __enter__(self) -> "Sampler":
        self.samples.append(take(self.root))
        self._thread = threading.Thread(target=self._run, name="gatehouse-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        last = take(self.root)
        # /proc/stat counts in clock ticks (10 ms): a timing shorter than a tick can end with no tick counted,
        # and then no fraction exists. Wait for the next tick (at most 0.1 s) rather than report nothing; the
        # summary's duration_s says how long the sampled span was.
        for _ in range(10):
            if not self.samples[0].cpu or sum(last.cpu) > sum(self.samples[0].cpu):
                break
            time.sleep(0.01)
            last = take(self.root)
        self.samples.append(last)
        self.summary = summarize(self.samples, interval_s=self.interval_s, mhz_source=self._mhz_source)

