"""The lane protocol: what one generation recorded (:class:`Generation`), what a lane offers (:class:`Lane`),
and :class:`BaseLane`, which times an adapter's generation with the lane's CPU clock."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

from ..throughput import stats


@dataclass(frozen=True)
class Generation:
    """One greedy generation as a lane measured it.

    ``token_ms``: one stamp per generated token, ms from the request's start (the first stamp is the
    prefill). ``wall_s`` and ``cpu_s``: the call's wall seconds and the CPU seconds the engine's process
    used meanwhile (``None`` when unknown). ``detail``: the lane's own per-generation facts, kept in the raw
    record (the browser page's per-step ``run_ms``/``feed_ms``, ...)."""

    ids: tuple[int, ...]
    token_ms: tuple[float, ...]
    wall_s: float | None = None
    cpu_s: float | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)

    @property
    def prefill_ms(self) -> float:
        return float(self.token_ms[0])

    @property
    def decode_tok_s(self) -> float:
        """Tokens after the first over the time after the first stamp (raises on unusable stamps)."""
        return stats.stamp_figures(self.token_ms)["decode_tok_s"]

    @property
    def cpu_per_wall(self) -> float | None:
        if self.cpu_s is None or not self.wall_s:
            return None
        return self.cpu_s / self.wall_s

    def figures(self, expected_tokens: int) -> dict[str, Any]:
        """:func:`harness.throughput.stats.figures`: refuses a generation of the wrong length or stamps."""
        return stats.figures(self.token_ms, self.ids, expected_tokens)


@runtime_checkable
class Lane(Protocol):
    """One engine that generates greedy tokens; see the package docstring."""

    name: str

    def load(self) -> dict[str, Any]:
        """Start the engine; its load record (raises :class:`harness.errors.HarnessError` when it cannot)."""

    def generate(self, prompt_ids: Sequence[int], n: int) -> Generation:
        """``n`` greedy tokens after ``prompt_ids``, EOS ignored."""

    def close(self) -> str | None:
        """End the engine; what went wrong at the end, or None. Safe to call twice or before ``load``."""

    def __enter__(self) -> "Lane": ...

    def __exit__(self, *exc: Any) -> None: ...


class BaseLane:
    """A lane whose adapter implements ``load`` and ``_generate(prompt, n) -> (ids, token_ms, detail)``;
    :meth:`generate` times it: wall seconds by ``time.perf_counter``, CPU seconds by :meth:`cpu_s`
    (this process's CPU time unless the engine runs elsewhere)."""

    def __init__(self, name: str):
        self.name = name

    def load(self) -> dict[str, Any]:
        raise NotImplementedError

    def cpu_s(self) -> float | None:
        return time.process_time()

    def _generate(self, prompt: list[int], n: int) -> tuple[Sequence[int], Sequence[float], Mapping[str, Any]]:
        raise NotImplementedError

    def generate(self, prompt_ids: Sequence[int], n: int) -> Generation:
        c0, w0 = self.cpu_s(), time.perf_counter()
        ids, token_ms, detail = self._generate(list(prompt_ids), n)
        c1, w1 = self.cpu_s(), time.perf_counter()
        cpu = None if c0 is None or c1 is None else c1 - c0
        return Generation(tuple(int(i) for i in ids), tuple(float(t) for t in token_ms), w1 - w0, cpu, dict(detail))

    def close(self) -> str | None:
        return None

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"
