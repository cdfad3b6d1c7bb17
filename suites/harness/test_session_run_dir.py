"""The run directory takes the run's own logs written before its record, whichever writer comes first."""

from pathlib import Path

import pytest

from harness import campaign
from harness.errors import ReceiptError
from harness.session import GatehouseSession

ROOT = Path(__file__).resolve().parents[2]


def test_a_browser_log_first_leaves_the_run_directory_to_the_builds_after_it(tmp_path):
    """A session whose first write is the browser log folder (a test asking for the browser before any receipt or
    artifact: the ``browser_logs`` fixture) keeps its run directory: the next acquisition's build record makes the run
    record and is taken, not refused as "not a Gatehouse run directory and not empty" (seen 2026-12-08 with
    examples/browser_drift_probe.py). The progress logs of an xdist worker were already taken so."""
    session = GatehouseSession(campaign.load(ROOT / "campaigns" / "default.toml"), tmp_path / "run",
                               tmp_path / "store", "gw0")
    logs = session.run_dir.browser_logs
    logs.mkdir(parents=True)   # what the browser_logs fixture does, before anything else of the run
    (logs / "server-gw0.log").write_text("started\n")

    def build(out: Path, progress) -> dict:
        (out / "x.txt").write_text("x")
        return {}

    art = session.store.get_or_build("content-key-test", {"x": 1}, {}, [], build, label="a first build")
    assert (art.path / "x.txt").read_text() == "x"
    assert logs.is_dir() and (tmp_path / "run" / "run.json").is_file()
    assert "a first build" in (tmp_path / "run" / "builds.jsonl").read_text()


def test_anything_else_before_the_record_is_still_refused(tmp_path):
    """Only the run's own logs may precede its record: a directory holding anything else is not taken over."""
    session = GatehouseSession(campaign.load(ROOT / "campaigns" / "default.toml"), tmp_path / "run",
                               tmp_path / "store", "gw0")
    session.run_dir.browser_logs.mkdir(parents=True)
    (tmp_path / "run" / "notes.txt").write_text("someone else's")
    with pytest.raises(ReceiptError, match="not a Gatehouse run directory .* and not empty"):
        session.run_record()
