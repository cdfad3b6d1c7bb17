"""Routing a prompt to a skill: the seed's reconstruction-error argmin over selection subspaces (pure).

A subspace is fitted from example prompts' features φ(x) (:func:`phi_of_values`: the mean and the standard
deviation over the prompt's tokens of the backbone graph's ``present.L.value`` after a prefill of the prompt,
heads concatenated; what any decoder graph outputs, so the native probe computes the same φ at serve
time): their mean plus a PCA basis of rank ``min(rank, N - 1, 8)`` (with one prompt it degenerates to the distance to
the mean, which still routes). A prompt goes to the subspace that reconstructs its φ with the smallest
mean squared error. Routing is judged on held-out prompts: the fraction of domain prompts routed to the
skill (accuracy) and of general prompts routed to it (false routes).

Prompts are cut from token ids as evenly spaced, disjoint windows (:func:`windows`) and pinned by the SHA-256
of their ids (:func:`prompt_sha256`, the win rule's spelling). Two subspaces are fitted, ``skill`` (domain
prompts) and ``general``; a tie routes to ``general`` (the first name in sort order): a router that cannot
tell keeps the backbone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ..hashing import sha256_bytes

MAX_RANK = 8
SKILL, GENERAL = "skill", "general"
FEATURE = "present_value_mean_std"   # the one φ (a bundle records it; the probe refuses any other)


@dataclass(frozen=True)
class Subspace:
    mean: np.ndarray
    basis: np.ndarray     # (rank, hidden), orthonormal rows

    @property
    def rank(self) -> int:
        return int(self.basis.shape[0])


def phi_of_values(values: np.ndarray) -> np.ndarray:
    """φ from one layer's ``present.L.value`` of a prefill, (kv_heads, n, head_dim) for the prompt's n tokens:
    the mean over the tokens of each channel, then the population standard deviation (float64), each flattened
    head-major (index ``h * head_dim + d``): 2 * kv_heads * head_dim numbers. Values are a linear function of
    the layer's normalized input hidden state; the spread keeps what a mean alone averages away (the CI model:
    31/32 and 3/32 with the mean alone, 32/32 and 2/32 with both)."""
    v = np.asarray(values, np.float64)
    if v.ndim != 3 or v.shape[1] < 1:
        raise ValueError(f"phi_of_values needs (kv_heads, tokens, head_dim) with at least one token, got {v.shape}")
    tokens = v.transpose(1, 0, 2).reshape(v.shape[1], -1)
    mean = tokens.mean(0)
    return np.concatenate([mean, np.sqrt(((tokens - mean) ** 2).mean(0))])


def fit(phis: np.ndarray, rank: int) -> Subspace:
    """Mean plus the top ``min(rank, N - 1, 8)`` principal directions of ``phis`` (N, hidden)."""
    phis = np.asarray(phis, np.float64)
    if phis.ndim != 2 or phis.shape[0] < 1:
        raise ValueError(f"fit needs a (N, hidden) array of at least one prompt, got shape {phis.shape}")
    mean = phis.mean(0)
    k = effective_rank(rank, phis.shape[0])
    if k == 0:
        return Subspace(mean, np.zeros((0, phis.shape[1])))
    _, _, vt = np.linalg.svd(phis - mean, full_matrices=False)
    return Subspace(mean, vt[:k])


def error(phi: np.ndarray, s: Subspace) -> float:
    """Mean squared error of ``phi``'s reconstruction from the subspace."""
    c = np.asarray(phi, np.float64) - s.mean
    r = c - s.basis.T @ (s.basis @ c)
    return float(np.mean(r * r))


def route(phi: np.ndarray, subspaces: Mapping[str, Subspace]) -> str:
    """The name of the subspace with the smallest reconstruction error (ties: the first name in sort order)."""
    return min(sorted(subspaces), key=lambda n: error(phi, subspaces[n]))


def argmin(phi: np.ndarray, candidates: Sequence[tuple[str, Subspace]]) -> tuple[str, dict[str, float]]:
    """The first candidate (in the order given) whose subspace reconstructs ``phi`` with the smallest error, and
    every candidate's error: the native probe's choice among bundles, in the same order (its ties go first)."""
    errors = {name: error(phi, s) for name, s in candidates}
    best = None
    for name, _ in candidates:
        if best is None or errors[name] < errors[best]:
            best = name
    if best is None:
        raise ValueError("argmin needs at least one subspace")
    return best, errors


def judge(domain: Sequence[np.ndarray], general: Sequence[np.ndarray], subspaces: Mapping[str, Subspace],
          skill: str) -> dict[str, float | int]:
    """Routing accuracy on held-out domain prompts and the false-route rate on held-out general prompts."""
    hits = sum(route(p, subspaces) == skill for p in domain)
    false = sum(route(p, subspaces) == skill for p in general)
    return {"domain_prompts": len(domain), "general_prompts": len(general),
            "accuracy": hits / len(domain) if domain else float("nan"),
            "false_route_rate": false / len(general) if general else float("nan")}


def effective_rank(rank: int, prompts: int) -> int:
    """The rank a subspace fitted from ``prompts`` prompts has: ``min(rank, prompts - 1, 8)`` (at least 0)."""
    return max(0, min(rank, prompts - 1, MAX_RANK))


def windows(ids: Sequence[int], count: int, length: int) -> list[tuple[int, ...]]:
    """``count`` disjoint windows of ``length`` ids, evenly spaced over ``ids``: the first starts at 0, the last
    ends at the end (one window: the first ``length`` ids). Too few ids for ``count`` disjoint windows is an
    error (overlapping prompts would count the same text twice)."""
    if count < 1 or length < 1:
        raise ValueError(f"windows needs count >= 1 and length >= 1, got {count} and {length}")
    if count * length > len(ids):
        raise ValueError(f"{len(ids)} tokens cannot give {count} disjoint prompts of {length} tokens "
                         f"(need {count * length})")
    span = len(ids) - length
    starts = [0] if count == 1 else [i * span // (count - 1) for i in range(count)]
    return [tuple(int(t) for t in ids[s:s + length]) for s in starts]


def prompt_sha256(ids: Sequence[int]) -> str:
    """A prompt's pin: the SHA-256 of its ids joined by commas (as :func:`harness.winrule.lane.prompt_sha256`)."""
    return sha256_bytes(",".join(map(str, ids)).encode())


def assess(phis: np.ndarray, subspaces: Mapping[str, Subspace]) -> list[dict[str, object]]:
    """Each prompt's route and its reconstruction error under every subspace (the evidence a gate records)."""
    out = []
    for phi in np.asarray(phis, np.float64):
        errors = {n: error(phi, subspaces[n]) for n in sorted(subspaces)}
        out.append({"route": min(errors, key=errors.__getitem__), "errors": errors})
    return out
