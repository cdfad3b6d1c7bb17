"""A window's journal: each finished start block appended as it ends, so a killed window keeps what it measured.

``starts.jsonl`` sits in the window's evidence folder beside ``decision.json`` and ``starts.json``:

* line 1, ``kind = "window"``: the window's identity (the registration, the three starts' labels and configs, the
  workload, graph and clock source, the machine fingerprint, the harness source's SHA-256) and what recomputing
  its verdict needs (the drift policy, the attached behavior verdict, the commit), and whether it resumed;
* one ``kind = "block"`` line per finished start block (one start's repeats ``first`` to ``end`` in every cell):
  its series, wave inputs, greedy ids, raw waves, the machine readings the guard reads (``fingerprint``) and the
  machine sampled during the block (``sampled``), or the lane error that ended the start;
* a ``kind = "decided"`` line when the window is decided.

Each line is serialized first, then written whole, flushed and fsynced before the window goes on; a file whose
last line is unterminated is never appended to.  Reading, a torn last line (a kill mid-write) is ignored and
reported; any other bad line is an error naming the file and line.  :class:`Growing` is one start's record as it
grows: the window builds it from blocks as they are measured, a resumed window from the recorded blocks, and the
report's recomputation (:mod:`harness.winrule.recheck`) from the journal, so all three read one code path.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from .. import atomic, jsonfile
from ..errors import EvidenceError, ReceiptError
from ..hashing import canonical_json
from ..sampler import FIGURES as SAMPLED
from .evidence import ORDER, Start, WaveInput
from .registration import Registration

NAME = "starts.jsonl"
SCHEMA = 1
WINDOW, BLOCK, DECIDED = "window", "block", "decided"


class JournalError(EvidenceError):
    """A journal line is malformed, or an append would extend a torn journal."""


def _safe(value: Any) -> Any:
    """JSON-safe: a non-finite number becomes null (read back as NaN in a series)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_safe(v) for v in value]
    return value


def append(path: Path | str, record: Mapping[str, Any]) -> None:
    """Append ``record`` as one JSON line, fsynced; refuses a file whose last line is unterminated."""
    if not atomic.append_lines(path, (canonical_json(_safe(record)) + "\n").encode("utf-8")):
        raise JournalError(f"{path}: the last line is unterminated; refusing to append to a torn journal")


def identity(registration: Registration, labels: Sequence[str], configs: Sequence[str], context: Mapping[str, Any],
             machine: Mapping[str, Any], equal: Sequence[str], harness_sha256: str | None) -> dict[str, Any]:
    """What must match for recorded starts to be reused: the registration (name, version and every registered
    parameter, the wave schedule's prompts included), the starts' labels and configs, the workload, graph and
    clock source, the machine (its hardware fingerprint and the drift policy's ``equal`` readings) and the
    harness source."""
    return {"registration": registration.as_dict(), "labels": list(labels), "configs": list(configs),
            "context": dict(sorted(context.items())),
            "machine": {"fingerprint": machine.get("fingerprint"), **{k: machine.get(k) for k in sorted(set(equal))}},
            "harness_sha256": harness_sha256}


