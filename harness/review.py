"""Transcript review records: a person's approval of one exact behavior report, by SHA-256.

A record is a JSON object ``{"reviewer": ..., "approvals": [{"report_sha256": ..., "approved": true,
"notes": ...}, ...]}`` (or one approval with ``reviewer`` inline).  Passed with ``--review FILE`` (or
``bin/gatehouse report RUN_DIR --review FILE``), it is copied into the run directory's ``reviews/``
so later rebuilds keep it; an approval counts only for the behavior report whose bytes it names.  An
approval may also name ``transcripts_sha256``, the transcripts its reviewer read: it then counts only while
the run's transcripts for that report (the receipt's pin, the pinned file, the evidence copy) still have it.

``bin/gatehouse review RUN_DIR VARIANT --by NAME --note TEXT [--reject]`` (``python -m harness.review``)
writes such a record for one variant: it finds the variant's behavior receipt, checks that the candidate's
behavior report and transcripts (the evidence copies, and the pinned files where they still exist) match the
SHA-256 the receipt pinned, prints the transcript counts it approves, writes the record into ``reviews/``
and rebuilds the report.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import re
import shlex
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from . import atomic
from . import jsonfile
from .errors import HarnessError, ReceiptError
from .hashing import sha256_bytes, sha256_file
from .rundir import RunDir

_SHA = re.compile(r"^[0-9a-f]{64}$")
# What the behavior fixture copies into a behavior receipt's evidence for review (fixtures/behavior.py record_pair).
EVIDENCE_REPORT = "candidate-report.json"
EVIDENCE_TRANSCRIPTS = "candidate-transcripts.jsonl"
NO_APPROVAL = "no transcript review record approves this behavior report"
REJECTED = "transcript review rejected by "
TRANSCRIPTS_CHANGED = "the transcripts changed after the review"


def parse(data: Any, source: str) -> list[dict[str, Any]]:
    """The approvals in a review record, each with reviewer, report_sha256, approved, notes and
    transcripts_sha256 (None when the record does not name the transcripts)."""
    if not isinstance(data, dict):
        raise ReceiptError(f"{source}: a review record is a JSON object")
    entries = data.get("approvals", [data] if "report_sha256" in data else None)
    if not isinstance(entries, list) or not entries:
        raise ReceiptError(f"{source}: expected 'approvals' (a non-empty list) or one 'report_sha256'")
    out = []
    for i, e in enumerate(entries):
        where = f"{source}: approvals[{i}]"
        if not isinstance(e, dict):
            raise ReceiptError(f"{where}: expected an object")
        reviewer = e.get("reviewer", data.get("reviewer"))
        if not isinstance(reviewer, str) or not reviewer.strip():
            raise ReceiptError(f"{where}: 'reviewer' must name the person who read the transcripts")
        sha = e.get("report_sha256")
        if not isinstance(sha, str) or not _SHA.match(sha):
            raise ReceiptError(f"{where}: 'report_sha256' must be the 64-hex SHA-256 of a behavior report, got {sha!r}")
        if not isinstance(e.get("approved"), bool):
            raise ReceiptError(f"{where}: 'approved' must be true or false")
        notes = e.get("notes")
        if not isinstance(notes, str) or not notes.strip():
            raise ReceiptError(f"{where}: 'notes' must say what was reviewed")
        tsha = e.get("transcripts_sha256")
        if tsha is not None and (not isinstance(tsha, str) or not _SHA.match(tsha)):
            raise ReceiptError(f"{where}: 'transcripts_sha256' must be the 64-hex SHA-256 of the transcripts read, "
                               f"got {tsha!r}")
        out.append({"reviewer": reviewer, "report_sha256": sha, "approved": e["approved"], "notes": notes,
                    "transcripts_sha256": tsha})
    return out


def load(path: Path | str) -> tuple[bytes, list[dict[str, Any]]]:
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ReceiptError(f"{path}: cannot read the review record: {exc}") from exc
    return raw, parse(jsonfile.loads(raw, str(path)), str(path))


def store(run: RunDir | Path, path: Path | str) -> Path:
    """Copy a validated review record into the run's ``reviews/`` (content-addressed; never overwritten)."""
    raw, _ = load(path)
    return _store_bytes(run, raw)


