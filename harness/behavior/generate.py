"""Generation over any backend with one CPU sampler, so two variants differ only by their logits.

A backend is an object with ``start(prompt_ids) -> logits`` (the last position's logits after the
prompt) and ``step(token_id) -> logits``.  Greedy picks the arg-max; sampled mode draws one uniform
number per step from a NumPy generator seeded by (contract seed, case id) and inverts the CDF of the
temperature/top-k/top-p distribution, so the same uniforms drive every backend.

A batch backend (:class:`BatchBackend`) runs several cases at once: the prompts left-padded with an
attention mask and per-row position ids, one row of logits per case.  :func:`generate_modes` makes
the same choices per row as :func:`generate` does for the case alone (its own sampler stream, its
own budget and stop), for every mode of the contract from one prefill: each prompt's row is repeated
once per mode, and the modes' rows decode in one batch.  Rows that finish are dropped from the batch,
so a long row never makes the finished ones cost a forward pass.  Only the batch's logits can differ
from the case's alone: not at all when its prompts have one length (the evaluation's batches), by the
rounding of the masked columns when they are padded.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from ..errors import EvidenceError
from ..hashing import sha256_json

MODES = ("greedy", "sampled")
# How :func:`case_rng` seeds a sampled case: one PCG64 stream per (contract seed, CRC-32 of the case id).
SEED_STRATEGY = "per-case-pcg64(seed,crc32(case_id))-v1"


class Backend(Protocol):
    def start(self, prompt_ids: list[int]) -> np.ndarray: ...
    def step(self, token: int) -> np.ndarray: ...


@runtime_checkable
class Resumable(Protocol):
    """A backend whose state after ``start`` can be saved and restored: ``save`` returns the cache as it is,
    ``restore`` makes it current again (the modes of one case resume from one prefill)."""

    def save(self) -> Any: ...
    def restore(self, state: Any) -> None: ...


@runtime_checkable
class BatchBackend(Protocol):
    """Several cases per forward pass: ``start_batch`` prefills left-padded prompts and returns the last
    position's logits per row (B, V); ``step_batch`` feeds one token per row (B, V); ``keep`` keeps the rows
    listed, in the listed order, in the cache: it drops the rows not listed (finished cases) and repeats a row
    listed more than once (one prefill shared by the generation modes)."""

    def start_batch(self, prompts: list[list[int]]) -> np.ndarray: ...
    def step_batch(self, tokens: list[int]) -> np.ndarray: ...
    def keep(self, rows: list[int]) -> None: ...


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


def top_order(x: np.ndarray, k: int) -> np.ndarray:
    """``np.lexsort((ids, -x))[:k]`` (the k largest values, descending, ties by ascending id) without sorting
    the whole vocabulary: a full sort of SmolLM2's 49,152 logits took 3.8 ms a sampled step, more than a
    batched forward pass's share.  Everything above the k-th largest value is in; ties at it enter by id."""
    n = x.shape[-1]
    if k >= n or not np.all(np.isfinite(x)):
        return np.lexsort((np.arange(n), -x))[:k]
    kth = x[np.argpartition(-x, k - 1)[k - 1]]
    above = np.flatnonzero(x > kth)
    candidates = np.concatenate([above, np.flatnonzero(x == kth)[:k - len(above)]])
    return candidates[np.lexsort((candidates, -x[candidates]))]


def sample(logits: np.ndarray, u: float, temperature: float, top_k: int, top_p: float) -> int:
    """The token whose cumulative probability first exceeds ``u`` (ties broken by lower id)."""
    x = np.asarray(logits, dtype=np.float64) / temperature
    k = min(top_k, x.shape[-1])
    order = top_order(x, k)                                      # descending logit, then ascending id
    z = x[order] - x[order[0]]
    p = np.exp(z)
    p /= p.sum()
    cum = np.cumsum(p)
    keep = int(np.searchsorted(cum, top_p, side="left")) + 1     # smallest prefix with mass >= top_p
    p, cum = p[:keep], np.cumsum(p[:keep] / p[:keep].sum())
    return int(order[min(int(np.searchsorted(cum, u, side="right")), keep - 1)])


