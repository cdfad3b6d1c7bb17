"""Process-tree helpers from /proc: descendants of a process, their CPU time, and a last-resort kill."""

from __future__ import annotations

import os
import signal
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name is in parentheses and may hold spaces
    return [raw[:raw.index(" ")]] + [raw[raw.index("(") + 1:raw.rindex(")")]] + raw[raw.rindex(")") + 2:].split()


def children_map() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None and st[2] != "Z":
                out.setdefault(int(st[3]), []).append(int(entry))
    return out


def descendants(pid: int) -> list[int]:
    """Every live (non-zombie) descendant of ``pid``."""
    tree = children_map()
    found, stack = [], list(tree.get(pid, []))
    while stack:
        p = stack.pop()
        found.append(p)
        stack.extend(tree.get(p, []))
    return sorted(found)


def alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[2] != "Z"


def cpu_seconds(pids: list[int]) -> float:
    """User plus system CPU seconds of the given processes (threads included)."""
    total = 0
    for pid in pids:
        st = _stat(pid)
        if st is not None:
            total += int(st[13]) + int(st[14])
    return total / _TICK


def kill_all(pids: list[int]) -> list[int]:
    """SIGKILL whatever of ``pids`` still lives; returns those it had to kill."""
    killed = []
    for pid in pids:
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
    return killed