def _store_bytes(run: RunDir | Path, raw: bytes) -> Path:
    dest = RunDir.of(run).review(sha256_bytes(raw))
    if not dest.exists():
        atomic.write_bytes(dest, raw)
    return dest


def approvals(run: RunDir | Path) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, str]]]:
    """Approvals by report SHA-256 from every stored record, and the records that could not be read."""
    by_sha: dict[str, list[dict[str, Any]]] = {}
    bad = []
    for p in RunDir.of(run).review_files():
        try:
            _, entries = load(p)
        except ReceiptError as exc:
            bad.append({"path": str(p), "error": str(exc)})
            continue
        for e in entries:
            by_sha.setdefault(e["report_sha256"], []).append({**e, "file": p.name})
    return by_sha, bad


def transcripts(run: RunDir | Path, data: Mapping[str, Any], current: Callable[[str], str | None]) -> list[tuple[str, str]]:
    """(where, SHA-256) of each copy the run holds of a behavior receipt's candidate transcripts: the receipt's
    pin (as measured), the pinned file and the evidence copy where they exist (``current(path)``: its SHA-256
    now, or None when it is gone)."""
    out = []
    pin = next((a for a in data["artifacts"] if a["role"] == "transcripts"), None)
    if pin is not None:
        out.append((f"the transcripts pinned in the receipt of {data['nodeid']}", pin["sha256"]))
        now = current(pin["path"])
        if now is not None:
            out.append((pin["path"], now))
    copy = RunDir.of(run).evidence(data["nodeid"]) / EVIDENCE_TRANSCRIPTS
    now = current(str(copy))
    if now is not None:
        out.append((str(copy), now))
    return out


def _transcripts_refusal(e: Mapping[str, Any], copies: Sequence[tuple[str, str]]) -> str | None:
    """Why an approval that names the transcripts its reviewer read no longer counts (None when it does)."""
    want = e.get("transcripts_sha256")
    if not want:
        return None
    who = f"{e['reviewer']}'s approval" + (f" ({e['file']})" if e.get("file") else "")
    if not copies:
        return (f"{who} names transcripts {want[:12]}, but the run holds no transcripts for this behavior report "
                f"to check them against; it does not count")
    for where, sha in copies:
        if sha != want:
            return (f"{TRANSCRIPTS_CHANGED}: {who} read transcripts {want[:12]}, {where} is {sha[:12]}; "
                    f"it does not count")
    return None


def verdict(entries: list[dict[str, Any]] | None,
            transcripts: Sequence[tuple[str, str]] | None = None) -> tuple[bool, str]:
    """(approved, why): approved only when some record approves and none rejects.  With ``transcripts`` (the
    run's copies of the report's transcripts, :func:`transcripts`), an approval that names a transcripts
    SHA-256 counts only when every copy has it."""
    refused: list[str] = []
    if entries and transcripts is not None:
        kept = []
        for e in entries:
            why = _transcripts_refusal(e, transcripts) if e["approved"] else None
            if why:
                refused.append(why)
            else:
                kept.append(e)
        entries = kept
    if not entries:
        return False, "; ".join(refused) if refused else NO_APPROVAL
    if any(not e["approved"] for e in entries):
        who = ", ".join(e["reviewer"] for e in entries if not e["approved"])
        return False, f"{REJECTED}{who}"
    return True, "approved by " + ", ".join(sorted({e["reviewer"] for e in entries})) + \
        ("" if not refused else " (not counted: " + "; ".join(refused) + ")")


