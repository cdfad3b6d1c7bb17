"""The report's command line: ``python -m harness.report RUN_DIR [--review FILE]`` (``bin/gatehouse report``).

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
    print(paths["html"])
    import json

    # the report was built from everything readable; the exit status says whether anything was refused
    return 1 if refused_count(json.loads(paths["json"].read_text())) else 0
