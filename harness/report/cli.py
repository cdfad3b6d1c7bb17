"""The report's command line: ``python -m harness.report RUN_DIR [--review FILE]`` (``bin/gatehouse report``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import HarnessError
from .assemble import rebuild, summary_line


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.report",
                                     description="Rebuild a Gatehouse report from a run directory's receipts")
    parser.add_argument("run_dir")
    parser.add_argument("--review", metavar="FILE", help="a transcript review record to add to the run (JSON)")
    args = parser.parse_args(argv)
    try:
        paths = rebuild(Path(args.run_dir), args.review)
    except HarnessError as exc:
        print(f"gatehouse-report: {exc}", file=sys.stderr)
        return 2
    print(summary_line(paths["json"]))
    print(paths["md"])
    return 0
