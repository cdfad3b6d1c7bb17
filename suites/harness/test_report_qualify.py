"""Qualification as pure functions of receipt views: incomplete, failing, stale, peer, screening, CI tier,
transcript review, run-level gates from the registry, and the provenance rule."""

import dataclasses

from harness import gates
from harness.report import qualify
from harness.view import ReceiptView

from test_report_collect import make_receipt, variant_views


def row_of(views, screening=False):
    rows = qualify.variants(views, screening)
    assert len(rows) == 1, rows
    return rows[0]


def test_a_complete_passing_reviewed_variant_qualifies():
    r = row_of(variant_views("m", "q4"))
    assert r["qualified"] and r["passed_all_gates"] and r["status"] == "qualified" and r["blockers"] == []
    assert set(r["gates"]) == {s.name for s in gates.qualifying("q4")}
    assert r["figures"]["quality_index"] == 50.0 and r["graph_bytes"] == 1000 and r["behavior"]["review"]["approved"]


def test_the_registry_says_which_gates_are_required():
    assert [s.name for s in gates.qualifying("fp32")] == ["cache", "behavior", "throughput_native", "throughput_browser"]
    r = row_of([ReceiptView(make_receipt("cache", dtype="fp32"))])
    assert r["blockers"][:3] == ["behavior: no receipt (incomplete)", "throughput_native: no receipt (incomplete)",
                                 "throughput_browser: no receipt (incomplete)"]
    assert not r["passed_all_gates"] and not r["qualified"]
    assert r["figures"]["relative_increase"] == 0.0            # fp32 is its own reference


def test_a_missing_required_receipt_is_incomplete_an_optional_one_is_not():
    r = row_of(variant_views("m", "q4", skip=("throughput_browser",)))
    assert r["blockers"] == ["throughput_browser: no receipt (incomplete)"] and not r["passed_all_gates"]
    optional = [s.name for s in gates.GATES.values() if s.level == "variant" and not s.required and "q4" in s.applies_to]
    assert "throughput_python" in optional and "step_latency" in optional
    assert row_of(variant_views("m", "q4"))["qualified"]        # none of the optional gates has a receipt


def test_a_failing_optional_gate_still_blocks():
    views = variant_views("m", "q4") + [ReceiptView(make_receipt("step_latency", outcome="fail", reasons=["nan logits"]))]
    r = row_of(views)
    assert r["blockers"] == ["step_latency: fail"] and r["gates"]["step_latency"]["reasons"] == [
        "suites/test_step_latency.py::test_step_latency[m-q4]: nan logits"]


def test_failing_error_and_stale_gates():
    views = variant_views("m", "q4", skip=("cache",))
    cache_fail = make_receipt("cache", nodeid="t::cache[a]", outcome="fail", reasons=["incremental differs"])
    cache_error = make_receipt("cache", nodeid="t::cache[b]", outcome="error", reasons=[])
    r = row_of(views + [ReceiptView(cache_fail), ReceiptView(cache_error)])
    assert r["gates"]["cache"]["outcome"] == "error"          # the worst receipt
    assert r["gates"]["cache"]["reasons"] == ["t::cache[a]: incremental differs", "t::cache[b]: error"]
    assert r["blockers"] == ["cache: error"] and not r["passed_all_gates"]

    stale = [dataclasses.replace(v, stale=("graph /x changed",)) if v.gate == "quantization" else v
             for v in variant_views("m", "q4")]
    r = row_of(stale)
    assert r["gates"]["quantization"]["outcome"] == "stale" and r["blockers"] == ["quantization: stale"]
    assert r["gates"]["quantization"]["reasons"][0].endswith(": stale: graph /x changed")
    assert r["gates"]["quantization"]["receipts"][0]["stale"] is True


def test_a_peer_graph_is_shown_never_qualified():
    peer = [ReceiptView(make_receipt(g, "m", "ort-genai-int4")) for g in ("cache", "quantization", "peer_ortgenai")]
    r = row_of(peer)
    assert r["passed_all_gates"] and not r["qualified"]                 # no gate is required of another tool's export
    assert r["blockers"] == ["peer graph (another tool's export): measured by cache, peer_ortgenai, quantization, "
                             "reported beside the variants, never qualified"]