def _choose(logits: np.ndarray, rng: np.random.Generator | None, contract: Contract, case_id: str,
            step: int) -> int:
    """The next id of one case: the arg-max (greedy) or one uniform of the case's own stream (sampled); the one
    choice :func:`generate` and :func:`generate_batch` share, so a batched row decides exactly as it would alone."""
    if not np.all(np.isfinite(logits)):
        raise EvidenceError(f"case {case_id!r}: the backend returned non-finite logits at step {step}")
    if rng is None:
        return int(np.argmax(logits))
    return sample(logits, float(rng.random()), contract.temperature, contract.top_k, contract.top_p)


def generate(backend: Backend, prompt_ids: list[int], budget: int, contract: Contract, mode: str,
             case_id: str) -> tuple[list[int], bool]:
    """Generated ids (the stop id excluded) and whether an end-of-turn id ended it within budget."""
    return _decode(backend, backend.start(list(prompt_ids)), budget, contract, mode, case_id)


def generate_each_mode(backend: Backend, prompt_ids: list[int], budget: int, contract: Contract,
                       case_id: str) -> dict[str, tuple[list[int], bool]]:
    """:func:`generate` in every mode of the contract, one mode after another on one backend row; a
    :class:`Resumable` backend prefills the prompt once and each mode resumes from that prefill, so every id is
    what :func:`generate` gives (the same logits: the prefill is the same computation, done once)."""
    if not isinstance(backend, Resumable) or len(contract.modes) < 2:
        return {mode: generate(backend, prompt_ids, budget, contract, mode, case_id) for mode in contract.modes}
    first = backend.start(list(prompt_ids))
    saved = backend.save()
    out = {}
    for k, mode in enumerate(contract.modes):
        if k:
            backend.restore(saved)
        out[mode] = _decode(backend, first, budget, contract, mode, case_id)
    return out


def _decode(backend: Backend, logits: np.ndarray, budget: int, contract: Contract, mode: str,
            case_id: str) -> tuple[list[int], bool]:
    """:func:`generate` from the prompt's last logits on: one id per step until end-of-turn or ``budget``."""
    rng = case_rng(contract.seed, case_id) if mode == "sampled" else None
    out: list[int] = []
    for _ in range(budget):
        token = _choose(logits, rng, contract, case_id, len(out))
        if token in contract.eos_ids:
            return out, True
        out.append(token)
        if len(out) < budget:
            logits = backend.step(token)
    return out, False


def generate_batch(backend: BatchBackend, prompts: Sequence[Sequence[int]], budgets: Sequence[int],
                   contract: Contract, mode: str, case_ids: Sequence[str]) -> list[tuple[list[int], bool]]:
    """:func:`generate` for several cases in one batch: per case (in the given order) its generated ids and
    whether an end-of-turn id ended it within its own budget (:func:`generate_modes` with one mode)."""
    return generate_modes(backend, prompts, budgets, contract, (mode,), case_ids)[mode]


