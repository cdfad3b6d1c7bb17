"""The report's command line: ``python -m harness.report RUN_DIR [--review FILE]`` (``bin/gatehouse report``),
and ``--merge RUN_DIR... [--out DIR]``: the shards of one campaign joined into a new run directory (harness.merge).

Exit status: 0 when every file was read, 1 when the report was built but some receipt, review record or
build-log line was refused (each listed in report.md), 2 when no report could be built (no run record).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import HarnessError
from .assemble import rebuild, refused_count, summary_line


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.report",
                                     description="Rebuild a Gatehouse report from a run directory's receipts")
    parser.add_argument("run_dir", nargs="?")
    parser.add_argument("--review", metavar="FILE", help="a transcript review record to add to the run (JSON)")
    parser.add_argument("--merge", nargs="+", metavar="RUN_DIR",
                        help="join these run directories (the shards of one campaign) into a new one and report it")
    parser.add_argument("--out", metavar="DIR", help="with --merge: the new run directory (default: beside the "
                                                     "first, named <campaign>-merged-<UTC time>)")
    args = parser.parse_args(argv)
    if bool(args.merge) == bool(args.run_dir):
        parser.error("give one RUN_DIR, or --merge RUN_DIR RUN_DIR...")
    try:
        run_dir = Path(args.run_dir) if args.run_dir else None
        if args.merge:
            import datetime as dt

            from ..merge import merge

            first = Path(args.merge[0]).resolve()
            stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
            run_dir = merge(args.merge, Path(args.out) if args.out else first.parent / f"{stamp}-merged").path
            print(f"merged {len(args.merge)} run directories into {run_dir}")
        paths = rebuild(run_dir, args.review)
    except HarnessError as exc:
        print(f"gatehouse-report: {exc}", file=sys.stderr)
        return 2
    print(summary_line(paths["json"]))
    print(paths["md"])
    print(paths["html"])
    import json

    # the report was built from everything readable; the exit status says whether anything was refused
    return 1 if refused_count(json.loads(paths["json"].read_text())) else 0
