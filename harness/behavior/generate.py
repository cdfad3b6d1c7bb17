"""Generation over any backend with one CPU sampler, so two variants differ only by their logits.

A backend is an object with ``start(prompt_ids) -> logits`` (the last position's logits after the
prompt) and ``step(token_id) -> logits``.  Greedy picks the arg-max; sampled mode draws one uniform
number per step from a NumPy generator seeded by (contract seed, case id) and inverts the CDF of the
temperature/top-k/top-p distribution, so the same uniforms drive every backend.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..errors import EvidenceError
from ..hashing import sha256_json

MODES = ("greedy", "sampled")
# How :func:`case_rng` seeds a sampled case: one PCG64 stream per (contract seed, CRC-32 of the case id).
SEED_STRATEGY = "per-case-pcg64(seed,crc32(case_id))-v1"


class Backend(Protocol):
    def start(self, prompt_ids: list[int]) -> np.ndarray: ...
    def step(self, token: int) -> np.ndarray: ...


@dataclass(frozen=True)
class Contract:
    """Everything that must be equal for two behavior reports to be compared."""

    seed: int
    temperature: float
    top_k: int
    top_p: float
    eos_ids: tuple[int, ...]
    modes: tuple[str, ...] = MODES
    sampler: str = "numpy-pcg64-inverse-cdf-v1"
    device: str = "cpu"
    threads: int | None = None          # the backend's intra-op threads (None: not recorded)
    repetition_penalty: float = 1.0     # 1.0: none; the generator applies no penalty
    seed_strategy: str = SEED_STRATEGY

    def __post_init__(self):
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)
                                         or self.threads < 1):
            raise EvidenceError(f"invalid sampling contract: threads {self.threads!r} is not a positive integer")
        if self.repetition_penalty != 1.0:
            raise EvidenceError(f"invalid sampling contract: repetition_penalty {self.repetition_penalty!r}; the "
                                f"generator applies no repetition penalty, so 1.0 is the only value it can record")
        if not self.eos_ids:
            raise EvidenceError("the sampling contract needs at least one end-of-turn id")
        if not (self.temperature > 0 and self.top_k >= 1 and 0 < self.top_p <= 1):
            raise EvidenceError(f"invalid sampling contract: temperature {self.temperature}, top_k {self.top_k}, "
                                f"top_p {self.top_p}")
        unknown = set(self.modes) - set(MODES)
        if unknown:
            raise EvidenceError(f"unknown generation modes {sorted(unknown)} (known: {MODES})")

    def as_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p,
                "eos_ids": list(self.eos_ids), "modes": list(self.modes), "sampler": self.sampler,
                "device": self.device, "threads": self.threads, "repetition_penalty": self.repetition_penalty,
                "seed_strategy": self.seed_strategy}

    @property
    def sha256(self) -> str:
        return sha256_json(self.as_dict())


def case_rng(seed: int, case_id: str) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64([seed, zlib.crc32(case_id.encode())]))


def sample(logits: np.ndarray, u: float, temperature: float, top_k: int, top_p: float) -> int:
    """The token whose cumulative probability first exceeds ``u`` (ties broken by lower id)."""
    x = np.asarray(logits, dtype=np.float64) / temperature
    k = min(top_k, x.shape[-1])
    order = np.lexsort((np.arange(x.shape[-1]), -x))[:k]        # descending logit, then ascending id
    z = x[order] - x[order[0]]
    p = np.exp(z)
    p /= p.sum()
    cum = np.cumsum(p)
    keep = int(np.searchsorted(cum, top_p, side="left")) + 1     # smallest prefix with mass >= top_p
    p, cum = p[:keep], np.cumsum(p[:keep] / p[:keep].sum())
    return int(order[min(int(np.searchsorted(cum, u, side="right")), keep - 1)])


def generate(backend: Backend, prompt_ids: list[int], budget: int, contract: Contract, mode: str,
             case_id: str) -> tuple[list[int], bool]:
    """Generated ids (the stop id excluded) and whether an end-of-turn id ended it within budget."""
    rng = case_rng(contract.seed, case_id) if mode == "sampled" else None
    logits = backend.start(list(prompt_ids))
    out: list[int] = []
    for _ in range(budget):
        if not np.all(np.isfinite(logits)):
            raise EvidenceError(f"case {case_id!r}: the backend returned non-finite logits at step {len(out)}")
        if rng is None:
            token = int(np.argmax(logits))
        else:
            token = sample(logits, float(rng.random()), contract.temperature, contract.top_k, contract.top_p)
        if token in contract.eos_ids:
            return out, True
        out.append(token)
        if len(out) < budget:
            logits = backend.step(token)
    return out, False


class OrtBackend:
    """Incremental decoding on an :class:`harness.runtime.OrtDecoder` with its past key/values."""

    def __init__(self, decoder):
        self.d = decoder

    @property
    def threads(self) -> int:
        return self.d.threads

    def start(self, prompt_ids):
        n = len(prompt_ids)
        ids = np.asarray([prompt_ids], np.int64)
        logits, self.past = self.d.forward(ids, np.ones((1, n), np.int64), np.arange(n, dtype=np.int64)[None],
                                           self.d.empty_past(1))
        self.n = n
        return logits[0, -1]

    def step(self, token):
        self.n += 1
        logits, self.past = self.d.forward(np.asarray([[token]], np.int64), np.ones((1, self.n), np.int64),
                                           np.asarray([[self.n - 1]], np.int64), self.past)
        return logits[0, -1]


class TorchBackend:
    """The PyTorch reference (transformers, fp32, its own KV cache)."""

    def __init__(self, model, threads: int | None = None):
        import torch

        self.model = model
        if threads is not None:   # torch's thread count is process-wide: another test may have changed it
            torch.set_num_threads(threads)

    @property
    def threads(self) -> int:
        import torch

        return torch.get_num_threads()

    def start(self, prompt_ids):
        import torch

        with torch.no_grad():
            out = self.model(input_ids=torch.tensor([prompt_ids]), use_cache=True)
        self.past = out.past_key_values
        return out.logits[0, -1].float().numpy()

    def step(self, token):
        import torch

        with torch.no_grad():
            out = self.model(input_ids=torch.tensor([[token]]), past_key_values=self.past, use_cache=True)
        self.past = out.past_key_values
        return out.logits[0, -1].float().numpy()