def test_screening_and_the_ci_tier_never_qualify():
    r = row_of(variant_views("m", "q4"), screening=True)
    assert r["passed_all_gates"] and r["blockers"] == ["screening run: never reported as qualification"]
    assert qualify.is_screening({"screening": False}, [ReceiptView(make_receipt("cache", screening=True))])
    assert not qualify.is_screening({"screening": False}, variant_views("m", "q4"))
    r = row_of(variant_views("m", "q4", tier="ci"))
    assert r["passed_all_gates"] and r["blockers"] == ["CI-tier model: screening only"]


def test_an_unapproved_behavior_report_blocks():
    r = row_of(variant_views("m", "q4", approved=False))
    assert r["passed_all_gates"] and r["status"] == "screening"
    assert r["blockers"] == ["transcript review: no transcript review record approves this behavior report "
                             "(sha256 bbbbbbbbbbbb)"]


def test_run_level_receipts_by_the_registry():
    def level(gate, dtype="q4"):
        return qualify.is_run_level(ReceiptView(make_receipt(gate, "m", dtype)))
    assert level("throughput_goal", "fp32") and level("winrule") and level("streaming", "fp32")
    assert level("cache", None) and level("no_longer_registered")   # no variant, or a gate this harness forgot
    assert not level("cache") and not level("step_latency")
    views = variant_views("m", "q4") + [ReceiptView(make_receipt("winrule", "m", "q4"))]
    assert "winrule" not in row_of(views)["gates"]


# -- provenance -----------------------------------------------------------------------------------
def test_same_provenance_qualifies_even_when_load_and_clock_differ():
    views = variant_views("m", "q4")
    views[0] = ReceiptView(make_receipt("cache", machine={"loadavg_1m": 3.9, "cpu_mhz": 1800.0, "thermal_max_c": 80.0}))
    assert qualify.provenance_blockers(views) == [] and row_of(views)["qualified"]


def _mixed(**changed):
    """The q4 variant's receipts with the quantization receipt written by another harness, packages or machine."""
    return [ReceiptView(make_receipt("quantization", artifacts=v.artifacts, **changed)) if v.gate == "quantization" else v
            for v in variant_views("m", "q4")]


def test_a_harness_source_mix_blocks_and_names_the_receipts():
    r = row_of(_mixed(harness_sha="b" * 64))
    assert r["passed_all_gates"] and not r["qualified"]          # every gate passed; the mix is what blocks
    [blocker] = r["blockers"]
    assert blocker.startswith("provenance: harness source SHA-256 differs: aaaaaaaaaaaa in suites/test_cache.py::")
    assert "; bbbbbbbbbbbb in suites/test_quantization.py::test_quantization[m-q4]" in blocker
    assert "test_behavior.py::test_behavior[m-q4]" in blocker.split(";")[0]


def test_a_package_mix_blocks_and_names_package_versions_and_receipts():
    r = row_of(_mixed(packages={"numpy": "2.4.6", "onnxruntime": "1.31.0", "torch": "2.13.0+cpu"}))
    [blocker] = r["blockers"]
    assert blocker.startswith("provenance: package versions differ: onnxruntime (1.32.0 in suites/test_cache.py::")
    assert blocker.endswith("; 1.31.0 in suites/test_quantization.py::test_quantization[m-q4])")
    r = row_of(_mixed(packages={"numpy": "2.4.6", "torch": "2.13.0+cpu"}))
    assert "onnxruntime (1.32.0 in " in r["blockers"][0] and "; absent in suites/test_quantization.py" in r["blockers"][0]


def test_a_machine_mix_blocks_on_the_instruction_set_only():
    """Receipts of one variant from two hosts (a merged run) stand together when their kernels round alike."""
    assert row_of(_mixed(machine={"hostname": "other", "memory_total_bytes": 1, "cpu_mhz": 1.0}))["qualified"]
    r = row_of(_mixed(machine={"hostname": "other", "isa_flags": "sse2", "python": "3.12.0"}))
    [blocker] = r["blockers"]
    assert blocker.startswith("provenance: machine differs (kernels may round differently): isa_flags (")
    assert "; sse2 in suites/test_quantization.py::test_quantization[m-q4])" in blocker
    assert ", python (" in blocker and "hostname" not in blocker


