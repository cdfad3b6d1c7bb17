"""The run directory is claimed before anything is written into it, whichever writer comes first."""

from pathlib import Path

from harness import campaign
from harness.session import GatehouseSession

ROOT = Path(__file__).resolve().parents[2]


def test_a_browser_log_first_claims_the_run_directory_for_the_builds_after_it(tmp_path):
    """A session whose first write is the browser log folder (a test asking for the browser before any receipt or
    artifact) makes the run record first, so the next acquisition's build record is taken, not refused as "a
    directory that is not a Gatehouse run and not empty" (seen 2026-12-08 with examples/browser_drift_probe.py)."""
    session = GatehouseSession(campaign.load(ROOT / "campaigns" / "default.toml"), tmp_path / "run",
                               tmp_path / "store", "gw0")
    logs = session.browser_logs()
    assert logs.is_dir() and (tmp_path / "run" / "run.json").is_file()
    assert session.browser_logs() == logs   # again: the same folder, the same record

    def build(out: Path, progress) -> dict:
        (out / "x.txt").write_text("x")
        return {}

    art = session.store.get_or_build("content-key-test", {"x": 1}, {}, [], build, label="a first build")
    assert (art.path / "x.txt").read_text() == "x"
    assert "a first build" in (tmp_path / "run" / "builds.jsonl").read_text()
