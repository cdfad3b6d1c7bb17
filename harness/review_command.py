"""``bin/gatehouse review RUN_DIR VARIANT --by NAME --note TEXT [--reject]`` (``python -m harness.review_command``):
find the variant's behavior receipt, check that the candidate's behavior report and transcripts (the evidence
copies, and the pinned files where they still exist) match the SHA-256 the receipt pinned, print the transcript
counts approved, write the record into ``reviews/`` (:mod:`harness.review`) and rebuild the report.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from . import atomic, jsonfile, receipt as receipts
from .errors import HarnessError, ReceiptError
from .hashing import sha256_file
from .report.assemble import rebuild, summary_line
from .report.qualify import is_run_level
from .report.summary import aligned
from .review import EVIDENCE_REPORT, EVIDENCE_TRANSCRIPTS, _store_bytes, parse
from .rundir import RunDir
from .view import ReceiptView

# -- the command ----------------------------------------------------------------------------
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
