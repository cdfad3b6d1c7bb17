"""Measuring one start of an A/B/A window with any lane that can generate (thin I/O around the rule).

A start is one process launch: the caller opens a fresh lane (a probe process on a graph with a
configuration), hands its ``generate(prompt_ids, new_tokens) -> {"ids", "token_ms"}`` here, and
gets a :class:`Start` back: per cell and repeat, the pooled decode tokens/s over the repeat's waves
(excluding each wave's first token), the mean prefill ms and the repeat's CPU seconds per wall
second, plus the wave inputs and the machine fingerprint read at the start.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

from ..errors import HarnessError
from .evidence import Start, WaveInput
from .registration import Registration

Generate = Callable[[list[int], int], dict[str, Any]]


def measure_start(label: str, role: str, config: str, registration: Registration, generate: Generate,
                  prompts: Mapping[str, Sequence[int]], prompt_sha256: Mapping[str, str], new_tokens: int, warmup: int,
                  fingerprint: Mapping[str, Any], commit: str | None, figures: Callable[..., dict[str, Any]],
                  cpu_s: Callable[[], float | None] = lambda: None) -> tuple[Start, list[dict[str, Any]]]:
    """One start; returns the Start and its raw per-wave records. A lane error makes the start incomplete."""
    values: dict[str, dict[str, list[float]]] = {c: {"decode_tok_s": [], "prefill_ms": [], "cpu_per_wall": []}
                                                  for c in registration.cells}
    inputs = {c: [WaveInput(prompt_sha256[c], c) for _ in range(registration.repeats * registration.waves_per_repeat)]
              for c in registration.cells}
    raw: list[dict[str, Any]] = []
    complete, why = True, None
    try:
        for c in registration.cells:
            for _ in range(warmup):
                generate(list(prompts[c]), new_tokens)
        # repeats outermost, cells inside: slow drifts land on every cell alike
        for r in range(registration.repeats):
            for c in registration.cells:
                tokens = secs = prefill = 0.0
                c0, w0 = cpu_s(), time.perf_counter()
                for w in range(registration.waves_per_repeat):
                    g = generate(list(prompts[c]), new_tokens)
                    f = figures(g["token_ms"], g["ids"], new_tokens)
                    tokens, secs, prefill = tokens + f["decode_tokens"], secs + f["decode_s"], prefill + f["prefill_ms"]
                    raw.append({"repeat": r, "cell": c, "wave": w, **f})
                c1, w1 = cpu_s(), time.perf_counter()
                values[c]["decode_tok_s"].append(tokens / secs)
                values[c]["prefill_ms"].append(prefill / registration.waves_per_repeat)
                values[c]["cpu_per_wall"].append((c1 - c0) / (w1 - w0) if c0 is not None and c1 is not None
                                                 else float("nan"))
    except HarnessError as exc:
        complete, why = False, f"{type(exc).__name__}: {exc}"
    wanted = {m.name for m in registration.metrics}
    vals = {c: {k: v for k, v in m.items() if k in wanted} for c, m in values.items()}
    return Start(label, role, registration.key, config, vals, inputs, dict(fingerprint), complete, why, commit), raw
