"""Transcript review records, the Pareto frontier, the goal ratios and a campaign's behavior policy validation."""

import json

import pytest

from harness import campaign, review
from harness.errors import CampaignError, ReceiptError
from harness.gates.goal_ratios import goal_ratios
from harness.report.rank import pareto_frontier

SHA = "ab" * 32


def test_review_record_forms_and_verdicts(tmp_path):
    one = {"reviewer": "rk", "report_sha256": SHA, "approved": True, "notes": "read all 56 transcripts"}
    many = {"reviewer": "rk", "approvals": [{"report_sha256": SHA, "approved": True, "notes": "ok"},
                                            {"report_sha256": "cd" * 32, "approved": False, "notes": "loops"}]}
    assert review.parse(one, "r.json")[0]["reviewer"] == "rk"
    assert len(review.parse(many, "r.json")) == 2
    p = tmp_path / "r.json"
    p.write_text(json.dumps(many))
    run = tmp_path / "run"
    dest = review.store(run, p)
    assert review.store(run, p) == dest and len(list((run / "reviews").iterdir())) == 1   # content-addressed
    by_sha, bad = review.approvals(run)
    assert not bad
    assert review.verdict(by_sha.get(SHA)) == (True, "approved by rk")
    assert review.verdict(by_sha.get("cd" * 32)) == (False, "transcript review rejected by rk")
    assert review.verdict(None)[0] is False


@pytest.mark.parametrize("bad,msg", [
    ({"report_sha256": "xyz", "reviewer": "a", "approved": True, "notes": "n"}, "64-hex SHA-256"),
    ({"report_sha256": SHA, "approved": True, "notes": "n"}, "'reviewer' must name"),
    ({"report_sha256": SHA, "reviewer": "a", "approved": "yes", "notes": "n"}, "'approved' must be true or false"),
    ({"report_sha256": SHA, "reviewer": "a", "approved": True, "notes": " "}, "'notes' must say"),
    ([], "a review record is a JSON object"),
])
def test_bad_review_records_name_the_file(tmp_path, bad, msg):
    p = tmp_path / "bad-review.json"
    p.write_text(json.dumps(bad))
    with pytest.raises(ReceiptError, match=f"bad-review.json.*{msg}"):
        review.load(p)
    p.write_text("{not json")
    with pytest.raises(ReceiptError, match="bad-review.json: not valid JSON"):
        review.load(p)


def test_pareto_frontier():
    a = {"parameters": 1, "graph_bytes": 10, "latency": 5}
    b = {"parameters": 1, "graph_bytes": 5, "latency": 9}
    c = {"parameters": 1, "graph_bytes": 12, "latency": 6}     # dominated by a
    d = {"parameters": 1, "graph_bytes": 10, "latency": 5}     # equal to a: neither dominates
    front = pareto_frontier([a, b, c, d], ("parameters", "graph_bytes", "latency"))
    assert a in front and b in front and d in front and c not in front


def test_behavior_policy_is_validated(tmp_path):
    text = (campaign.Path(__file__).resolve().parents[2] / "campaigns" / "default.toml").read_text()
    for old, new, msg in [("confidence = 0.95", "confidence = 1.5",
                           r"c.toml: policy.behavior.confidence: must be <= 0.9999, got 1.5"),
                          ("rule = \"paired\"", "rule = \"margins\"", r"c.toml: policy.behavior.rule: .*'margins'"),
                          ("rule = \"paired\"", "rule = \"paired\"\nmargin = 1.5",
                           r"c.toml: policy.behavior.margin: must be <= 1.0, got 1.5"),
                          ('"greedy.format",', '"format",',
                           "c.toml: policy.behavior.minimum: expected metric names like 'greedy.format', got 'format'"),
                          ("agreement_tokens = 8", "agreement_tokens = 0",
                           "c.toml: policy.behavior.agreement_tokens: must be >= 1, got 0")]:
        p = tmp_path / "c.toml"
        p.write_text(text.replace(old, new, 1).replace('suite = "../harness', f'suite = "{campaign.Path(__file__).resolve().parents[2]}/harness'))
        with pytest.raises(CampaignError, match=msg):
            campaign.load(p)


BEHAVIOR_TEST = '''
import os
from pathlib import Path
import pytest
from harness.verdict import Measurement, Verdict

@pytest.mark.gate("behavior")
def test_toy_behavior(variant, receipt):
    rep = Path(os.environ["TOY_REPORT"])
    receipt.pin(rep, "behavior_report")
    receipt.record_behavior({"quality_index": 50.0, "reference_quality_index": 50.0, "categories": ["format"],
                             "rate_counts": {"greedy.format": {"numerator": 1, "denominator": 2}},
                             "reference_rate_counts": {"greedy.format": {"numerator": 1, "denominator": 2}},
                             "timing": {"seconds": 1.0}})
    receipt.measure("quality_index", 50.0, "points/100")
    verdict = receipt.decide(Verdict.from_checks([], {}))
    assert verdict.passed
'''


