"""Sharded runs: ``--shard K/N`` keeps the K-th of N parts of a campaign, split by variant (pure but for
``load_durations``, which reads the durations a split is weighted by).

A CI matrix (or a Kubernetes indexed job) runs the same campaign N times, each with its own ``--shard``; each
job writes its own run directory and ``bin/gatehouse report --merge`` joins them (harness.merge). The unit is
the variant: every gate test of one model variant lands in one shard, so a variant's receipts come from one
machine. A test that compares several variants (the interleaved goal rounds, a win rule's OFF/ON/OFF window)
is one test item, so it is never split; it goes with the variant it is parametrized by. A test with no variant
(a streaming protocol, the suite's own tests) is its own unit.

The split places the distinct units longest first, each on the shard with the least work so far (ties: the
lower shard). Without durations every unit weighs the same and this is round-robin over the sorted units.
With ``--shard-durations`` (a previous run directory, or a durations file written from one by ``python -m
harness.shard``) a unit weighs the seconds its tests took there (the run's ``durations.jsonl``: set-up, call
and teardown of every test, receipt or not; a run from before it: its receipts' seconds); a unit the durations
do not know (a new variant) weighs their median. The N shards together hold each unit exactly once as long as
every job collects the same tests (same campaign, same ``-m``/``-k``) and uses the same durations; the run record keeps the plan
(``shard``, ``shard_plan``) and the merge refuses shards of different plans.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from .errors import HarnessError

DURATIONS_KIND = "gatehouse.shard-durations"
UNIT = "gatehouse_unit"   # a report attribute: the test's unit, for the run's durations.jsonl
EXCLUSIVE = "gatehouse_exclusive"   # a report attribute: whether the test held the machine lock exclusively (ditto)


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


def receipt_unit(receipt: Mapping[str, Any]) -> str:
    """The unit of a recorded receipt (its variant block names the model and dtype the variant id is made of)."""
    v = receipt.get("variant") or {}
    return unit(receipt["nodeid"], f"{v['model']}-{v['dtype']}" if v.get("model") and v.get("dtype") else None)


def timed(lines: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Seconds per unit from a run's ``durations.jsonl`` lines (every test, its setup, call and teardown; a test
    run twice, as by ``--lf``, counts its last line)."""
    last: dict[str, Mapping[str, Any]] = {}
    for line in lines:
        last[line["nodeid"]] = line
    out: dict[str, float] = {}
    for line in last.values():
        out[line["unit"]] = round(out.get(line["unit"], 0.0) + float(line["seconds"]), 3)
    return dict(sorted(out.items()))


