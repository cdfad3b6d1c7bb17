"""What the browser lane's runtime really ran: :func:`threads_used` (the gate's rule is
:func:`harness.gates.throughput_browser.decide`)."""

from __future__ import annotations

from typing import Any



def threads_used(load: dict[str, Any]) -> int:
    """Threads the wasm runtime really runs: the main thread plus the pthread Workers it started
    (never more than it reports configuring)."""
    effective = int(load.get("num_threads_effective") or 1)
    started = 1 + int(load.get("workers_started") or 0)
    return min(effective, started)