def generate_modes(backend: BatchBackend, prompts: Sequence[Sequence[int]], budgets: Sequence[int],
                   contract: Contract, modes: Sequence[str], case_ids: Sequence[str]) -> dict[str, list[tuple[list[int], bool]]]:
    """:func:`generate` for several cases in several modes at once: per mode, per case (in the given order) its
    generated ids and whether an end-of-turn id ended it within its own budget.

    The prompts are prefilled once; each mode then gets its own copy of every prompt's rows (``backend.keep``
    with the rows repeated), so a batch of B cases decodes B x modes rows together.  Each row has its own
    sampler stream (one uniform per step of that row) and stops at its own end-of-turn id or budget; a
    finished row is dropped from the batch (``backend.keep``) and the batch ends when no row is left, so the
    ids differ from :func:`generate`'s only where the backend's batched logits do."""
    if not len(prompts) == len(budgets) == len(case_ids):
        raise EvidenceError(f"generate_modes: {len(prompts)} prompts, {len(budgets)} budgets, {len(case_ids)} case ids")
    if not modes or len(set(modes)) != len(modes) or set(modes) - set(MODES):
        raise EvidenceError(f"generate_modes: modes {list(modes)!r} (known: {MODES}, each at most once)")
    if not prompts:
        return {mode: [] for mode in modes}
    n = len(prompts)
    slots = [(mode, i) for mode in modes for i in range(n)]   # (mode, case) of every row, modes one after another
    rngs = [case_rng(contract.seed, case_ids[i]) if mode == "sampled" else None for mode, i in slots]
    outs: list[list[int]] = [[] for _ in slots]
    stopped = [False] * len(slots)
    logits = backend.start_batch([list(p) for p in prompts])
    if len(modes) > 1:   # one prefill for every mode: its rows repeated once per mode
        backend.keep([i for _ in modes for i in range(n)])
        logits = np.concatenate([logits] * len(modes))
    live = list(range(len(slots)))   # the slot of each backend row, in row order
    while True:
        rows, tokens = [], []
        for row, k in enumerate(live):
            i = slots[k][1]
            if len(outs[k]) >= budgets[i]:         # a zero budget: nothing to choose
                continue
            token = _choose(logits[row], rngs[k], contract, case_ids[i], len(outs[k]))
            if token in contract.eos_ids:
                stopped[k] = True
                continue
            outs[k].append(token)
            if len(outs[k]) < budgets[i]:
                rows.append(row)
                tokens.append(token)
        if not rows:
            return {mode: [(outs[k], stopped[k]) for k, (m, _) in enumerate(slots) if m == mode] for mode in modes}
        if len(rows) < len(live):
            backend.keep(rows)
            live = [live[r] for r in rows]
        logits = backend.step_batch(tokens)


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, attention mask, position ids), each (B, longest prompt), int64: every prompt right-aligned so
    that all rows' next tokens share one column, and each row's positions counting from 0 at its first real
    token (a pad column's position is 0 and masked), so a row sees the positions it would see alone."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise EvidenceError("a batch needs at least one prompt and no empty prompt")
    width = max(len(p) for p in prompts)
    ids = np.full((len(prompts), width), pad_id, np.int64)
    mask = np.zeros((len(prompts), width), np.int64)
    for b, p in enumerate(prompts):
        ids[b, width - len(p):] = p
        mask[b, width - len(p):] = 1
    return ids, mask, np.clip(np.cumsum(mask, axis=1) - 1, 0, None)


class OrtBackend:
    """Incremental decoding on an :class:`harness.runtime.OrtDecoder` with its past key/values; also a
    :class:`BatchBackend` (the left-padded pattern of ``OrtDecoder.greedy_padded``, which the cache gate
    verifies on Gatehouse's own graphs)."""

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

    def save(self):
        return self.past, self.n   # forward returns new arrays and never writes into the past it was given

    def restore(self, state) -> None:
        self.past, self.n = state

    def start_batch(self, prompts: list[list[int]]) -> np.ndarray:
        ids, self.mask, positions = left_pad(prompts)
        logits, self.past = self.d.forward(ids, self.mask, positions, self.d.empty_past(len(prompts)))
        self.next_pos = self.mask.sum(axis=1)
        return logits[:, -1]

    def step_batch(self, tokens: list[int]) -> np.ndarray:
        self.mask = np.concatenate([self.mask, np.ones((len(tokens), 1), np.int64)], axis=1)
        logits, self.past = self.d.forward(np.asarray(tokens, np.int64)[:, None], self.mask, self.next_pos[:, None],
                                           self.past)
        self.next_pos = self.next_pos + 1
        return logits[:, -1]

    def keep(self, rows: list[int]) -> None:
        idx = np.asarray(rows, np.int64)
        self.past = [np.ascontiguousarray(p[idx]) for p in self.past]
        self.mask, self.next_pos = self.mask[idx], self.next_pos[idx]


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

    def start_batch(self, prompts: list[list[int]]) -> np.ndarray:
        import torch

        ids, mask, positions = (torch.from_numpy(a) for a in left_pad(prompts))
        with torch.no_grad():
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        self.past, self.mask, self.next_pos = out.past_key_values, mask, mask.sum(dim=1)
        return out.logits[:, -1].float().numpy()

    def step_batch(self, tokens: list[int]) -> np.ndarray:
        import torch

        self.mask = torch.cat([self.mask, torch.ones((len(tokens), 1), dtype=self.mask.dtype)], dim=1)
        with torch.no_grad():
            out = self.model(input_ids=torch.tensor(tokens, dtype=torch.long)[:, None], attention_mask=self.mask,
                             position_ids=self.next_pos[:, None], past_key_values=self.past, use_cache=True)
        self.past, self.next_pos = out.past_key_values, self.next_pos + 1
        return out.logits[:, -1].float().numpy()

    def keep(self, rows: list[int]) -> None:
        import torch

        idx = torch.tensor(rows, dtype=torch.long)
        self.past.batch_select_indices(idx)   # transformers' Cache: keeps those rows, in place
        self.mask, self.next_pos = self.mask[idx], self.next_pos[idx]
