"""The report package's reading side: receipt views, staleness, reviews, the run directory's layout, and the
whole report built from a run directory; plus the receipt factory the other report tests use."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness import receipt as receipts, review
from harness.errors import ReceiptError
from harness.hashing import sha256_file
from harness.report import collect as collect_mod
from harness.report.collect import collect
from harness.view import ReceiptView
from harness.rundir import RunDir, receipt_filename

SHA = "a" * 64
MACHINE = {"cpu_model": "AMD EPYC", "logical_cpus": 2, "memory_total_bytes": 25_276_071_936, "hostname": "vm",
           "os": "Linux-6.18.44-x86_64-with-glibc2.36", "python": "3.11.7", "machine": "x86_64",
           "loadavg_1m": 0.5, "cpu_mhz": 2596.2, "thermal_max_c": None}
PACKAGES = {"numpy": "2.4.6", "onnxruntime": "1.32.0", "torch": "2.13.0+cpu"}


# -- the factory -----------------------------------------------------------------------------
def artifact(role="graph", path="/artifacts/m/model.onnx", sha=SHA, size=1000):
    return {"role": role, "path": str(path), "sha256": sha, "bytes": size}


def make_receipt(gate, model="m", dtype="q4", *, nodeid=None, outcome="pass", reasons=None, measurements=None,
                 artifacts=(), extra=None, policy=None, tier="benchmark", screening=False, harness_sha=SHA,
                 packages=None, machine=None):
    """A schema-v1 receipt as the plugin writes it, validated; every field a test does not name is fixed."""
    nodeid = nodeid or f"suites/test_{gate}.py::test_{gate}[{model}-{dtype}]"
    if reasons is None:
        reasons = [] if outcome == "pass" else [f"{gate} told to {outcome}"]
    data = {
        "schema_version": 1, "kind": "gatehouse.receipt", "nodeid": nodeid, "gate": gate,
        "variant": {"model": model, "dtype": dtype, "tier": tier}, "parameters": {}, "policy": dict(policy or {}),
        "seeds": {}, "extra": dict(extra or {}),
        "verdict": {"outcome": outcome, "reasons": list(reasons),
                    "decided": {"pass": True, "fail": False}.get(outcome)},
        "measurements": {k: {"value": v, "unit": "x", "count": None} for k, v in (measurements or {}).items()},
        "artifacts": [dict(a) for a in artifacts],
        "provenance": {"harness": {"sha256": harness_sha, "git_commit": None},
                       "packages": dict(PACKAGES if packages is None else packages),
                       "machine_before": {**MACHINE, **(machine or {})}, "machine_after": {"loadavg_1m": 0.7},
                       "campaign": {"name": "c", "sha256": SHA, "screening": screening}},
        "timing": {"started_at": "2026-12-04T00:00:00.000+00:00", "finished_at": "2026-12-04T00:00:01.000+00:00",
                   "duration_s": 1.0, "exclusive": False, "lock_wait_s": None},
        "run": {"run_id": "r", "screening": screening, "worker": "main"},
    }
    return receipts.validate(data, nodeid)


def behavior_extra(quality=50.0, categories=("format",)):
    return {"quality_index": quality, "reference_quality_index": 60.0, "categories": list(categories),
            "rate_counts": {f"greedy.{c}": {"numerator": 1, "denominator": 2} for c in categories},
            "timing": {"seconds": 3.0, "modes": {"greedy": {"seconds": 1.0}}}}


def lane_measurements(short, long=None, prefill=10.0):
    out = {"decode_tok_s_short": short, "decode_tok_s_short_cv": 0.01, "decode_tok_s_iqr_short": 1.0,
           "prefill_ms_short": prefill, "prefill_ms_short_iqr": 0.5, "load_ms": 100.0}
    if long is not None:
        out.update(decode_tok_s_long=long, prefill_ms_long=prefill * 4)
    return out


def variant_views(model="m", dtype="q4", *, quality=50.0, graph_bytes=1000, parameters=100, tok_s=None,
                  approved=True, skip=(), lane="native-probe", files=None, **kw):
    """Passing receipt views for every gate ``dtype`` must pass (except ``skip``), as collect would give them:
    the behavior receipt reviewed, the throughput receipt on ``lane`` when ``tok_s`` is given.  With
    ``files`` (a folder) the pinned graph and behavior report are real files there."""
    from harness import gates

    graph, report = artifact(size=graph_bytes), artifact("behavior_report", f"/artifacts/{model}-{dtype}/report.json",
                                                         "b" * 64, 10)
    if files is not None:
        g, r = Path(files) / f"{model}-{dtype}.onnx", Path(files) / f"{model}-{dtype}-behavior.json"
        g.write_bytes(b"g" * graph_bytes)
        r.write_text(json.dumps({"model": model, "dtype": dtype}))
        graph, report = artifact("graph", g, sha256_file(g), graph_bytes), artifact("behavior_report", r, sha256_file(r), 10)
    out = []
    for spec in gates.qualifying(dtype) if dtype in ("fp32", "q8", "q4") else []:
        if spec.name in skip:
            continue
        arts, meas, extra, why = [graph], {}, {}, None
        if spec.name == "cache":
            meas = {"parameters": parameters, "incremental_vs_full_max_abs_error": 1e-5}
        if spec.name == "behavior":
            arts.append(report)
            meas, extra = {"quality_index": quality}, {"behavior": behavior_extra(quality)}
            why = (True, "approved by rk") if approved else (False, "no transcript review record approves this behavior report")
        if spec.name == "throughput_native" and tok_s is not None:
            meas, extra = lane_measurements(tok_s), {"lane": lane}
        out.append(ReceiptView(make_receipt(spec.name, model, dtype, measurements=meas, artifacts=arts, extra=extra, **kw),
                               review=why))
    return out


def test_the_factory_writes_schema_valid_receipts():
    for outcome in ("pass", "fail", "error", "skip"):
        receipts.validate(make_receipt("cache", outcome=outcome, artifacts=[artifact()]))
    receipts.validate(make_receipt("throughput_goal", dtype=None, policy={"targets": {"vs_ortgenai": 1.0}}))


# -- views -----------------------------------------------------------------------------------
def test_a_view_is_read_only_and_reads_v1_blocks():
    v = ReceiptView(make_receipt("throughput_native", measurements={**lane_measurements(100.0), "other_s": 2.0},
                                 extra={"lane": "native-probe"}))
    with pytest.raises(TypeError):
        v.data["gate"] = "cache"
    with pytest.raises(AttributeError):
        v.stale = ("x",)
    assert (v.gate, v.model, v.dtype, v.tier, v.outcome) == ("throughput_native", "m", "q4", "benchmark", "pass")
    assert v.value("other_s") == 2.0 and v.value("missing") is None
    assert v.lane.speed("short") == 100.0 and v.lane.cells["short"].decode_tok_s_iqr == 1.0
    assert v.lane.load_ms == 100.0 and v.lane.lane == "native-probe"
    assert list(v.lane.cells) == ["short"]
    assert ReceiptView(make_receipt("cache")).lane is None and ReceiptView(make_receipt("cache")).behavior is None


def test_v1_cells_are_never_statistics_of_a_cell():
    m = {"decode_tok_s_short": 1, "prefill_ms_short": 1, "decode_tok_s_short_iqr": 1, "prefill_ms_short_iqr": 1,
         "decode_tok_s_iqr_long": 1, "prefill_ms_iqr_long": 1, "decode_tok_s_long": 1, "prefill_ms_long": 1,
         "decode_tok_s_short_cv": 1, "decode_tok_s_mid": 1}
    v = ReceiptView(make_receipt("throughput_native", measurements=m, extra={"lane": "native-probe"}))
    assert list(v.lane.cells) == ["long", "short"]   # no phantom short_iqr, iqr_long; mid has no prefill figure


def test_a_v2_lane_block_reads_into_typed_cells():
    data = make_receipt("throughput_browser")
    data["schema_version"] = 2
    data["lane"] = {"name": "ort-web", "load_ms": 5.0, "threads": 2, "cells": {"short": {
        "decode_tokens_per_s": 30.0, "decode_tokens_per_s_iqr": 1.5, "prefill_ms": 80.0,
        "step": {"decode_step_ms": 33.0, "kv_bytes": 2e6},
        "profile": {"kernel_ms": 20.0, "top_kernels_ms": {"MatMul": 12.0}}}}}
    row = ReceiptView(data).lane
    cell = row.cells["short"]
    assert (row.lane, row.load_ms, row.threads_used, cell.decode_tok_s, cell.prefill_ms) == ("ort-web", 5.0, 2, 30.0, 80.0)
    assert cell.step["decode_step_ms"] == 33.0 and cell.profile == {"kernel_ms": 20.0, "top_kernels_ms": {"MatMul": 12.0}}
    assert row.as_dict()["cells"]["short"]["decode_tok_s_iqr"] == 1.5


def test_behavior_block_carries_the_review():
    v = ReceiptView(make_receipt("behavior", extra={"behavior": behavior_extra(40.0, ("format", "stopping"))},
                                 artifacts=[artifact("behavior_report", sha="c" * 64)]), review=(True, "approved by rk"))
    b = v.behavior
    assert b["quality_index"] == 40.0 and b["report_sha256"] == "c" * 64
    assert b["categories"] == {"format": {"numerator": 1, "denominator": 2}, "stopping": {"numerator": 1, "denominator": 2}}
    assert b["review"] == {"approved": True, "why": "approved by rk"}
    unreviewed = ReceiptView(make_receipt("behavior", extra={"behavior": behavior_extra()})).behavior
    assert unreviewed["review"]["approved"] is False and unreviewed["report_sha256"] is None


# -- the run directory -----------------------------------------------------------------------
def test_rundir_owns_the_layout(tmp_path):
    run = RunDir(tmp_path / "run")
    nodeid = "suites/test_cache.py::test_cache_allclose[m-q4]"
    assert run.receipt(nodeid).parent == run.receipts == tmp_path / "run" / "receipts"
    assert run.evidence(nodeid) == run.path / run.evidence_name(nodeid)
    assert run.evidence_name(nodeid) == "evidence/" + receipt_filename(nodeid).removesuffix(".json")
    assert run.superseded_copy(run.receipt(nodeid)).parent == run.superseded
    assert RunDir.of(run) is run and RunDir.of(str(run.path)) == run and RunDir.of_receipts(run.receipts) == run
    with pytest.raises(ReceiptError, match="elsewhere.*receipts/ folder.*'elsewhere'"):
        RunDir.of_receipts(tmp_path / "elsewhere")
    with pytest.raises(ReceiptError, match="run.json: cannot read the run record"):
        run.read_record()
    run.ensure({"name": "c", "path": "c.toml", "sha256": SHA, "screening": False}, False)
    assert run.started and run.read_record()["run_id"] == "run" and run.receipts.is_dir()
    run.append_build({"hit": True, "seconds": 1.0, "build_seconds": None})
    assert run.read_builds() == ([{"build_seconds": None, "hit": True, "seconds": 1.0}], [])
    with open(run.builds, "ab") as f:
        f.write(b'{"hit": true, "seconds": "slow", "build_seconds": null}\n{broken\n{"hit": true, "sec\xff')
    good, bad = run.read_builds()     # a truncated or edited line is listed, never fatal
    assert good == [{"build_seconds": None, "hit": True, "seconds": 1.0}]
    assert [b["path"].rsplit(":", 1)[1] for b in bad] == ["2", "3", "4"]
    assert "seconds 'slow'" in bad[0]["error"] and "not valid JSON" in bad[1]["error"] and "not UTF-8" in bad[2]["error"]


def test_receipt_write_keeps_the_replaced_receipt_where_rundir_says(tmp_path):
    run = RunDir(tmp_path / "run")
    first, second = make_receipt("cache"), make_receipt("cache", outcome="fail")
    receipts.write(run, first)
    path = receipts.write(run, second)
    assert path == run.receipt(first["nodeid"]) and receipts.load(path)["verdict"]["outcome"] == "fail"
    kept = list(run.superseded.glob("*.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text()) == first


def write_run(tmp_path, views_or_receipts, screening=False):
    """A run directory holding these receipts (dicts or views), with its run record."""
    run = RunDir(tmp_path / "run")
    run.ensure({"name": "toy", "path": "toy.toml", "sha256": SHA, "screening": screening}, screening)
    for r in views_or_receipts:
        receipts.write(run, dict(r.data) if isinstance(r, ReceiptView) else r)
    return run


def test_collect_lists_invalid_receipts_checks_staleness_and_reviews(tmp_path):
    graph = tmp_path / "model.onnx"
    graph.write_bytes(b"graph")
    rep = tmp_path / "behavior.json"
    rep.write_text('{"toy": 1}')
    good = make_receipt("behavior", artifacts=[artifact("graph", graph, sha256_file(graph), 5),
                                               artifact("behavior_report", rep, sha256_file(rep), 10)],
                        extra={"behavior": behavior_extra()})
    run = write_run(tmp_path, [good, make_receipt("cache", artifacts=[artifact("graph", graph, sha256_file(graph), 5)])])
    (run.receipts / "broken.json").write_text('{"schema_version": 1}')
    review_file = tmp_path / "review.json"
    review_file.write_text(json.dumps({"reviewer": "rk", "report_sha256": sha256_file(rep), "approved": True,
                                       "notes": "read every transcript"}))
    review.store(run, review_file)

    c = collect(run)
    assert c.record["run_id"] == "run" and len(c.views) == 2 and not c.invalid_reviews
    assert len(c.invalid) == 1 and c.invalid[0]["path"].endswith("broken.json") and "invalid receipt" in c.invalid[0]["error"]
    beh = next(v for v in c.views if v.gate == "behavior")
    assert beh.stale == () and beh.review == (True, "approved by rk") and beh.evidence.startswith("evidence/")

    graph.write_bytes(b"other graph")
    rep.write_text('{"toy": 2}')
    c = collect(run)
    assert all(any("changed" in s for s in v.stale) for v in c.views)
    assert next(v for v in c.views if v.gate == "behavior").review[0] is False   # the approval named the old bytes


# -- the whole report ------------------------------------------------------------------------
REPORT_KEYS = {"schema_version", "kind", "run", "label", "receipts", "invalid_receipts", "stale_receipts",
               "invalid_build_lines",
               "invalid_reviews", "variants", "ranking", "speed_ranking", "frontier_dimensions", "lanes", "ratios",
               "run_level", "build_phase", "machines", "time"}
ROW_KEYS = {"model", "dtype", "tier", "gates", "figures", "graph_bytes", "graph_sha256", "behavior", "passed_all_gates",
            "qualified", "status", "blockers", "speed", "rank", "quality_rank", "speed_rank", "frontier", "recipe", "own"}


def test_build_rebuild_markdown_and_summary(tmp_path):
    from harness import report
    from harness.gates import throughput_goal

    views = variant_views("m", "q4", tok_s=200.0, files=tmp_path) + variant_views("m", "fp32", tok_s=100.0, quality=60.0,
                                                                                  graph_bytes=4000, files=tmp_path)
    goal = make_receipt("throughput_goal", "m", "fp32", policy=throughput_goal.GoalPolicy().as_dict(),
                        measurements={"paired_q4_over_ort_genai_short": 0.9})
    win = make_receipt("winrule", "m", "q4", outcome="skip", reasons=["no window declared"])
    training = make_receipt("training", "m", None, measurements={"final_over_initial_train_loss": 0.4})
    run = write_run(tmp_path, [*views, goal, win, training])
    approvals = [{"report_sha256": v.artifact("behavior_report")["sha256"], "approved": True, "notes": "read"}
                 for v in views if v.gate == "behavior"]
    (tmp_path / "review.json").write_text(json.dumps({"reviewer": "rk", "approvals": approvals}))
    review.store(run, tmp_path / "review.json")
    rep = report.build(run)
    assert set(rep) == REPORT_KEYS and all(set(r) == ROW_KEYS for r in rep["variants"])
    assert [(r["dtype"], r["rank"], r["speed_rank"]) for r in rep["variants"]] == [("fp32", 1, 2), ("q4", 2, 1)]
    assert {r["gate"] for r in rep["run_level"]} == {"throughput_goal", "winrule", "training"}

    paths = report.rebuild(run.path)
    assert paths == {"json": run.report_json, "md": run.report_md, "html": run.report_html}
    md = run.report_md.read_text()
    order = [md.index(h) for h in ("## Variants", "## Behavior", "## Throughput, every lane", "## Speed ratios",
                                   "## OFF/ON/OFF win rule", "## Run-level results")]
    assert order == sorted(order)                                   # general, then each spec's section in registry order
    run_level = md[md.index("## Run-level results"):]
    assert "test_training" in run_level and "test_throughput_goal" not in run_level and "test_winrule" not in run_level
    assert "`suites/test_winrule.py::test_winrule[m-q4]` (skip)" in md     # the winrule section lists it
    assert report.summary_line(paths["json"]) == ("qualification: 2 variants, 2 qualified, 0 failing gate(s), "
                                                  "1 skipped, 0 stale and 0 invalid receipt(s)")   # the run-level winrule
    out = subprocess.run([sys.executable, "-m", "harness.report", str(run.path)], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("qualification: 2 variants")
    out = subprocess.run([sys.executable, "-m", "harness.report", str(tmp_path / "nowhere")], capture_output=True, text=True)
    assert out.returncode == 2 and "nowhere/run.json: cannot read the run record" in out.stderr


@pytest.mark.parametrize("first", ["harness.gates", "harness.report", "harness.fmt", "harness.report.rank",
                                   "harness.report.markdown", "harness.plugin"])
def test_no_import_circle_and_the_report_package_imports_lazily(first):
    """The gate modules render sections with harness.fmt and the report reads the registry: each side
    imports first in a fresh interpreter, and importing harness.report alone loads no gate."""
    code = (f"import sys, importlib; importlib.import_module({first!r}); import harness.gates, harness.report; "
            "from harness.report import build, rebuild, summary_line, main; print('harness.gates' in sys.modules)")
    if first == "harness.report":
        code = "import sys, harness.report; print('harness.gates' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[2])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ("False" if first == "harness.report" else "True")


def test_collect_module_reads_no_registry():
    assert "gates" not in vars(collect_mod)