def header(ident: Mapping[str, Any], *, commit: str | None, drift, behavior=None,
           resumed: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The journal's first line: the window's :func:`identity`, and what recomputing its verdict needs (the commit
    its starts carry, the drift policy, the attached behavior verdict), and what it resumed from."""
    return {"kind": WINDOW, "schema": SCHEMA, "identity": dict(ident), "commit": commit,
            "drift_policy": drift.as_dict(), "behavior": None if behavior is None else behavior.as_dict(),
            "resumed": None if resumed is None else dict(resumed)}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def mismatch(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Each part of two identities that differs, as ``registration.repeats: 5 recorded, 6 now`` (pure)."""
    out = []
    for key in sorted(set(recorded) | set(current)):
        a, b = recorded.get(key), current.get(key)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += [f"{key}.{k}: {_short(a.get(k))} recorded, {_short(b.get(k))} now"
                    for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        elif a != b:
            out.append(f"{key}: {_short(a)} recorded, {_short(b)} now")
    return out


@dataclass(frozen=True)
class Journal:
    """One journal as read: its header, its block lines in order, its decided line, and a torn last line."""

    path: Path
    header: Mapping[str, Any] | None
    blocks: tuple[Mapping[str, Any], ...]
    decided: Mapping[str, Any] | None
    torn: str | None = None


def read(path: Path | str) -> Journal:
    """The journal at ``path``.  A torn last line is ignored and named in ``torn``; any other unreadable line, a
    line of an unknown kind, or a block before the header raises :class:`JournalError` naming the line."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise JournalError(f"{path}: cannot read the journal: {exc.strerror or exc}") from None
    lines = raw.split(b"\n")
    tail = lines.pop()
    torn = (f"{path}:{len(lines) + 1}: a torn last line ({len(tail)} bytes, no newline: the window was stopped "
            f"while writing it) was ignored") if tail else None
    header, blocks, decided = None, [], None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rec = jsonfile.loads(line, f"{path}:{number}")
        except ReceiptError as exc:
            raise JournalError(str(exc)) from None
        kind = rec.get("kind") if isinstance(rec, dict) else None
        if kind == WINDOW and header is None and number == 1:
            header = rec
        elif kind == BLOCK and header is not None and decided is None:
            blocks.append(rec)
        elif kind == DECIDED and header is not None and decided is None:
            decided = rec
        else:
            want = "the window header" if header is None else "a block or the decided line"
            raise JournalError(f"{path}:{number}: expected {want}, got kind {kind!r}")
    return Journal(path, header, tuple(blocks), decided, torn)


def earlier(folder: Path) -> list[Path]:
    """Journals an earlier attempt at the same node left in this run directory: its settled evidence folder and the
    hidden folders of reruns that never wrote a receipt (``RunDir.evidence_for_rerun``: ``.<name>.rerun-<pid>``),
    each with its ``starts*.jsonl``; ``folder`` (this attempt's) is one of those and contributes only journals
    already there."""
    folder = Path(folder)
    name = folder.name[1:].rsplit(".rerun-", 1)[0] if folder.name.startswith(".") and ".rerun-" in folder.name \
        else folder.name
    parent = folder.parent
    folders = [parent / name, *sorted(parent.glob(f".{name}.rerun-*"))]
    return [p for f in folders if f.is_dir() for p in sorted(f.glob("starts*.jsonl"))]


def set_aside(path: Path) -> Path | None:
    """A journal already at ``path`` (a rerun that reused a folder name) is kept under a stamped name."""
    if not path.exists():
        return None
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    kept = path.with_name(f"starts.{stamp}.jsonl")
    path.rename(kept)
    return kept


def block_order(registration: Registration, labels: Sequence[str]) -> list[tuple[str, int, int]]:
    """The order a window measures its blocks in: per look, the three starts (A, B, A) each run its repeats."""
    out, first = [], 0
    for n in registration.looks:
        out += [(label, first, n) for label in labels]
        first = n
    return out


def reusable(journal: Journal, current: Mapping[str, Any]) -> tuple[tuple[Mapping[str, Any], ...], str]:
    """The recorded blocks a resumed window may reuse (the journal's blocks in the window's own order, up to the
    first that is out of order or ended in a lane error), and the sentence saying what was reused or why nothing
    was: another identity (registration, machine, ...) or a window that had finished.  Pure."""
    where, n = journal.path, len(journal.blocks)
    if journal.header is None:
        return (), f"{where} has no window header; nothing reused, the window starts fresh"
    diff = mismatch(journal.header.get("identity") or {}, current)
    if diff:
        return (), (f"{where} was recorded under another registration or machine ({'; '.join(diff[:4])}"
                    f"{'; ...' if len(diff) > 4 else ''}); its {n} start block(s) are kept there and not mixed in; "
                    f"the window starts fresh")
    if journal.decided is not None:
        return (), (f"{where} holds a finished window ({journal.decided.get('verdict')}); a rerun measures anew, "
                    f"the file is kept")
    order = block_order(Registration.from_dict(current["registration"]), current["labels"])
    kept = []
    for want, block in zip(order, journal.blocks):
        if (block.get("label"), block.get("first"), block.get("end")) != want or block.get("error") is not None:
            break
        kept.append(block)
    try:
        starts_of(journal.header, kept)
    except (EvidenceError, KeyError, TypeError, ValueError) as exc:
        return (), f"{where}: a recorded block cannot be read ({exc}); nothing reused, the window starts fresh"
    return tuple(kept), (f"resumed from {where}: {len(kept)} of its {n} start block(s) reused (registration "
                         f"and machine fingerprint match)")


def pooled_samples(samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The worst of each sampled figure over a start's blocks (None when any block lacked it)."""
    out: dict[str, Any] = {}
    for key in SAMPLED:
        values = [s.get(key) for s in samples]
        if not values or None in values:
            out[key] = None
        else:
            out[key] = min(values) if key == "cpu_mhz_min" else max(values)
    out["sampled_seconds"] = round(sum(s.get("duration_s") or 0.0 for s in samples), 3)
    out["samples"] = sum(s.get("samples") or 0 for s in samples)
    out["cpu_mhz_source"] = next((s.get("cpu_mhz_source") for s in samples), None)
    return out


@dataclass
class Growing:
    """One start's record as it grows block by block (measured now, or read back from a journal)."""

    label: str
    role: str
    config: str
    fingerprint: dict[str, Any] = field(default_factory=dict)
    started_utc: str | None = None
    values: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    inputs: dict[str, list[WaveInput]] = field(default_factory=dict)
    outputs: dict[str, list[tuple[int, ...]]] = field(default_factory=dict)
    raw: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    def add(self, block: Mapping[str, Any]) -> None:
        """Extend the start with one block record (see :func:`block_record`)."""
        if not self.samples:
            self.fingerprint, self.started_utc = dict(block["fingerprint"]), block.get("started_utc")
        for cell, metrics in block["values"].items():
            for metric, series in metrics.items():
                self.values.setdefault(cell, {}).setdefault(metric, []).extend(
                    math.nan if v is None else float(v) for v in series)
        for cell, waves in block["inputs"].items():
            self.inputs.setdefault(cell, []).extend(w if isinstance(w, WaveInput) else WaveInput.from_dict(w)
                                                    for w in waves)
        for cell, waves in block["outputs"].items():
            self.outputs.setdefault(cell, []).extend(tuple(ids) for ids in waves)
        self.raw.extend(block["raw"])
        self.samples.append(dict(block["sampled"]))
        self.error = self.error or block.get("error")

    def start(self, registration_key: str, commit: str | None) -> Start:
        return Start(self.label, self.role, registration_key, self.config, self.values, self.inputs,
                     self.fingerprint, self.error is None, self.error, commit, self.outputs,
                     pooled_samples(self.samples))


def block_record(start: Growing, first: int, end: int, block: Mapping[str, Any], seconds: float) -> dict[str, Any]:
    """The journal line of one finished block of ``start``: ``block`` holds what the block measured (``values``,
    ``inputs``, ``outputs``, ``raw``, ``sampled``, ``error``)."""
    return {"kind": BLOCK, "label": start.label, "role": start.role, "config": start.config, "first": first,
            "end": end, "started_utc": start.started_utc, "fingerprint": dict(start.fingerprint),
            "seconds": round(seconds, 3), **block,
            "inputs": {c: [w.as_dict() if isinstance(w, WaveInput) else w for w in ws]
                       for c, ws in block["inputs"].items()},
            "outputs": {c: [list(ids) for ids in ws] for c, ws in block["outputs"].items()}}


def starts_of(header: Mapping[str, Any], blocks: Sequence[Mapping[str, Any]]) -> list[Start]:
    """The window's start records rebuilt from its header and block lines, in A/B/A order (a start with no block
    is left out: the rule then names the missing start)."""
    ident = header["identity"]
    registration = Registration.from_dict(ident["registration"])
    growing = {label: Growing(label, role, config)
               for label, role, config in zip(ident["labels"], ORDER, ident["configs"])}
    for block in blocks:
        if block.get("label") not in growing:
            raise JournalError(f"a block of start {block.get('label')!r}, which the header does not name")
        growing[block["label"]].add(block)
    return [g.start(registration.key, header.get("commit")) for g in growing.values() if g.samples]


__all__ = ["BLOCK", "DECIDED", "Growing", "Journal", "JournalError", "NAME", "WINDOW", "append", "block_order",
           "block_record", "earlier", "header", "identity", "mismatch", "pooled_samples", "read", "reusable", "set_aside",
           "starts_of"]