def durations(receipts: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Seconds per unit from receipts alone (a run from before ``durations.jsonl``): the sum of their
    ``timing.duration_s`` by unit. It misses fixture set-up and the tests that write no receipt."""
    out: dict[str, float] = {}
    for r in receipts:
        u = receipt_unit(r)
        out[u] = round(out.get(u, 0.0) + float((r.get("timing") or {}).get("duration_s") or 0.0), 3)
    return dict(sorted(out.items()))


def _weigher(units: Iterable[str], weights: Mapping[str, float] | None):
    """A unit's weight: its recorded seconds, else the median of the known units' (1.0 when none is known)."""
    known = [weights[u] for u in units if weights and u in weights]
    default = statistics.median(known) if known else 1.0
    return lambda u: float(weights[u]) if weights and u in weights else default


def assign(units: Iterable[str], n: int, weights: Mapping[str, float] | None = None) -> dict[str, int]:
    """Each distinct unit -> its shard (1..n): longest first onto the least-loaded shard (ties: the lower one).
    Equal weights (``weights`` None) make it round-robin over the sorted units."""
    distinct = sorted(set(units))
    weight = _weigher(distinct, weights)
    loads_ = [0.0] * n
    out: dict[str, int] = {}
    for u in sorted(distinct, key=lambda u: (-weight(u), u)):
        k = min(range(n), key=lambda i: (loads_[i], i))
        out[u] = k + 1
        loads_[k] += weight(u)
    return out


def loads(shard_of: Mapping[str, int], n: int, weights: Mapping[str, float]) -> list[float]:
    """Each shard's seconds under the assignment ``shard_of``, units weighed by ``weights`` (unknown: the median)."""
    weight = _weigher(shard_of, weights)
    out = [0.0] * n
    for u, k in shard_of.items():
        out[k - 1] += weight(u)
    return out


def select(units: list[str], k: int, n: int, weights: Mapping[str, float] | None = None) -> list[bool]:
    """For each test's unit (in collection order), whether shard ``k`` of ``n`` keeps it."""
    shard_of = assign(units, n, weights)
    return [shard_of[u] == k for u in units]


@dataclass(frozen=True)
class Plan:
    """One job's shard: K of N, and the durations the split is weighted by (none: round-robin)."""

    k: int
    n: int
    weights: dict[str, float] | None = field(default=None, compare=False)
    source: str | None = None            # the durations' file or run directory, as given
    sha256: str | None = None            # of the durations (canonical JSON), so that jobs can be compared

    @property
    def text(self) -> str:
        return f"{self.k}/{self.n}"

    def record(self) -> dict[str, Any]:
        """The run record's ``shard_plan``: the merge refuses shards whose plans differ."""
        if self.weights is None:
            return {"n": self.n, "split": "round-robin"}
        return {"n": self.n, "split": "durations", "durations": self.source, "durations_sha256": self.sha256}

    def select(self, units: list[str]) -> list[bool]:
        return select(units, self.k, self.n, self.weights)


def digest(weights: Mapping[str, float]) -> str:
    return hashlib.sha256(json.dumps(dict(sorted(weights.items())), sort_keys=True,
                                     separators=(",", ":")).encode()).hexdigest()


def durations_document(run_path: Path | str, weights: Mapping[str, float]) -> dict[str, Any]:
    return {"kind": DURATIONS_KIND, "schema_version": 1, "from_run": str(run_path), "units": dict(sorted(weights.items()))}


def check_durations(doc: Any, where: str) -> dict[str, float]:
    """A durations file's ``units`` after checking every field; refusals name the file, the field and the value."""
    if not isinstance(doc, dict) or doc.get("kind") != DURATIONS_KIND:
        got = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
        raise ShardError(f"{where}: field 'kind': expected {DURATIONS_KIND!r}, got {got!r} "
                         f"(write one with: python -m harness.shard RUN_DIR --out FILE)")
    units = doc.get("units")
    if not isinstance(units, dict) or not units:
        raise ShardError(f"{where}: field 'units': expected a non-empty table of unit -> seconds, got {units!r}")
    out: dict[str, float] = {}
    for u, s in units.items():
        if not (u.startswith("variant:") or u.startswith("test:")) or len(u.partition(":")[2]) == 0:
            raise ShardError(f"{where}: field 'units': key {u!r} is not a unit ('variant:<model>-<dtype>' or 'test:<nodeid>')")
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not s >= 0 or s == float("inf"):
            raise ShardError(f"{where}: field 'units.{u}': expected seconds (a finite number >= 0), got {s!r}")
        out[u] = float(s)
    return out


def load_durations(path: Path | str) -> tuple[dict[str, float], str]:
    """(weights, their sha256) from a run directory's receipts or a durations file."""
    from . import jsonfile
    from .receipt import validate
    from .rundir import RunDir

    p = Path(path)
    if p.is_dir():
        run = RunDir(p)
        if not run.run_file.exists():
            raise ShardError(f"--shard-durations {p}: not a Gatehouse run directory (no {run.run_file.name}) "
                             f"and not a durations file")
        if run.durations.exists():
            try:
                weights = timed(json.loads(line) for line in run.durations.read_text().splitlines() if line.strip())
            except (ValueError, KeyError, TypeError) as exc:
                raise ShardError(f"--shard-durations {run.durations}: a line is not a test's duration: {exc}") from None
        else:
            weights = durations(validate(jsonfile.load(f), str(f)) for f in run.receipt_files())
        if not weights:
            raise ShardError(f"--shard-durations {p}: the run holds no receipts to weigh the split by")
    elif p.is_file():
        try:
            doc = json.loads(p.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ShardError(f"--shard-durations {p}: not JSON: {exc}") from None
        weights = check_durations(doc, f"--shard-durations {p}")
    else:
        raise ShardError(f"--shard-durations {p}: no such file or run directory")
    return weights, digest(weights)


def _span(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 600 else f"{seconds / 60:.1f} min"


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.shard RUN_DIR [--out FILE] [--shards N]``: a durations file from a run (stdout, or
    FILE written atomically); with ``--shards`` also each shard's expected seconds on stderr."""
    import argparse
    import sys

    from . import atomic

    ap = argparse.ArgumentParser(prog="python -m harness.shard", description=main.__doc__)
    ap.add_argument("run_dir")
    ap.add_argument("--out", default=None)
    ap.add_argument("--shards", type=int, default=None)
    ns = ap.parse_args(argv)
    try:
        if not Path(ns.run_dir).is_dir():
            raise ShardError(f"{ns.run_dir}: not a run directory")
        weights, _ = load_durations(ns.run_dir)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    doc = durations_document(Path(ns.run_dir).resolve(), weights)
    if ns.out:
        atomic.write_json(ns.out, doc)
    else:
        print(json.dumps(doc, indent=2, sort_keys=True))
    if ns.shards:
        for label, by in (("by these durations", weights), ("round-robin", None)):
            each = loads(assign(weights, ns.shards, by), ns.shards, weights)
            print(f"{ns.shards} shards {label}: the longest {_span(max(each))} "
                  f"({', '.join(_span(x) for x in each)})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
