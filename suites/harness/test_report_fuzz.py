"""The report reads anything: random byte flips, truncations and type swaps in receipts, review records and
the build log never crash it, and nothing is dropped without a line that says so.

A run directory of realistic receipts (a lane with browser step figures, a behavior comparison, a win-rule
decision, a v1 receipt beside the v2 ones) is damaged at random; the report must still be built and
rendered, and every receipt file must be either read or listed as invalid with its reason, every review
record either read or listed, every build-log line either counted or listed.
"""

import copy
import json
import math
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from harness import receipt as receipts
from harness.receipt import Receipt
from harness.report.assemble import decide
from harness.report.collect import collect
from harness.report.markdown import markdown
from harness.rundir import RunDir
from harness.verdict import Measurement, Verdict

SHA = "b" * 64
PROV = {"harness": {"sha256": SHA, "git_commit": None}, "packages": {"numpy": "2"},
        "machine_before": {"cpu_model": "x", "logical_cpus": 2, "loadavg_1m": 0.1},
        "machine_after": {"loadavg_1m": 0.2}, "campaign": {"name": "c", "sha256": SHA, "screening": False}}
CELL = {"decode_tok_s": 150.0, "decode_tok_s_cv": 0.02, "decode_tok_s_iqr": 3.0, "prefill_ms_median": 12.5,
        "prefill_ms_iqr": 0.4, "repeats": 5, "cpu_per_wall": 1.9}


def _receipts(art):
    out = []
    for dtype in ("fp32", "q4"):
        r = Receipt(f"suites/test_t.py::test_lane[m-{dtype}]", "throughput_native", {"model": "m", "dtype": dtype}, art)
        r.pin(art / "graph.onnx", "graph")
        r.record_lane("native-probe", {"short": {**CELL, "step": {"decode_step_ms": 5.0}, "profile": {
            "kernel_ms": 3.0, "top_kernels_ms": {"MatMul": 2.0}}}}, {"load_ms": 9.0, "threads": 2})
        r.decide(Verdict.from_checks([], {"decode_tok_s_short": Measurement(150.0, "tokens/s", 5)}))
        out.append(r)
        b = Receipt(f"suites/test_b.py::test_behavior[m-{dtype}]", "behavior", {"model": "m", "dtype": dtype}, art)
        b.pin(art / "report.json", "behavior_report")
        b.record_behavior({"quality_index": 55.0, "reference_quality_index": 60.0, "categories": ["format"],
                           "rate_counts": {"greedy.format": {"numerator": 11, "denominator": 20}},
                           "reference_rate_counts": {}, "timing": {"seconds": 3.0, "modes": {}}})
        b.decide(Verdict.from_checks([], {"quality_index": Measurement(55.0, "points/100")}))
        out.append(b)
    w = Receipt("suites/test_w.py::test_win_rule[m-q4-aa]", "winrule", {"model": "m", "dtype": "q4"}, art)
    w.level = "run"
    w.record_winrule({"window": "aa", "verdict": "TIE", "verdict_before_override": None, "reasons": [],
                      "expected": "not WIN", "markdown": "decision.md", "chart": "chart.png"})
    w.decide(Verdict.from_checks([]))
    out.append(w)
    return [r.to_dict(outcome="pass", reasons=[], provenance=PROV, run={"run_id": "run", "screening": False,
                                                                       "worker": "main"}) for r in out]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    base = tmp_path_factory.mktemp("pristine")
    art = base / "art"
    art.mkdir()
    (art / "graph.onnx").write_bytes(b"graph")
    (art / "report.json").write_bytes(b"{}")
    run = RunDir(base / "run")
    run.ensure({"name": "c", "path": "c.toml", "sha256": SHA, "screening": False}, False)
    for data in _receipts(art):
        receipts.write(run, data)
    v1 = copy.deepcopy(_receipts(art)[0])   # the same lane as a version-1 receipt: extra.lane and names
    for key in ("level", "lane", "behavior", "winrule", "machine_during", "graph_recheck"):
        v1.pop(key)
    v1.update(schema_version=1, nodeid="suites/test_t.py::test_lane_v1[m-fp32]", extra={"lane": "python-ort"})
    v1["measurements"]["prefill_ms_short"] = {"value": 12.0, "unit": "ms", "count": 5}
    receipts.write(run, v1)
    run.reviews.mkdir(parents=True, exist_ok=True)
    run.review("c" * 64).write_text(json.dumps({"reviewer": "r", "report_sha256": SHA, "approved": True, "notes": "x"}))
    for i in range(3):
        run.append_build({"hit": bool(i % 2), "seconds": 1.0 + i, "build_seconds": None if i % 2 else 2.0, "kind": "x"})
    return base


