"""``bin/gatehouse review RUN_DIR VARIANT`` (``python -m harness.review_command``): a variant's behavior report and
transcripts checked against its receipt, the counts approved, the review record written into ``reviews/`` and
the report rebuilt; the report's refusal of an approval whose transcripts changed; and what the report and the
terminal say stands between a variant that passed every gate and "qualified".

The run directories are built from receipts as the plugin writes them: the other gates' receipts from the report
tests' factory, the behavior receipt through :class:`harness.receipt.Receipt` with the behavior fixture's own
``record_pair`` (the pins and the evidence copies a reviewer reads)."""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from fixtures.behavior import Behavior
from harness import receipt as receipts, review, review_command
from harness.errors import ReceiptError
from harness.hashing import sha256_file
from harness.receipt import Receipt
from harness.report import assemble, summary
from harness.rundir import RunDir
from harness.verdict import Measurement, Verdict
from test_report_collect import SHA, make_receipt, variant_views

ROOT = Path(__file__).resolve().parents[2]
CASES = [("fmt-json", "format"), ("fmt-list", "format"), ("add-2", "arithmetic")]


def _rows(dtype: str) -> list[dict]:
    """Transcript rows as harness.behavior.evaluate writes them: every case in both modes."""
    out = []
    for mode in ("greedy", "sampled"):
        for i, (case, category) in enumerate(CASES):
            passed = not (mode == "sampled" and case == "fmt-list")
            out.append({"mode": mode, "case": case, "category": category, "checker": "contains", "checker_version": 1,
                        "expected": "x", "prompt": f"{case}?", "prompt_ids": [1, 2, i], "max_new_tokens": 8,
                        "output_ids": [5, 6], "output_text": f"{dtype} says x", "stopped": True, "passed": passed,
                        "flags": {"repetition": False, "empty": False, "garbage": False, "budget_exhausted": False}})
    return out


def _evaluation(folder: Path, dtype: str) -> SimpleNamespace:
    """A behavior evaluation artifact (report.json pinning transcripts.jsonl), as the store holds one."""
    folder.mkdir(parents=True)
    t = folder / "transcripts.jsonl"
    t.write_text("".join(json.dumps(r) + "\n" for r in _rows(dtype)))
    (folder / "report.json").write_text(json.dumps({
        "schema": "gatehouse-behavior-report-v1", "status": "complete", "categories": ["format", "arithmetic"],
        "transcripts": {"file": t.name, "sha256": sha256_file(t), "rows": len(CASES) * 2}}, indent=1))
    return SimpleNamespace(path=folder)


def _behavior_receipt(run: RunDir, art: Path, model: str, dtype: str, tier: str, provenance: dict, screening: bool):
    nodeid = f"suites/test_behavior.py::test_behavior_parity[{model}-{dtype}]"
    r = Receipt(nodeid, "behavior", {"model": model, "dtype": dtype, "tier": tier}, run.evidence(nodeid))
    r.evidence_dir.mkdir(parents=True, exist_ok=True)
    r.pin(art / f"{model}-{dtype}.onnx", "graph")
    cand, ref = _evaluation(art / f"eval-{dtype}", dtype), _evaluation(art / f"eval-{dtype}-ref", "fp32")
    Behavior.record_pair(r, cand, ref)
    counts = {"greedy.format": {"numerator": 2, "denominator": 2}, "greedy.arithmetic": {"numerator": 1, "denominator": 1}}
    r.record_behavior({"quality_index": 100.0, "reference_quality_index": 100.0, "categories": ["format", "arithmetic"],
                       "rate_counts": counts, "reference_rate_counts": counts, "timing": {"seconds": 2.0, "modes": {}}})
    r.decide(Verdict.from_checks([], {"quality_index": Measurement(100.0, "points/100")}))
    return r.to_dict(outcome="pass", reasons=[], provenance=provenance,
                     run={"run_id": "run", "screening": screening, "worker": "main"})


