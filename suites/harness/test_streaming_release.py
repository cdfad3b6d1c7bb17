"""Held-out streaming cases run only against a SHA-256-pinned release-candidate record; the default campaign pins
none, so it runs dev cases only and its report says so, with what the streaming results are not."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import fmt

from harness import campaign
from harness.errors import ArtifactError, CampaignError
from harness.gates import streaming as streaming_gate
from harness.view import ReceiptView
from harness.streaming import release, scope

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = (ROOT / "campaigns" / "default.toml").read_text().replace(
    'suite = "../harness', f'suite = "{ROOT}/harness')
RECORD = {"candidate": "stream-benchmark", "weights_sha256": "ab" * 32, "approved_by": "release owner"}


def with_streaming(tmp_path, body: str):
    """The default campaign plus a ``[policy.streaming]`` table, loaded from ``tmp_path/c.toml``."""
    path = tmp_path / "c.toml"
    path.write_text(DEFAULT + "\n[policy.streaming]\n" + body + "\n")
    return campaign.load(path).policy["streaming"]


def write_record(tmp_path, data: bytes, name="rc.json") -> tuple[Path, str]:
    path = tmp_path / name
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


def pinned(path, sha) -> str:
    return f'release_candidate_record = "{path}"\nrelease_candidate_record_sha256 = "{sha}"'


def test_the_default_campaign_runs_dev_cases_only(tmp_path):
    policy = campaign.load(ROOT / "campaigns" / "default.toml").policy["streaming"]
    assert policy.release_candidate is None and policy.as_dict()["release_candidate"] is None
    assert release.decide_case("long", "dev", False, None).action == "run"
    skip = release.decide_case("heldout", "heldout", False, policy.release_candidate)
    print(skip.reason)
    assert skip.action == "skip"
    assert skip.reason == ("held-out case heldout not run: dev cases only, no release-candidate record pinned "
                           "([policy.streaming] release_candidate_record and release_candidate_record_sha256 "
                           "are not set)")


def test_the_heldout_flag_without_a_record_is_refused():
    refused = release.decide_case("heldout", "heldout", True, None)
    print(refused.reason)
    assert refused.action == "refuse"
    assert refused.reason.startswith("held-out case heldout refused: --streaming-heldout was given but "
                                     "[policy.streaming] release_candidate_record is not set")


def test_a_pinned_record_loads_and_runs_heldout_only_with_the_flag(tmp_path):
    path, sha = write_record(tmp_path, json.dumps(RECORD, indent=2).encode())
    policy = with_streaming(tmp_path, pinned(path.name, sha))       # relative to the campaign file
    rc = policy.release_candidate
    canonical = json.dumps(RECORD, sort_keys=True, separators=(",", ":")).encode()
    assert rc == release.ReleaseCandidate(str(path), sha, hashlib.sha256(canonical).hexdigest())
    assert policy.as_dict()["release_candidate"] == rc.as_dict()
    no_flag = release.decide_case("heldout", "heldout", False, rc)
    print(no_flag.reason)
    assert no_flag.action == "skip" and "--streaming-heldout was not given" in no_flag.reason
    assert release.decide_case("heldout", "heldout", True, rc).action == "run"
    assert release.reverify(rc) == rc


def test_a_wrong_sha256_names_file_field_and_value(tmp_path):
    path, sha = write_record(tmp_path, json.dumps(RECORD).encode())
    wrong = "0" * 64
    with pytest.raises(CampaignError) as exc:
        with_streaming(tmp_path, pinned(path, wrong))
    print(exc.value)
    assert str(exc.value) == (f"{tmp_path / 'c.toml'}: policy.streaming.release_candidate_record_sha256: {path} has "
                              f"SHA-256 {sha}, the policy pins '{wrong}'")


@pytest.mark.parametrize("data,says", [
    (b"{\"candidate\": ", r"not valid JSON: Expecting"),
    (b"[1, 2]", r"expected a non-empty JSON object, got a JSON list \[1, 2\]"),
    (b"{}", r"expected a non-empty JSON object, got an empty object \{\}"),
    (b"{\"rtf\": NaN}", r"non-finite number NaN"),
    (b"\xff\xfe{}", r"not UTF-8"),
])
def test_a_malformed_record_names_file_field_and_value(tmp_path, data, says):
    path, sha = write_record(tmp_path, data)
    with pytest.raises(CampaignError, match=says) as exc:
        with_streaming(tmp_path, pinned(path, sha))
    print(exc.value)
    assert str(exc.value).startswith(f"{tmp_path / 'c.toml'}: policy.streaming.release_candidate_record: {path}")


@pytest.mark.parametrize("body,says", [
    ('release_candidate_record = "rc.json"',
     r"policy\.streaming\.release_candidate_record_sha256: missing: release_candidate_record = 'rc\.json' is given"),
    (f'release_candidate_record_sha256 = "{"a" * 64}"', r"policy\.streaming\.release_candidate_record: missing"),
    ('release_candidate_record = "rc.json"\nrelease_candidate_record_sha256 = "ABC"',
     r"policy\.streaming\.release_candidate_record_sha256: expected a lowercase hex SHA-256, got 'ABC'"),
    (f'release_candidate_record = "absent.json"\nrelease_candidate_record_sha256 = "{"a" * 64}"',
     r"policy\.streaming\.release_candidate_record: cannot read .*absent\.json: No such file"),
    (f'release_candidate_record = 7\nrelease_candidate_record_sha256 = "{"a" * 64}"',
     r"policy\.streaming\.release_candidate_record: expected a non-empty string, got 7"),
])
def test_an_incomplete_pin_names_the_field(tmp_path, body, says):
    with pytest.raises(CampaignError, match=says) as exc:
        with_streaming(tmp_path, body)
    print(exc.value)


def test_a_record_changed_after_the_campaign_loaded_is_refused(tmp_path):
    path, sha = write_record(tmp_path, json.dumps(RECORD).encode())
    rc = with_streaming(tmp_path, pinned(path, sha)).release_candidate
    path.write_text(json.dumps({**RECORD, "candidate": "another"}))
    with pytest.raises(ArtifactError, match=rf"release-candidate record changed since the campaign loaded: "
                                            rf"{path} has SHA-256 [0-9a-f]{{64}}, the policy pins '{sha}'") as exc:
        release.reverify(rc)
    print(exc.value)


def view(case, outcome, role, candidate=None, reasons=()):
    return ReceiptView({"gate": "streaming", "nodeid": f"suites/test_streaming.py::test_streaming_protocol[{case}]",
                        "verdict": {"outcome": outcome, "reasons": list(reasons)}, "measurements": {},
                        "parameters": {"case": case, "role": role},
                        "policy": {"release_candidate": candidate}})


def test_the_report_says_dev_only_and_what_the_results_are_not():
    skip = release.decide_case("heldout", "heldout", False, None).reason
    text = "\n".join(fmt.markdown_of(streaming_gate.section([view("benchmark-rt80_b1-short", "pass", "dev"),
                                             view("benchmark-rt80_b1-heldout", "skip", "heldout", reasons=[skip])])))
    print(text)
    assert "**Held-out cases: not run.** These results are dev cases only (screening)" in text
    assert f"(skip): no figures — {skip}" in text
    assert "**What these streaming results are not:**" in text
    for _, disclaimer in scope.DISCLAIMERS:
        assert f"- {disclaimer}" in text
    assert "Not an acceptance of any model" in text and "not microphone, speech-onset or aligned word latency" in text


def test_the_report_names_the_release_candidate_a_heldout_case_evaluated():
    rc = {"path": "/rc/rc.json", "sha256": "c" * 64, "canonical_sha256": "d" * 64}
    text = "\n".join(fmt.markdown_of(streaming_gate.section([view("benchmark-rt80_b1-short", "pass", "dev", rc),
                                             view("benchmark-rt80_b1-heldout", "fail", "heldout", rc)])))
    named = f"release candidate `/rc/rc.json` (SHA-256 {'c' * 64})"
    assert f"**Held-out cases: 1 run** as the final evaluation of {named}" in text
    refused = view("benchmark-rt80_b1-heldout", "error", "heldout", None, ["CampaignError: refused"])
    assert "Held-out cases: not run" in "\n".join(fmt.markdown_of(streaming_gate.section([refused])))


def test_the_receipt_scope_says_no_acceptance():
    note = scope.receipt_scope("dev", "dev case short: screening, a voice the model trained on")
    assert note["automatic_acceptance_performed"] is False and note["production_accuracy_approved"] is False
    assert note["microphone_test"] is False and note["evaluation"] == "screening (dev)"
    assert set(note["not"]) == {k for k, _ in scope.DISCLAIMERS}


def _run_heldout(tmp_path, *extra):
    """The real streaming test's held-out cases under the default campaign, in a fresh pytest (a private lock)."""
    run_dir = tmp_path / "run"
    env = {**os.environ, "GATEHOUSE_LOCK_DIR": str(tmp_path / "locks"),
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--run-dir", str(run_dir),
           "suites/test_streaming.py", "-m", "benchmark and streaming", "-k", "heldout", *extra]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    receipts = [json.loads(p.read_text()) for p in sorted((run_dir / "receipts").glob("*.json"))]
    return done, receipts, (run_dir / "report.md").read_text()


def test_the_default_campaign_skips_heldout_cases_and_its_report_says_so(tmp_path):
    done, receipts, report = _run_heldout(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:]
    skip = release.decide_case("heldout", "heldout", False, None).reason
    assert len(receipts) == 3 and all(r["verdict"] == {"outcome": "skip", "reasons": [skip], "decided": None}
                                      for r in receipts)
    assert all(r["parameters"]["role"] == "heldout" and r["policy"]["release_candidate"] is None
               and r["extra"]["scope"]["automatic_acceptance_performed"] is False for r in receipts)
    assert "**Held-out cases: not run.** These results are dev cases only (screening)." in report
    assert "**What these streaming results are not:**" in report


def test_the_heldout_flag_without_a_record_errors_with_the_reason(tmp_path):
    done, receipts, report = _run_heldout(tmp_path, "--streaming-heldout")
    assert done.returncode != 0
    refused = release.decide_case("heldout", "heldout", True, None).reason
    print(receipts[0]["verdict"]["reasons"][0])
    assert len(receipts) == 3 and all(r["verdict"]["outcome"] == "error" and
                                      r["verdict"]["reasons"] == [f"CampaignError: {refused}"] for r in receipts)
    assert "**Held-out cases: not run.**" in report