def _files(run: RunDir):
    return run.receipt_files() + run.review_files() + [run.builds]


KINDS = st.sampled_from(["flip", "truncate", "swap", "nan"])
VALUES = st.sampled_from(["fast", 1.5, -1, None, True, [], {}, [1, "x"], {"value": "x"}])


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, prefix + (i,))


def _damage(path, kind, pick, value):
    raw = path.read_bytes()
    if kind == "flip" and raw:
        i = pick % len(raw)
        path.write_bytes(raw[:i] + bytes([raw[i] ^ (1 << (pick % 8))]) + raw[i + 1:])
    elif kind == "truncate":
        path.write_bytes(raw[: pick % (len(raw) + 1)])
    elif path.suffix == ".json":
        try:
            data = json.loads(raw)
        except ValueError:
            return                            # already damaged beyond JSON by an earlier flip
        paths = [p for p in _paths(data) if p]
        target = paths[pick % len(paths)]
        node = data
        for k in target[:-1]:
            node = node[k]
        node[target[-1]] = float("nan") if kind == "nan" else value
        path.write_text(json.dumps(data))     # json.dumps writes NaN as the literal a disk or tool may leave


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damage=st.lists(st.tuples(st.integers(0, 10**6), KINDS, st.integers(0, 10**6), VALUES), min_size=1, max_size=3))
def test_no_damaged_file_crashes_the_report_or_vanishes_silently(pristine, tmp_path, damage):
    import tempfile

    work = Path(tempfile.mkdtemp(dir=tmp_path)) / "case"
    shutil.copytree(pristine, work)
    run = RunDir(work / "run")
    # receipts pin artifacts by absolute path: point them at this copy
    for p in run.receipt_files():
        p.write_text(p.read_text().replace(str(pristine), str(work)))
    files = _files(run)
    for which, kind, pick, value in damage:
        _damage(files[which % len(files)], kind, pick, value)
    c = collect(run)                      # never raises on a damaged receipt, review or build line
    rep, views = decide(c)
    text = markdown(rep, views)
    assert len(c.views) + len(c.invalid) == len(run.receipt_files())
    assert len(c.invalid_reviews) + len({p for p in run.review_files()} - {p for p in run.review_files()
                                                                           if any(b["path"] == str(p) for b in c.invalid_reviews)}) == len(run.review_files())
    lines = [l for l in run.builds.read_bytes().split(b"\n") if l.strip()]
    assert len(c.builds) + len(c.invalid_builds) == len(lines)
    for bad in c.invalid + c.invalid_reviews + c.invalid_builds:
        assert bad["error"] and bad["path"].split(":")[0] in text   # each refusal is listed in report.md
    for v in c.views:                     # what was read carries no non-finite number into the report
        assert all(not (isinstance(m["value"], float) and not math.isfinite(m["value"]))
                   for m in v.data["measurements"].values())


def test_the_report_command_says_when_it_refused_something(pristine, tmp_path, capsys):
    from harness.report.cli import main

    work = tmp_path / "w"
    shutil.copytree(pristine, work)
    run = RunDir(work / "run")
    for p in run.receipt_files():
        p.write_text(p.read_text().replace(str(pristine), str(work)))
    assert main([str(run.path)]) == 0
    first = run.receipt_files()[0]
    data = json.loads(first.read_text())
    next(iter(data["measurements"].values()))["value"] = float("nan")
    first.write_text(json.dumps(data))                            # a NaN literal, as another tool may write
    run.builds.write_bytes(run.builds.read_bytes()[:-7])          # a truncated last line
    assert main([str(run.path)]) == 1
    out = capsys.readouterr().out
    assert "refused" in out
    md = run.report_md.read_text()
    assert "non-finite number NaN" in md and "builds.jsonl:3" in md
