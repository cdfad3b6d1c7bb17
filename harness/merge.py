"""Merging run directories: the N shards of a CI matrix (``--shard K/N``) joined into one run and one report.

``plan(sources)`` is pure over what the run directories hold (their run records and receipts) and refuses,
naming the run directories: a directory that is not a run, runs of different campaigns (SHA-256), receipts
written by different harness sources (SHA-256), and a receipt of the same test in two runs.  ``merge(sources,
out)`` then copies every receipt (validated, written atomically), its evidence, the build log and the review
records into a new run directory and rebuilds the report there; the sources are never changed.

The report groups timings by machine fingerprint (harness.fingerprint.hardware_fingerprint): a merged run of
unlike machines shows each machine's speeds, ratios and speed ranks apart and never a ratio across them.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from . import atomic, jsonfile
from .errors import HarnessError
from .receipt import validate
from .rundir import RunDir


class MergeError(HarnessError):
    pass


@dataclass(frozen=True)
class Source:
    """One run directory as the merge reads it."""

    path: Path
    record: dict[str, Any]
    receipts: dict[str, dict[str, Any]]   # receipt file name -> receipt


def read(path: Path | str) -> Source:
    run = RunDir(Path(path))
    if not run.run_file.exists():
        raise MergeError(f"{run.path}: not a Gatehouse run directory (no {run.run_file.name})")
    record = run.read_record()
    receipts = {}
    for file in run.receipt_files():
        receipts[file.name] = validate(jsonfile.load(file), str(file))
    return Source(run.path, record, receipts)


def _harness_shas(src: Source) -> set[str]:
    return {((r.get("provenance") or {}).get("harness") or {}).get("sha256") for r in src.receipts.values()}


def plan(sources: Sequence[Source]) -> dict[str, Any]:
    """The merged run record, after every check; raises MergeError naming the run directories."""
    if len(sources) < 2:
        raise MergeError(f"--merge needs two or more run directories, got {len(sources)}")
    paths = [str(s.path) for s in sources]
    if len(set(paths)) != len(paths):
        raise MergeError(f"--merge: a run directory is named twice: {', '.join(paths)}")
    campaigns: dict[str, list[str]] = {}
    for s in sources:
        campaigns.setdefault((s.record.get("campaign") or {}).get("sha256"), []).append(str(s.path))
    if len(campaigns) > 1:
        raise MergeError("--merge: the runs are of different campaigns: " + "; ".join(
            f"campaign sha256 {str(sha)[:12]} in {', '.join(dirs)}" for sha, dirs in campaigns.items()))
    harness: dict[str, list[str]] = {}
    for s in sources:
        shas = _harness_shas(s)
        if len(shas) > 1:
            raise MergeError(f"--merge: {s.path} holds receipts of {len(shas)} harness sources "
                             f"({', '.join(sorted(str(x)[:12] for x in shas))}); rerun it with one source before merging")
        for sha in shas:
            harness.setdefault(sha, []).append(str(s.path))
    if len(harness) > 1:
        raise MergeError("--merge: the runs were measured by different harness sources: " + "; ".join(
            f"harness sha256 {str(sha)[:12]} in {', '.join(dirs)}" for sha, dirs in harness.items()))
    _check_shards(sources)
    seen: dict[str, Path] = {}
    for s in sources:
        for name, r in s.receipts.items():
            if name in seen:
                raise MergeError(f"--merge: duplicate receipt for {r['nodeid']}: in {seen[name]} and {s.path} "
                                 f"(shards of one campaign hold each test once)")
            seen[name] = s.path
    first = sources[0].record
    return {"schema_version": 1, "kind": "gatehouse.run", "campaign": first["campaign"],
            "screening": any(s.record.get("screening") for s in sources),
            "merged_from": [{"path": str(s.path), "run_id": s.record.get("run_id"), "shard": s.record.get("shard"),
                             "shard_plan": _shard_plan(s.record),
                             "receipts": len(s.receipts)} for s in sources]}


def _shard_plan(record: dict[str, Any]) -> dict[str, Any] | None:
    """A run's shard plan (a record from before plans were kept: round-robin)."""
    text = record.get("shard")
    if not text:
        return None
    return record.get("shard_plan") or {"n": int(str(text).partition("/")[2]), "split": "round-robin"}


def _describe(plan: dict[str, Any]) -> str:
    split = plan["split"] if plan["split"] != "durations" else f"durations sha256 {str(plan.get('durations_sha256'))[:12]}"
    return f"N={plan['n']} {split}"


def _check_shards(sources: Sequence[Source]) -> None:
    """Shards merge only with shards of one plan (same N, same split), each part once and none missing."""
    plans = {str(s.path): _shard_plan(s.record) for s in sources}
    sharded = [p for p, plan in plans.items() if plan is not None]
    if not sharded:
        return
    if len(sharded) != len(plans):
        raise MergeError("--merge: shards mixed with unsharded runs: " + "; ".join(
            f"{'shard ' + s.record['shard'] if s.record.get('shard') else 'not sharded'} in {s.path}" for s in sources))
    kinds: dict[str, list[str]] = {}
    for p, plan in plans.items():
        kinds.setdefault(_describe(plan), []).append(p)
    if len(kinds) > 1:
        raise MergeError("--merge: the shards were split by different plans (every job of a matrix needs the same "
                         "N and the same --shard-durations): " + "; ".join(
                             f"{kind} in {', '.join(dirs)}" for kind, dirs in kinds.items()))
    n = next(iter(plans.values()))["n"]
    held: dict[int, str] = {}
    for s in sources:
        k = int(str(s.record["shard"]).partition("/")[0])
        if k in held:
            raise MergeError(f"--merge: shard {k}/{n} twice: in {held[k]} and {s.path}")
        held[k] = str(s.path)
    missing = [f"{k}/{n}" for k in range(1, n + 1) if k not in held]
    if missing:
        raise MergeError(f"--merge: shard(s) {', '.join(missing)} missing (merged: " + ", ".join(
            f"{k}/{n} in {held[k]}" for k in sorted(held)) + "); merge when every shard's run directory is here")


def merge(paths: Sequence[Path | str], out: Path | str) -> RunDir:
    """Join the run directories ``paths`` into the new run directory ``out`` (refused if it holds anything)."""
    import datetime as dt

    sources = [read(p) for p in paths]
    record = plan(sources)
    target = RunDir(Path(out))
    if target.path.exists() and any(target.path.iterdir()):
        raise MergeError(f"--out {target.path}: exists and is not empty; the merge writes a new run directory")
    target.path.mkdir(parents=True, exist_ok=True)
    record = {**record, "run_id": target.path.name,
              "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    for s in sources:
        src = RunDir(s.path)
        for name, data in s.receipts.items():
            evidence = src.evidence(data["nodeid"])
            if evidence.is_dir():
                tmp = target.path / "evidence" / f".{evidence.name}.merge"
                shutil.copytree(evidence, tmp)
                tmp.rename(target.evidence(data["nodeid"]))
            atomic.write_json(target.receipt(data["nodeid"]), data)
        for review in src.review_files():
            atomic.write_bytes(target.reviews / review.name, review.read_bytes())
        for log in ("builds", "durations"):
            if getattr(src, log).exists():
                with open(getattr(target, log), "ab") as f:
                    f.write(getattr(src, log).read_bytes())
    atomic.write_json(target.run_file, record)   # last: a merge that stopped early is not a run directory
    return target