def build_run(tmp_path: Path, dtypes=("fp32", "q4"), *, tier="benchmark", screening=False, model="m") -> RunDir:
    """A run directory whose variants passed every gate, their behavior reports not yet reviewed."""
    art = tmp_path / "artifacts"
    art.mkdir(parents=True, exist_ok=True)
    run = RunDir(tmp_path / "run")
    run.ensure({"name": "toy", "path": "toy.toml", "sha256": SHA, "screening": screening}, screening)
    provenance = make_receipt("cache", screening=screening)["provenance"]
    for dtype in dtypes:
        for v in variant_views(model, dtype, files=art, skip=("behavior",), tier=tier, screening=screening):
            receipts.write(run, dict(v.data))
        receipts.write(run, _behavior_receipt(run, art, model, dtype, tier, provenance, screening))
    return run


def cli(*args) -> tuple[int, str, str]:
    out = subprocess.run([sys.executable, "-m", "harness.review_command", *map(str, args)], capture_output=True, text=True,
                         cwd=ROOT)
    return out.returncode, out.stdout, out.stderr


def row(run: RunDir, dtype: str) -> dict:
    return next(r for r in json.loads(run.report_json.read_text())["variants"] if r["dtype"] == dtype)


def test_review_approves_writes_the_record_and_the_variant_qualifies(tmp_path):
    run = build_run(tmp_path)
    assemble.rebuild(run)
    before = row(run, "q4")
    assert before["passed_all_gates"] and before["status"] == "screening"
    assert before["blockers"] == [f"transcript review: {review.NO_APPROVAL} (sha256 "
                                  f"{before['behavior']['report_sha256'][:12]})"]

    code, out, err = cli(run.path, "m/q4", "--by", "R. Keller", "--note", "read all 6 transcripts; fine")
    assert code == 0, err
    assert "6 transcripts of 3 cases (greedy 3, sampled 3)" in out and out.startswith("m/q4 in ")
    table = out[out.index("category"):]
    assert [l.split() for l in table.splitlines()[2:4]] == [["arithmetic", "1", "1/1", "1/1"],
                                                             ["format", "2", "2/2", "1/2"]]
    assert "candidate-transcripts.jsonl" in out and "matches the receipt" in out
    assert "qualification: 2 variants, 1 qualified" in out and "m/q4: qualified" in out

    (path,) = run.review_files()
    data = json.loads(path.read_text())
    (entry,) = review.parse(data, str(path))
    nodeid = "suites/test_behavior.py::test_behavior_parity[m-q4]"
    evidence = run.evidence(nodeid)
    assert entry == {"reviewer": "R. Keller", "report_sha256": sha256_file(evidence / "candidate-report.json"),
                     "approved": True, "notes": "read all 6 transcripts; fine",
                     "transcripts_sha256": sha256_file(evidence / "candidate-transcripts.jsonl")}
    assert data["reviewed_at"].endswith("+00:00") and data["approvals"][0]["variant"] == "m/q4"
    assert data["approvals"][0]["receipt"] == nodeid
    assert data["approvals"][0]["counts"]["categories"]["format"] == {
        "cases": 2, "modes": {"greedy": {"passed": 2, "transcripts": 2}, "sampled": {"passed": 1, "transcripts": 2}}}
    assert path.name == f"review-{sha256_file(path)[:16]}.json"
    assert not list(run.reviews.glob(".*"))                              # written atomically: no temporary left
    after = row(run, "q4")
    assert after["qualified"] and after["behavior"]["review"] == {"approved": True, "why": "approved by R. Keller"}
    md = run.report_md.read_text()
    assert "bin/gatehouse review" in md and "m-q4" not in md[md.index("## What stands"):md.index("\n## ", md.index("## What stands"))]


def test_the_report_names_the_command_for_each_unreviewed_variant(tmp_path):
    run = build_run(tmp_path)
    assemble.rebuild(run)
    rep = json.loads(run.report_json.read_text())
    cmd = f"bin/gatehouse review {run.path} m/q4 --by NAME --note '...'"
    lines = summary.terminal_lines(rep, run.path)
    start = lines.index("passed every gate, not qualified yet (what stands between each and qualified):")
    assert lines[start + 1:] == [f"  m-fp32: needs a transcript review: {cmd.replace('m/q4', 'm/fp32')}",
                                 f"  m-q4: needs a transcript review: {cmd}"]
    md = run.report_md.read_text()
    section = md[md.index("## What stands between a variant and qualified"):]
    assert f"- **m-q4**: needs a transcript review: `{cmd}`" in section
    assert md.index("## Variants") < md.index("## What stands between") < md.index("## Not qualified")
    step = summary.markdown_summary(rep, {"json": run.report_json, "md": run.report_md})
    assert f"- m-q4: needs a transcript review: `{cmd}`" in step
    html = run.report_html.read_text()
    assert "What stands between a variant and qualified" in html and "m/q4 --by NAME" in html


