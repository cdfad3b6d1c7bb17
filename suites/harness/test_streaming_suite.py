"""The streaming suite data file loads, and malformed ones are refused naming the field."""

import pytest

from harness.errors import CampaignError
from harness.streaming import suite
from harness.streaming.profile import ProfileError


def test_shipped_suite_loads():
    s = suite.load()
    assert {"ci", "benchmark"} <= set(s.tiers)
    assert all(c in s.cases for t in s.tiers.values() for c in t.cases)
    assert s.cases["heldout"].role == "heldout" and s.cases["long"].must_trim


@pytest.mark.parametrize("text,words", [
    ("schema_version = 2\n", "schema_version 2"),
    ("schema_version = 1\n[profiles.x]\nstartup='hf'\ndelay_ms=80\nbatch=5\ncontext_tokens=64\ntrim_tokens=8\n",
     "batch"),
    ("schema_version = 1\n[cases.c]\nrole='secret'\nseed=1\nwords=2\n", "role"),
    ("schema_version = 1\n[tiers.t]\nmodel='ci'\nprofiles=['nope']\ncases=[]\n[tiers.t.policy]\nmax_rtf=1\n"
     "max_work_p95_token_periods=1\nmax_feeder_lateness_p99_seconds=1\nmax_rss_growth_kib=1\nmax_wer=1\n", "unknown"),
])
def test_bad_suite_is_refused(tmp_path, text, words):
    path = tmp_path / "s.toml"
    path.write_text(text)
    with pytest.raises((CampaignError, ProfileError), match=words):
        suite.load(path)
