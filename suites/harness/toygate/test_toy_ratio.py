"""The toy gate's test: what a gate's test file does (pin what it measured, gather evidence, decide)."""

import os
from pathlib import Path

import pytest


@pytest.mark.gate("toy_ratio")
def test_toy_ratio(variant, gate, policy, receipt):
    art = Path(os.environ["TOY_ARTIFACT"])
    receipt.pin(art, "graph")
    whole = 10 if variant.dtype == "fp32" else 4      # fp32: 3 of 10 passes; q4: 3 of 4 fails at max_ratio 0.5
    verdict = receipt.decide(gate.decide(gate.evidence(part_bytes=3, whole_bytes=whole), policy))
    assert verdict.passed, verdict.render()