def _fp32(rep):
    return next(r for r in rep["variants"] if r["dtype"] == "fp32")


def test_review_flow_and_edited_behavior_report(pytester, monkeypatch, tmp_path):
    import re

    root = campaign.Path(__file__).resolve().parents[2]
    from harness.start import without_model

    text = without_model((root / "campaigns" / "default.toml").read_text(), "smollm2-135m")
    text = re.sub(r'\[\[expect\]\]\ngate = "behavior"\n.*?\n\n', "", text, flags=re.S)  # the toy gate always passes
    pytester.makefile(".toml", campaign=text)
    pytester.makepyfile(test_toy=BEHAVIOR_TEST)
    pytester.makeini("[pytest]\nmarkers =\n    gate: g\n    ci: c\n    benchmark: b\n    exclusive: e\n    native: n\n")
    rep = tmp_path / "report.json"
    rep.write_text('{"schema": "toy"}')
    monkeypatch.setenv("TOY_REPORT", str(rep))
    monkeypatch.setenv("GATEHOUSE_LOCK_DIR", str(tmp_path / "locks"))
    run_dir = tmp_path / "run"
    args = ("--campaign", "campaign.toml", "--run-dir", str(run_dir), "-p", "no:randomly")
    assert pytester.runpytest_subprocess(*args).ret == 0
    row = _fp32(json.loads((run_dir / "report.json").read_text()))
    assert any("no transcript review record approves" in b for b in row["blockers"])

    bad = tmp_path / "bad.json"
    bad.write_text('{"reviewer": "x"}')
    res = pytester.runpytest_subprocess(*args, "--review", str(bad))
    assert res.ret != 0 and "bad.json: expected 'approvals'" in res.stderr.str()

    from harness.hashing import sha256_file
    good = tmp_path / "review.json"
    good.write_text(json.dumps({"reviewer": "rk", "report_sha256": sha256_file(rep), "approved": True,
                                "notes": "read every transcript"}))
    assert pytester.runpytest_subprocess(*args, "--review", str(good)).ret == 0
    row = _fp32(json.loads((run_dir / "report.json").read_text()))
    assert row["behavior"]["review"] == {"approved": True, "why": "approved by rk"}
    assert not any("transcript review" in b for b in row["blockers"])
    assert row["blockers"] == ["cache: no receipt (incomplete)", "throughput_native: no receipt (incomplete)",
                              "throughput_browser: no receipt (incomplete)", "CI-tier model: screening only"]

    rep.write_text('{"schema": "toy", "edited": true}')          # edited after it was measured
    from harness import report
    report.rebuild(run_dir)
    out = json.loads((run_dir / "report.json").read_text())
    row = _fp32(out)
    assert row["gates"]["behavior"]["outcome"] == "stale" and out["stale_receipts"]
    assert row["behavior"]["review"]["approved"] is False      # the approval named the old bytes


GOAL = {"vs_ortgenai": 1.0, "vs_llamacpp": 1.3, "probe_vs_ortgenai_within": 0.03, "browser_over_native": 0.5,
        "ort_web_over_transformers_js": 1.0}


def test_goal_ratios_use_passing_variants_and_mark_goals():
    from harness.view import CellFigures, LaneRow

    def lane(dtype, name, short, outcome="pass"):
        return LaneRow("m", dtype, name, "throughput_native", f"t[{dtype}-{name}]", outcome, None,
                       {"short": CellFigures(short, None, 10.0)})
    lanes = [lane("q8", "native-probe", 100.0), lane("q4", "native-probe", 60.0), lane("ort-genai-int4", "ort-genai", 120.0),
             lane("ort-genai-int4", "ort-genai-probe", 121.0), lane("gguf-q4_1", "llama.cpp", 50.0),
             lane("q4", "ort-web", 40.0), lane("q4", "transformers.js", 50.0), lane("fp32", "ort-web", 99.0, "fail")]
    got = {q["ratio"]: q for q in goal_ratios(lanes, {"m": {"q4"}}, {"m": GOAL})}
    fastest = got["fastest passing variant (probe) / ORT-GenAI own loop"]
    assert fastest["value"] == 0.5 and fastest["met"] is False          # q8 did not pass every gate
    assert got["fastest passing variant (probe) / llama.cpp"]["value"] == 1.2
    probe = got["probe on the ORT-GenAI graph / ORT-GenAI own loop"]
    assert probe["within"] == 0.03 and probe["met"] is True
    browser = got["best browser variant (ort-web) / fastest passing native variant (probe)"]
    assert browser["value"] == 40.0 / 60.0 and browser["met"] is True   # the failed fp32 ort-web and q8 not counted
    assert got["ort-web / transformers.js on the q4 graph"]["value"] == 0.8

    untargeted = goal_ratios(lanes, {"m": {"q4"}})                        # no throughput_goal receipt in the run
    assert [q["value"] for q in untargeted] == [q["value"] for q in got.values()]
    assert all(q["met"] is None and q["target"] is None and q["within"] is None for q in untargeted)