def test_provenance_is_checked_per_variant():
    """Two variants measured by two harnesses are each consistent: neither is blocked by the other's receipts."""
    rows = qualify.variants(variant_views("m", "q4") + variant_views("m", "q8", harness_sha="c" * 64), False)
    assert [(r["dtype"], r["qualified"]) for r in rows] == [("q4", True), ("q8", True)]


def test_all_three_mixes_are_three_blockers_after_the_gate_blockers():
    views = _mixed(harness_sha="b" * 64, packages={"torch": "2.12.0"}, machine={"isa_flags": "sse2"})
    views = [v for v in views if v.gate != "throughput_browser"]
    blockers = row_of(views)["blockers"]
    assert blockers[0] == "throughput_browser: no receipt (incomplete)"
    assert [b.split(":")[1].strip() for b in blockers[1:]] == [
        "harness source SHA-256 differs", "package versions differ", "machine differs (kernels may round differently)"]


def test_a_skipped_optional_gate_is_shown_as_skipped_and_blocks_nothing():
    from harness.report import markdown, summary

    skip = make_receipt("step_latency", outcome="skip", reasons=["the campaign names no rounds for this model"])
    r = row_of(variant_views("m", "q4") + [ReceiptView(skip)])
    assert r["qualified"] and r["blockers"] == []                 # before: "step_latency: skip" blocked it
    assert markdown.gates_cell(r["gates"]).endswith("pass; skipped: step_latency")
    rep = {"variants": [{**r, "rank": None}], "label": "qualification"}
    assert summary.failing(rep) == [] and [g for _, g, _, _ in summary.failing(rep, skipped=True)] == ["step_latency"]
    failing = markdown._failing(rep)
    assert "## Failing gates" not in failing and "## Skipped gates" in failing


def test_a_failed_run_level_gate_is_listed_and_counted_as_pytest_counts_it(tmp_path):
    """An A/A window decided WIN fails a run-level receipt: the terminal's failing gates, report.md's and the
    summary line's count name it (the own-model walk's summary said 3 failing gates where pytest said 4 failed)."""
    import json

    from harness.report import assemble, markdown, summary

    aa = {"gate": "winrule", "outcome": "fail", "model": "m", "dtype": "q4",
          "nodeid": "suites/test_win_rule.py::test_win_rule[m-q4-aa]",
          "reasons": ["the A/A window (candidate identical to control) was decided WIN: the rule is not safe here"]}
    real = {**aa, "outcome": "skip", "nodeid": "suites/test_win_rule.py::test_win_rule[m-q4-real]",
            "reasons": ["[policy.winrule].expected declares no verdict for m"]}
    r = row_of(variant_views("m", "q4"))
    rep = {"variants": [{**r, "rank": None}], "label": "qualification", "run_level": [aa, real],
           "stale_receipts": [], "invalid_receipts": []}
    assert summary.failing(rep) == [("m-q4-aa", "winrule", "fail", aa["reasons"][0])]
    assert [v for v, *_ in summary.failing(rep, skipped=True)] == ["m-q4-real"]
    md = "\n".join(markdown._failing(rep))
    assert "- **m-q4-aa / winrule: fail**" in md and "- **m-q4-real / winrule: skip**" in md
    (tmp_path / "report.json").write_text(json.dumps(rep))
    assert "1 failing gate(s), 1 skipped" in assemble.summary_line(tmp_path / "report.json")


def test_a_skipped_required_gate_leaves_the_variant_incomplete_with_the_reason():
    views = variant_views("m", "q4", skip=("behavior",))
    views.append(ReceiptView(make_receipt("behavior", outcome="skip", reasons=[
        "fp32's reference is the PyTorch model, and this onnx source has no Hugging Face weights"])))
    r = row_of(views)
    assert r["blockers"] == ["behavior: skipped, not measured (incomplete): fp32's reference is the PyTorch model, "
                             "and this onnx source has no Hugging Face weights"]
    assert not r["qualified"]


def test_a_speed_timed_under_other_load_is_marked_in_the_variants_table():
    from harness.report import markdown

    quiet = {"decode_tok_s": 142.0, "decode_tok_s_iqr": 3.0, "foreign_cpu_share": 0.02}
    loaded = {**quiet, "foreign_cpu_share": 0.45}
    assert markdown.speed_cell(quiet) == "142 (IQR 3)"
    assert markdown.speed_cell(loaded) == "142 (IQR 3) ‡ under 45 % other load"
