"""Whether the ort-web lane slows down within one page: the long cell's repeats in one page, then in a fresh page.

Seen 2026-12-08 on SmolLM2 fp32 (docs/measurements.md, "Issue 32: the browser profiles in one warm page"): in two of
three runs of the browser gate the long cell's rate fell from about 13-14 to 9.4-11 tok/s over its 15 repeats, so
its CV crossed the 5 % limit and the lane took every repeat it may. This times PROBE_REPEATS repeats of the long cell
in one page (after the lane's warm-up), then 5 in a fresh page, and prints each repeat's decode rate. Its first
run (30 repeats) found no slowing page: 9.7-10.4 tok/s at first, 11.4-13.6 after repeat 21, 11.2-13.1 in the fresh
page, so the earlier fall was the machine's, not the page's.

Usage (in the checkout; builds the model's export when the store lacks it):
    PROBE_REPEATS=30 .venv/bin/pytest examples/browser_drift_probe.py -m benchmark -p no:xdist -s

PROBE_MODEL (default smollm2-135m), PROBE_DTYPE (default fp32), PROBE_REPEATS (default 30). Prints one JSON line.
"""

import json
import os

import pytest

from harness.browser import lane
from harness.domain import Variant


def rates(evidence: dict, cell: str) -> list[float]:
    """Each measured repeat's decode rate, as the lane recorded it (its figures beside each repeat's raw record)."""
    return [round(r["decode_tok_s"], 2) for r in evidence["raw"][cell] if not r["warmup"]]


@pytest.mark.benchmark
def test_the_long_cell_in_one_page_and_in_a_fresh_one(campaign, models, web_server, chromium, browser_target):
    spec = next(m for m in campaign.models if m.id == os.environ.get("PROBE_MODEL", "smollm2-135m"))
    variant = Variant(spec, os.environ.get("PROBE_DTYPE", "fp32"))
    work = models.workload(spec)
    target, _ = browser_target(variant)
    n = int(os.environ.get("PROBE_REPEATS", "30"))
    one = lane.run(chromium, web_server, "ort-web", target, work, cells=("long",), repeats=n, max_repeats=n)
    fresh = lane.run(chromium, web_server, "ort-web", target, work, cells=("long",), repeats=5, max_repeats=5)
    print(json.dumps({"model": spec.id, "dtype": variant.dtype, "one_page": rates(one, "long"),
                      "fresh_page": rates(fresh, "long")}))