# -- bin/gatehouse review ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Candidate:
    """A variant's behavior receipt in a run directory."""

    run: RunDir
    model: str
    dtype: str
    path: Path                  # the receipt file
    data: Mapping[str, Any]     # the receipt

    @property
    def name(self) -> str:
        return f"{self.model}/{self.dtype}"


@dataclass(frozen=True)
class Checked:
    """The candidate's behavior report and transcripts, checked against the receipt's pins."""

    report: Path
    report_sha256: str
    transcripts: Path
    transcripts_sha256: str
    rows: tuple[Mapping[str, Any], ...]


def _run(path: Path | str) -> RunDir:
    run = RunDir.of(path)
    if not run.path.is_dir():
        raise ReceiptError(f"{run.path}: no such run directory")
    if not run.run_file.is_file():
        raise ReceiptError(f"{run.path}: not a Gatehouse run directory (no {run.run_file.name})")
    return run


def _behavior_block(data: Mapping[str, Any]) -> Any:
    return data.get("behavior") if data["schema_version"] >= 2 else (data.get("extra") or {}).get("behavior")


def find(run_dir: RunDir | Path | str, variant: str) -> Candidate:
    """The behavior receipt of ``variant`` (``model/dtype`` or the report's ``model-dtype``) in a run directory:
    the last one in file order that carries a behavior block and pins a behavior report, as the report reads it."""
    from . import receipt as receipts
    from .report.qualify import is_run_level
    from .report.collect import ReceiptView

    run = _run(run_dir)
    files = run.receipt_files()
    if not files:
        raise ReceiptError(f"{run.receipts}: no receipts in this run directory")
    known: dict[tuple[str, str], list[tuple[Path, Mapping[str, Any]]]] = {}
    for p in files:
        try:
            data = receipts.load(p)
        except ReceiptError:
            continue              # the report lists it; it is nobody's behavior receipt
        if is_run_level(ReceiptView(data)):
            continue
        mine = known.setdefault((data["variant"]["model"], data["variant"]["dtype"]), [])
        if isinstance(_behavior_block(data), Mapping) and any(a["role"] == "behavior_report" for a in data["artifacts"]):
            mine.append((p, data))
    matches = [k for k in known if variant in (f"{k[0]}/{k[1]}", f"{k[0]}-{k[1]}")]
    reviewable = sorted(f"{m}/{d}" for (m, d), found in known.items() if found)
    if not matches:
        listed = ", ".join(reviewable) or "none"
        others = sorted(f"{m}/{d}" for (m, d), found in known.items() if not found)
        raise ReceiptError(f"{run.path}: no variant {variant!r} in this run; variants with a behavior receipt: {listed}"
                           + (f" (without one: {', '.join(others)})" if others else ""))
    if len(matches) > 1:
        raise ReceiptError(f"{run.path}: {variant!r} names several variants ({', '.join(f'{m}/{d}' for m, d in matches)}); "
                           f"write MODEL/DTYPE")
    (model, dtype), = matches
    if not known[(model, dtype)]:
        raise ReceiptError(f"{run.path}: variant {model}/{dtype} has no behavior receipt (the behavior gate did not "
                           f"measure it in this run), so there are no transcripts to review; variants with one: "
                           f"{', '.join(reviewable) or 'none'}")
    path, data = known[(model, dtype)][-1]
    return Candidate(run, model, dtype, path, data)


