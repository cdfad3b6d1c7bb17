"""``python -m harness.compare BASE_RUN NEW_RUN`` (``bin/gatehouse compare``): what changed between two runs.

``--base RUN --base RUN2 ... --new RUN3 ...`` compares several sessions per side: throughput pools their
repeats and measures how far sessions of the same side land apart (harness.compare.throughput.session_guard).

Prints the comparison's Markdown (or, with ``--markdown FILE`` / ``--html FILE``, a short summary and the
files written).  The policy is the new run's campaign's ``[compare]`` table (the campaign file its
``run.json`` names, or ``--campaign FILE``; the defaults when the file is gone), overridden by ``--fail-on``,
``--alpha`` and ``--min-samples``.

Exit status: 0 when no fail-on threshold was crossed, 1 when one was (each listed, with what crossed it),
2 when the input is unusable (a run directory or its run.json missing or unreadable, a bad option value, a
bad ``[compare]`` table), with an error naming the path or the option and the value.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import fields
from ..errors import HarnessError
from ..fields import Where

PROG = "gatehouse compare"


def _where(option: str) -> Where:
    return Where("command line", option)


def _number(option: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise _where(option).fail(f"expected a number, got {text!r}") from None


def _integer(option: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise _where(option).fail(f"expected an integer, got {text!r}") from None


def _run(path: str):
    """A run directory as the report reads it; a missing directory or run record is an error naming it."""
    from ..errors import ReceiptError
    from .. import gates
    from ..report.collect import collect

    p = Path(path)
    if not p.is_dir():
        raise ReceiptError(f"{p}: no such run directory")
    return collect(p, gates.table_figures())


def policy_for(args, new_record) -> tuple[object, list[str]]:
    """The comparison's policy, and what the header should say of where it came from."""
    from .. import campaign
    from .policy import ComparePolicy, alpha, min_samples, parse_fail_on

    notes = []
    if args.campaign is not None:
        base = campaign.compare_policy(args.campaign)
        notes.append(f"policy: [compare] of {args.campaign} (--campaign)")
    else:
        recorded = (new_record.get("campaign") or {})
        path = recorded.get("path")
        if path and Path(path).is_file():
            from ..hashing import sha256_file

            base = campaign.compare_policy(path)
            changed = recorded.get("sha256") and sha256_file(Path(path)) != recorded.get("sha256")
            notes.append(f"policy: [compare] of {path}, the new run's campaign"
                         + (" (the file changed since the run; read as it is now)" if changed else ""))
        else:
            base = ComparePolicy()
            notes.append(f"policy: the defaults (the new run's campaign file {path or '(unrecorded)'} is not there)")
    override = {}
    if args.alpha is not None:
        override["alpha"] = alpha(_where("--alpha"), _number("--alpha", args.alpha))
    if args.min_samples is not None:
        override["min_samples"] = min_samples(_where("--min-samples"), _integer("--min-samples", args.min_samples))
    if args.fail_on is not None:
        override["fail_on"] = parse_fail_on(_where("--fail-on"), args.fail_on)
    if args.max_foreign_cpu is not None:
        override["max_foreign_cpu"] = fields.number(_where("--max-foreign-cpu"),
                                                    _number("--max-foreign-cpu", args.max_foreign_cpu), 0.0, 1.0)
    if args.session_spread is not None:
        override["session_spread"] = fields.number(_where("--session-spread"),
                                                   _number("--session-spread", args.session_spread), 0.0, 10.0)
    if override:
        notes.append("command line: " + ", ".join(f"--{k.replace('_', '-')}" for k in override))
    return base.override(**override), notes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description="What changed between two Gatehouse runs: verdicts that "
                                     "flipped, quality figures, and throughput with a rank test (exit 1 when a fail-on "
                                     "threshold is crossed)")
    parser.add_argument("runs", metavar="RUN", nargs="*", help="BASE_RUN NEW_RUN (or give --base and --new)")
    parser.add_argument("--base", action="append", metavar="RUN", help="a base run; repeat for several sessions of the "
                        "base code (their spread is then measured instead of assumed)")
    parser.add_argument("--new", action="append", metavar="RUN", help="a new run; repeat for several sessions")
    parser.add_argument("--fail-on", action="append", metavar="SPEC",
                        help="thresholds, comma-separated or repeated: verdict, decode:N%%, loss:N%%, quality:N, or none "
                             "(replaces the campaign's [compare] fail_on; default verdict,decode:5%%)")
    parser.add_argument("--alpha", metavar="A", help="family-wise significance level after Holm's correction (default 0.01)")
    parser.add_argument("--min-samples", metavar="N", help="per-repeat samples per side below which no test is made (default 5)")
    parser.add_argument("--session-spread", metavar="F", help="with one run per side, the session-to-session spread "
                        "a decode change must exceed (a fraction; default the campaign's, else 0.30)")
    parser.add_argument("--max-foreign-cpu", metavar="F", help="the share of CPU other processes may take during a "
                        "lane's timing for it to be tested (a fraction; default 0.10)")
    parser.add_argument("--campaign", metavar="FILE", help="read [compare] from this campaign file instead of the new run's")
    parser.add_argument("--markdown", metavar="FILE", help="write the Markdown here (stdout gets a summary)")
    parser.add_argument("--html", metavar="FILE", help="write the comparison as an HTML page here")
    args = parser.parse_args(argv)

    from . import render
    from .rule import compare

    if args.base or args.new:
        if args.runs or not (args.base and args.new):
            parser.error("give BASE_RUN NEW_RUN, or --base RUN ... and --new RUN ..., not both")
        base_paths, new_paths = args.base, args.new
    elif len(args.runs) == 2:
        base_paths, new_paths = [args.runs[0]], [args.runs[1]]
    else:
        parser.error(f"expected BASE_RUN NEW_RUN, got {len(args.runs)} run(s)")
    try:
        base, new = [_run(p) for p in base_paths], [_run(p) for p in new_paths]
        policy, sources = policy_for(args, new[0].record)
        result = compare(base, new, policy)
    except HarnessError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    result = _with_notes(result, sources)
    text = render.markdown(result)
    written = []
    try:
        if args.markdown:
            Path(args.markdown).write_text(text, encoding="utf-8")
            written.append(args.markdown)
        if args.html:
            Path(args.html).write_text(render.html(result), encoding="utf-8")
            written.append(args.html)
    except OSError as exc:
        print(f"{PROG}: cannot write {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    if written:
        print(render.summary(result))
        for path in written:
            print(path)
    else:
        sys.stdout.write(text)
        print(render.summary(result), file=sys.stderr)
    return 1 if result.failed else 0


def _with_notes(result, notes):
    import dataclasses

    return dataclasses.replace(result, notes=tuple(notes) + result.notes)
