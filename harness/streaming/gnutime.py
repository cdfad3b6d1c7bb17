"""GNU time's ``-v`` report and /proc readings: peak and sampled resident memory, process-group membership."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

GNU_TIME = "/usr/bin/time"


def time_prefix(output: Path) -> list[str]:
    """``/usr/bin/time -v -o output``, or nothing when GNU time is not installed (Debian package ``time``)."""
    if not (os.path.exists(GNU_TIME) and os.access(GNU_TIME, os.X_OK)) and not shutil.which("time"):
        return []
    return [GNU_TIME, "-v", "-o", str(output)]


def parse_time_report(text: str) -> dict:
    """Peak RSS in KiB, exit status and wall/cpu seconds from a GNU time ``-v`` report (None when absent)."""
    def grab(label, cast):
        m = re.search(rf"^\s*{re.escape(label)}:\s*(.+)$", text, re.M)
        try:
            return cast(m.group(1).strip()) if m else None
        except ValueError:
            return None
    return {
        "peak_rss_kib": grab("Maximum resident set size (kbytes)", int),
        "exit_status": grab("Exit status", int),
        "user_seconds": grab("User time (seconds)", float),
        "system_seconds": grab("System time (seconds)", float),
        "terminated_by_signal": bool(re.search(r"Command terminated by signal", text)),
    }


def rss_kib(pid: int) -> int | None:
    """Current VmRSS of ``pid`` in KiB, None if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is ``pgid``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) "
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(entry))
    return out