def test_screening_and_ci_runs_say_so_instead_of_a_review(tmp_path):
    run = build_run(tmp_path / "s", screening=True)
    assemble.rebuild(run)
    lines = summary.terminal_lines(json.loads(run.report_json.read_text()), run.path)
    assert lines[-1] == ("  m-fp32, m-q4: screening campaign (`screening = true`): a screening run never qualifies; "
                         "run a non-screening campaign")
    assert "bin/gatehouse review" not in "\n".join(lines)
    run = build_run(tmp_path / "c", tier="ci")
    assemble.rebuild(run)
    assert summary.terminal_lines(json.loads(run.report_json.read_text()))[-1] == \
        "  m-fp32, m-q4: CI-tier model: screening only, never qualified"


def test_a_failing_variant_is_not_listed_as_one_review_away(tmp_path):
    run = build_run(tmp_path, dtypes=("q4",))
    cache = next(p for p in run.receipt_files() if "test_cache" in p.name)
    data = json.loads(cache.read_text())
    data["verdict"] = {"outcome": "fail", "reasons": ["max abs error too large"], "decided": False}
    cache.write_text(json.dumps(data))
    assemble.rebuild(run)
    rep = json.loads(run.report_json.read_text())
    assert not any("not qualified yet" in l for l in summary.terminal_lines(rep, run.path))
    assert "## What stands between" not in run.report_md.read_text()


def test_review_refuses_changed_evidence_naming_the_file(tmp_path):
    run = build_run(tmp_path, dtypes=("q4",))
    evidence = run.evidence("suites/test_behavior.py::test_behavior_parity[m-q4]")
    t = evidence / "candidate-transcripts.jsonl"
    t.write_text(t.read_text().replace("q4 says x", "q4 says y", 1))
    code, out, err = cli(run.path, "m-q4", "--by", "rk", "--note", "n")
    assert code == 2 and f"{t}: SHA-256" in err and "differs from the transcripts" in err and "refusing" in err
    assert not run.review_files() and "Approving" not in out
    t.write_text("".join(json.dumps(r) + "\n" for r in _rows("q4")))    # restored: the same bytes as measured
    rep = evidence / "candidate-report.json"
    rep.write_text(rep.read_text() + " ")
    code, _, err = cli(run.path, "m/q4", "--by", "rk", "--note", "n")
    assert code == 2 and f"{rep}: SHA-256" in err and "behavior report" in err and not run.review_files()


def test_review_errors_name_the_run_dir_the_variant_and_the_variants(tmp_path):
    run = build_run(tmp_path)
    code, _, err = cli(run.path, "m/q5", "--by", "rk", "--note", "n")
    assert code == 2 and f"{run.path}: no variant 'm/q5'" in err and "with a behavior receipt: m/fp32, m/q4" in err
    code, _, err = cli(tmp_path / "nowhere", "m/q4", "--by", "rk", "--note", "n")
    assert code == 2 and f"{tmp_path / 'nowhere'}: no such run directory" in err
    code, _, err = cli(tmp_path, "m/q4", "--by", "rk", "--note", "n")
    assert code == 2 and f"{tmp_path}: not a Gatehouse run directory (no run.json)" in err
    code, _, err = cli(run.path, "m/q4", "--by", " ", "--note", "n")
    assert code == 2 and "--by must name" in err
    behavior = next(p for p in run.receipt_files() if "behavior_parity" in p.name and "q4" in p.name)
    behavior.unlink()
    code, _, err = cli(run.path, "m/q4", "--by", "rk", "--note", "n")
    assert code == 2 and "m/q4 has no behavior receipt" in err and "variants with one: m/fp32" in err
    assert not run.review_files()


