"""How full a behavior evaluation's groups are (docs/measurements.md, "Issue 32: what a behavior evaluation's batch
can still gain"): the campaign's suite as the behavior gate renders it for a model (``Behavior.suite``), grouped as
the evaluation groups it (``evaluate.batches``: one prompt length a group, at most PROBE_BATCH cases).

Usage (in the checkout; builds the model's HF directory when the store lacks it):
    PROBE_BATCH=16 .venv/bin/pytest examples/behavior_groups.py -m benchmark -p no:xdist -s

PROBE_MODEL (default smollm2-135m), PROBE_BATCH (default: the campaign's ``[policy.behavior] batch``).
Prints one JSON line.
"""

import collections
import json
import os

import pytest

from harness.behavior import evaluate


@pytest.mark.benchmark
def test_how_full_the_groups_are(campaign, behavior):
    spec = next(m for m in campaign.models if m.id == os.environ.get("PROBE_MODEL", "smollm2-135m"))
    batch = int(os.environ.get("PROBE_BATCH") or behavior.batch(None))
    cases = behavior.suite(spec).cases
    sizes = [len(g) for g in evaluate.batches(cases, batch)]
    lengths = [len(c.prompt_ids) for c in cases]
    print(json.dumps({"model": spec.id, "cases": len(cases), "prompt_lengths": len(set(lengths)),
                      "shortest": min(lengths), "longest": max(lengths), "batch": batch, "groups": len(sizes),
                      "mean_cases": round(sum(sizes) / len(sizes), 2), "full": sizes.count(batch),
                      "fewest_possible": -(-len(cases) // batch),
                      "sizes": sorted(collections.Counter(sizes).items())}))
