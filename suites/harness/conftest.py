"""Fixtures of the suite's own tests: a pytester sandbox with a Gatehouse campaign and toy gates."""

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARKERS = "[pytest]\nmarkers =\n    gate: g\n    ci: c\n    benchmark: b\n    exclusive: e\n    native: n\n    slow: s\n    standalone: a\n"


@pytest.fixture
def gate_sandbox(pytester, monkeypatch, tmp_path):
    """``gate_sandbox(gate_test, conftest)``: a pytester directory with the default campaign's CI model only,
    the toy gates' declarations (``conftest``), their tests, a private machine lock, and this checkout's
    harness first on the path of every pytest it starts."""
    def make(gate_test: str, conftest: str):
        from harness.start import without_model

        campaign = without_model((ROOT / "campaigns" / "default.toml").read_text(), "smollm2-135m")
        pytester.makefile(".toml", campaign=campaign)
        pytester.makepyfile(test_toy=gate_test)
        pytester.makeconftest(conftest)
        pytester.makeini(MARKERS)
        monkeypatch.setenv("GATEHOUSE_LOCK_DIR", str(tmp_path / "locks"))
        monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        return pytester
    return make


@pytest.fixture
def toy_sandbox(gate_sandbox, monkeypatch, tmp_path):
    """``toy_sandbox(gate_test, conftest)``: a :func:`gate_sandbox` whose toy gate pins a small file
    (``$TOY_ARTIFACT``, also ``pytester.art``)."""
    def make(gate_test: str, conftest: str):
        pytester = gate_sandbox(gate_test, conftest)
        art = tmp_path / "graph.onnx"
        art.write_bytes(b"graph-bytes")
        monkeypatch.setenv("TOY_ARTIFACT", str(art))
        pytester.art = art
        return pytester
    return make