def test_reject_records_a_rejection_the_report_shows(tmp_path, capsys):
    run = build_run(tmp_path, dtypes=("q4",))
    assert review_command.main([str(run.path), "m/q4", "--by", "rk", "--note", "loops in add-2", "--reject"]) == 0
    out = capsys.readouterr().out
    assert "Rejecting 6 transcripts of 3 cases" in out and "rejected by rk: loops in add-2" in out
    (path,) = run.review_files()
    assert review.load(path)[1][0]["approved"] is False
    r = row(run, "q4")
    assert not r["qualified"] and r["behavior"]["review"]["why"] == "transcript review rejected by rk"
    assert "m/q4: screening: transcript review: transcript review rejected by rk" in out
    line = summary.terminal_lines(json.loads(run.report_json.read_text()), run.path)[-1]
    assert line.startswith("  m-q4: transcript review rejected by rk: a rejection stands") and "bin/gatehouse" not in line


def test_an_approval_of_other_transcripts_does_not_count_and_the_report_says_why(tmp_path, capsys):
    run = build_run(tmp_path, dtypes=("q4",))
    assert review_command.main([str(run.path), "m/q4", "--by", "rk", "--note", "read them"]) == 0
    assert row(run, "q4")["qualified"]
    t = run.evidence("suites/test_behavior.py::test_behavior_parity[m-q4]") / "candidate-transcripts.jsonl"
    old = sha256_file(t)
    t.write_text(t.read_text().replace("q4 says x", "q4 says z"))     # the transcripts read are not these any more
    assemble.rebuild(run)
    r = row(run, "q4")
    assert not r["qualified"] and r["passed_all_gates"]                 # the behavior report itself did not change
    why = r["behavior"]["review"]["why"]
    assert why.startswith(f"{review.TRANSCRIPTS_CHANGED}: rk's approval (review-") and f"read transcripts {old[:12]}" in why
    assert f"{t} is {sha256_file(t)[:12]}; it does not count" in why
    assert r["blockers"][-1].startswith(f"transcript review: {review.TRANSCRIPTS_CHANGED}")
    md = run.report_md.read_text()
    assert "transcript review does not count (the transcripts changed after the review" in md
    assert f"`bin/gatehouse review {run.path} m/q4 --by NAME --note '...'`" in md
    capsys.readouterr()
    assert review_command.main([str(run.path), "m/q4", "--by", "rk", "--note", "again"]) == 2   # and no new review of them
    assert "differs from the transcripts" in capsys.readouterr().err


def test_verdict_and_parse_with_transcripts():
    sha, other = "ab" * 32, "cd" * 32
    e = {"reviewer": "rk", "report_sha256": sha, "approved": True, "notes": "n", "transcripts_sha256": other}
    assert review.parse(e, "r.json")[0]["transcripts_sha256"] == other
    assert review.parse({**e, "transcripts_sha256": None}, "r.json")[0]["transcripts_sha256"] is None
    with pytest.raises(ReceiptError, match="r.json: approvals\\[0\\]: 'transcripts_sha256' must be the 64-hex"):
        review.parse({**e, "transcripts_sha256": "abc"}, "r.json")
    assert review.verdict([e], [("pin", other), ("file", other)]) == (True, "approved by rk")
    approved, why = review.verdict([e], [("pin", other), ("evidence/x", sha)])
    assert not approved and "evidence/x is abababababab; it does not count" in why
    assert review.verdict([e], [])[0] is False and "holds no transcripts" in review.verdict([e], [])[1]
    assert review.verdict([e]) == (True, "approved by rk")              # without the run's transcripts: by report only
    plain = {**e, "transcripts_sha256": None, "reviewer": "ab"}
    assert review.verdict([e, plain], [("pin", sha)]) == (True, "approved by ab (not counted: " +
                                                          review.verdict([e], [("pin", sha)])[1] + ")")


def test_bin_gatehouse_names_the_review_command():
    text = (ROOT / "bin" / "gatehouse").read_text()
    usage = text[:text.index("set -euo")]
    assert "bin/gatehouse review RUN_DIR MODEL/DTYPE --by NAME --note TEXT [--reject]" in usage
    assert "-m harness.review_command" in text
