"""Sharded runs: ``--shard K/N`` keeps the K-th of N parts of a campaign, split by variant (pure).

A CI matrix (or a Kubernetes indexed job) runs the same campaign N times, each with its own ``--shard``; each
job writes its own run directory and ``bin/gatehouse report --merge`` joins them (harness.merge). The unit is
the variant: every gate test of one model variant lands in one shard, so a variant's receipts come from one
machine. A test that compares several variants (the interleaved goal rounds, a win rule's OFF/ON/OFF window)
is one test item, so it is never split; it goes with the variant it is parametrized by. A test with no variant
(a streaming protocol, the suite's own tests) is its own unit.

The split is round-robin over the sorted distinct units, so every shard of one collection gets a share and the
N shards together hold each unit exactly once, as long as each job collects the same tests (same campaign,
same ``-m``/``-k``).
"""

from __future__ import annotations

from typing import Iterable

from .errors import HarnessError


class ShardError(HarnessError):
    pass


def parse(text: str) -> tuple[int, int]:
    """``"K/N"`` -> (K, N) with 1 <= K <= N; anything else is refused naming the value."""
    k, sep, n = str(text).partition("/")
    if not sep or not k.strip().isdigit() or not n.strip().isdigit():
        raise ShardError(f"--shard: expected K/N (for example 2/3), got {text!r}")
    k_i, n_i = int(k), int(n)
    if n_i < 1 or not 1 <= k_i <= n_i:
        raise ShardError(f"--shard: K must be between 1 and N (N >= 1), got {text!r}")
    return k_i, n_i


def unit(nodeid: str, variant_id: str | None) -> str:
    """The unit a test is sharded by: its variant's id, else its own node id."""
    return f"variant:{variant_id}" if variant_id else f"test:{nodeid}"


def assign(units: Iterable[str], n: int) -> dict[str, int]:
    """Each distinct unit -> its shard (1..n), round-robin over the sorted units."""
    return {u: i % n + 1 for i, u in enumerate(sorted(set(units)))}


def select(units: list[str], k: int, n: int) -> list[bool]:
    """For each test's unit (in collection order), whether shard ``k`` of ``n`` keeps it."""
    shard_of = assign(units, n)
    return [shard_of[u] == k for u in units]
