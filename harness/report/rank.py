"""Ranks and ratios: quality rank, speed rank, the Pareto frontier and the goal's speed ratios.

Pure functions of the variant rows that :mod:`harness.report.qualify` decided and the lane rows the
receipts carry.  Only variants that passed every gate are ranked; peer graphs never are.  The goal
ratios' targets are campaign data: they come from the run's throughput_goal receipts (their ``policy``
holds the campaign's ``GoalPolicy``), never from literals here; a run without such a receipt shows its
ratios with no target.
"""

from __future__ import annotations

import numbers
from typing import Any, Iterable, Mapping, Sequence

from ..domain import DTYPES
from ..view import LaneRow

SPEED_LANES = ("native-probe", "python-ort")   # the lane a variant's speed rank uses, in preference order
SPEED_CELL = "short"
# a speed taken while other processes used at least this share of the CPU is marked in the variants table (the
# sampler's foreign_cpu_share; the win rule's default bound on the same reading)
FOREIGN_LOAD_MARK = 0.10
RANKING = "quality index (behavior), then graph bytes; failed or incomplete variants are unranked"
SPEED_RANKING = f"decode tokens/s ({' or '.join(SPEED_LANES)} lane, {SPEED_CELL} prompt), then quality, then graph bytes"

Key = tuple[str, str]


def _number(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def speed(lanes: Iterable[LaneRow], model: str, dtype: str) -> dict[str, Any] | None:
    """The variant's speed for the speed rank: the first lane in ``SPEED_LANES`` with a passing receipt
    that has the short cell (the last such receipt of that lane), or None."""
    lanes = list(lanes)
    for lane in SPEED_LANES:
        hit = [r for r in lanes if (r.model, r.dtype, r.lane) == (model, dtype, lane)
               and r.outcome == "pass" and _number(r.speed(SPEED_CELL))]
        if hit:
            cell = hit[-1].cells[SPEED_CELL]
            return {"lane": lane, "cell": SPEED_CELL, "decode_tok_s": cell.decode_tok_s,
                    "decode_tok_s_iqr": cell.decode_tok_s_iqr, "foreign_cpu_share": hit[-1].foreign_cpu_share}
    return None


def eligible(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Rows that may be ranked: passed every gate, have a graph size, and are our own dtypes (no peers)."""
    return [r for r in rows if r["passed_all_gates"] and r["graph_bytes"] and r.get("own", r["dtype"] in DTYPES)]


def quality_ranks(rows: Iterable[Mapping[str, Any]]) -> dict[Key, int]:
    """1 = best quality index; ties by smaller graph, then model and dtype."""
    quality = [r for r in eligible(rows) if _number(r["figures"].get("quality_index"))]
    order = sorted(quality, key=lambda r: (-r["figures"]["quality_index"], r["graph_bytes"], r["model"], r["dtype"]))
    return {(r["model"], r["dtype"]): i for i, r in enumerate(order, 1)}


def speed_ranks(rows: Iterable[Mapping[str, Any]]) -> dict[Key, int]:
    """1 = fastest decode (``row["speed"]``); ties by quality index, then smaller graph, model, dtype."""
    fast = [r for r in eligible(rows) if r.get("speed")]
    order = sorted(fast, key=lambda r: (-r["speed"]["decode_tok_s"], -(r["figures"].get("quality_index") or 0),
                                        r["graph_bytes"], r["model"], r["dtype"]))
    return {(r["model"], r["dtype"]): i for i, r in enumerate(order, 1)}


def pareto_frontier(rows: list[dict[str, Any]], dimensions: tuple[str, ...]) -> list[dict[str, Any]]:
    """Rows not dominated by another (<= in every dimension, < in one); smaller is better in each."""
    return [c for c in rows if not any(
        o is not c and all(o[k] <= c[k] for k in dimensions) and any(o[k] < c[k] for k in dimensions) for o in rows)]


def frontier(rows: Sequence[Mapping[str, Any]]) -> tuple[list[str], set[Key]]:
    """The frontier's dimensions and its members among the rankable rows.

    Parameters and graph bytes always; decode latency only when every rankable row has a speed (a
    missing speed must not put a variant on the frontier by default).  Rows without a parameter count
    are left out.
    """
    ok = eligible(rows)
    dims = ["parameters", "graph_bytes"] + (["latency_ms_per_token"] if ok and all(r.get("speed") for r in ok) else [])
    points = [{"key": (r["model"], r["dtype"]), "parameters": r["figures"]["parameters"], "graph_bytes": r["graph_bytes"],
               "latency_ms_per_token": 1000.0 / r["speed"]["decode_tok_s"] if r.get("speed") else None}
              for r in ok if r["figures"].get("parameters") is not None]
    return dims, {p["key"] for p in pareto_frontier(points, tuple(dims))}