def _pinned_copy(c: Candidate, role: str, evidence_name: str) -> tuple[Path, str]:
    """The file to read for a pinned role (the evidence copy, else the pinned file) and the pinned SHA-256,
    after checking that every copy that exists still has it."""
    pin = next((a for a in c.data["artifacts"] if a["role"] == role), None)
    if pin is None:
        raise ReceiptError(f"{c.path}: the behavior receipt of {c.name} pins no {role.replace('_', ' ')}; "
                           f"rerun the behavior gate to record one")
    copies = [c.run.evidence(c.data["nodeid"]) / evidence_name, Path(pin["path"])]
    present = [p for p in copies if p.is_file()]
    if not present:
        raise ReceiptError(f"{copies[0]}: missing, and so is the pinned {role.replace('_', ' ')} {copies[1]}: "
                           f"nothing of {c.name}'s to review")
    for p in present:
        now = sha256_file(p)
        if now != pin["sha256"]:
            raise ReceiptError(f"{p}: SHA-256 {now} differs from the {role.replace('_', ' ')} {pin['sha256']} "
                               f"pinned in {c.path}: it changed after the behavior gate measured it; refusing to "
                               f"record a review of it (rerun the behavior gate, then review)")
    return present[0], pin["sha256"]


def check(c: Candidate) -> Checked:
    """The candidate's behavior report and transcripts, refused (naming the file) unless they match the pins."""
    report, report_sha = _pinned_copy(c, "behavior_report", EVIDENCE_REPORT)
    tpath, tsha = _pinned_copy(c, "transcripts", EVIDENCE_TRANSCRIPTS)
    body = jsonfile.load(report, "behavior report")
    named = body.get("transcripts") if isinstance(body, dict) else None   # the report pins its transcripts too
    if isinstance(named, dict) and named.get("sha256") not in (None, tsha):
        raise ReceiptError(f"{report}: names transcripts {named['sha256']}, the receipt {c.path} pins {tsha}; "
                           f"refusing to record a review")
    rows = []
    for n, line in enumerate(tpath.read_bytes().split(b"\n"), 1):
        if line.strip():
            row = jsonfile.loads(line, f"{tpath}:{n}")
            if not isinstance(row, dict):
                raise ReceiptError(f"{tpath}:{n}: expected a transcript (a JSON object)")
            rows.append(row)
    if not rows:
        raise ReceiptError(f"{tpath}: no transcripts to review")
    return Checked(report, report_sha, tpath, tsha, tuple(rows))


def counts(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What a reviewer approves: transcripts, distinct cases, transcripts per mode, and per category its cases
    and, per mode, the transcripts and how many the checker passed."""
    modes = Counter(str(r.get("mode", "?")) for r in rows)
    cats: dict[str, dict[str, Any]] = {}
    for r in rows:
        cat = cats.setdefault(str(r.get("category", "?")), {"cases": set(), "modes": {}})
        cat["cases"].add(r.get("case"))
        m = cat["modes"].setdefault(str(r.get("mode", "?")), {"transcripts": 0, "passed": 0})
        m["transcripts"] += 1
        m["passed"] += int(r.get("passed") is True)
    return {"transcripts": len(rows), "cases": len({r.get("case") for r in rows}), "modes": dict(sorted(modes.items())),
            "categories": {k: {"cases": len(v["cases"]), "modes": dict(sorted(v["modes"].items()))}
                           for k, v in sorted(cats.items())}}


def count_lines(summary: Mapping[str, Any]) -> list[str]:
    """The counts as a small table: a line of totals, then per category its cases and passed/transcripts per mode."""
    from .report.summary import aligned

    modes = list(summary["modes"])
    head = (f"{summary['transcripts']} transcripts of {summary['cases']} cases ("
            + ", ".join(f"{m} {n}" for m, n in summary["modes"].items()) + ")")
    rows = [[cat, str(v["cases"]), *(f"{v['modes'][m]['passed']}/{v['modes'][m]['transcripts']}" if m in v["modes"]
                                     else "—" for m in modes)] for cat, v in summary["categories"].items()]
    return [head, *("  " + l for l in aligned(["category", "cases", *(f"{m} passed" for m in modes)], rows,
                                              "lr" + "r" * len(modes)))]


def record(c: Candidate, checked: Checked, by: str, note: str, approved: bool, now: str | None = None) -> dict[str, Any]:
    """The review record (the format :func:`parse` reads) for one variant, with what was reviewed."""
    def rel(p: Path) -> str:
        try:
            return str(p.resolve().relative_to(c.run.path.resolve()))
        except ValueError:
            return str(p)

    return {"kind": "gatehouse.review", "reviewer": by,
            "reviewed_at": now or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "approvals": [{"variant": c.name, "receipt": c.data["nodeid"], "report_sha256": checked.report_sha256,
                           "transcripts_sha256": checked.transcripts_sha256, "approved": approved, "notes": note,
                           "report": rel(checked.report), "transcripts": rel(checked.transcripts),
                           "counts": counts(checked.rows)}]}


def write(run: RunDir | Path, value: Mapping[str, Any]) -> Path:
    """Validate a record and write it atomically into the run's ``reviews/`` (content-addressed, never overwritten)."""
    raw = atomic.dumps(value).encode("utf-8")
    parse(jsonfile.loads(raw, "review record"), "review record")
    return _store_bytes(run, raw)


def command(run_dir: str, variant: str, quoted: bool = True) -> str:
    """The command line that records a review of ``variant`` (model/dtype) in ``run_dir``."""
    q = shlex.quote if quoted else str
    return f"bin/gatehouse review {q(str(run_dir))} {q(variant)} --by NAME --note '...'"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="bin/gatehouse review",
        description="Record a transcript review of one variant's behavior report in a run directory, and "
                    "rebuild its report")
    parser.add_argument("run_dir", metavar="RUN_DIR")
    parser.add_argument("variant", metavar="VARIANT", help="MODEL/DTYPE as the report names it (smollm2-135m/q8; "
                                                          "the report's smollm2-135m-q8 too)")
    parser.add_argument("--by", required=True, metavar="NAME", help="who read the transcripts")
    parser.add_argument("--note", required=True, metavar="TEXT", help="what was read and why it is fine (or not)")
    parser.add_argument("--reject", action="store_true", help="record a rejection instead of an approval")
    args = parser.parse_args(argv)
    if not args.by.strip():
        parser.error("--by must name the person who read the transcripts")
    if not args.note.strip():
        parser.error("--note must say what was reviewed")
    try:
        c = find(args.run_dir, args.variant)
        checked = check(c)
        value = record(c, checked, args.by.strip(), args.note.strip(), not args.reject)
        entry = value["approvals"][0]
        print(f"{c.name} in {c.run.path}")
        print(f"  receipt      {c.path.relative_to(c.run.path)} ({c.data['gate']}: {c.data['verdict']['outcome']})")
        print(f"  report       {entry['report']}  sha256 {checked.report_sha256[:16]}… matches the receipt")
        print(f"  transcripts  {entry['transcripts']}  sha256 {checked.transcripts_sha256[:16]}… matches the receipt")
        print(("Rejecting " if args.reject else "Approving ") + count_lines(entry["counts"])[0])
        print("\n".join(count_lines(entry["counts"])[1:]))
        dest = write(c.run, value)
        print(f"{'rejected' if args.reject else 'approved'} by {value['reviewer']}: {value['approvals'][0]['notes']}")
        print(f"wrote {dest}")
    except HarnessError as exc:
        print(f"gatehouse-review: {exc}", file=sys.stderr)
        return 2
    from .report.assemble import rebuild, summary_line

    try:
        paths = rebuild(c.run)
    except HarnessError as exc:
        print(f"gatehouse-review: the review is recorded ({dest}), but the report was not rebuilt: {exc}", file=sys.stderr)
        return 2
    rep = jsonfile.load(paths["json"], "report")
    print(summary_line(paths["json"]))
    row = next((r for r in rep["variants"] if (r["model"], r["dtype"]) == (c.model, c.dtype)), None)
    if row is not None:
        print(f"{c.name}: {row['status']}" + ("" if row["qualified"] else ": " + "; ".join(row["blockers"])))
    print(paths["md"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
