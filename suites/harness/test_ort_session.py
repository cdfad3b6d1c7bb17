"""ONNX Runtime session settings: one record (harness.ortsession) that the decoder, the native probe and every
receipt share, and a qualification blocker when one variant's gates ran its graph with different settings."""

from pathlib import Path

import pytest

from harness import ortsession
from harness.report import qualify
from harness.view import ReceiptView

from test_report_collect import variant_views


def with_session(views, **changed):
    """The views with the campaign's settings recorded, ``changed`` (gate -> {key: value}) applied per gate."""
    out = []
    for v in views:
        data = dict(v.data)
        data["ort_session"] = {**ortsession.settings(2), **changed.get(v.gate, {})}
        out.append(ReceiptView(data, stale=v.stale, review=v.review, evidence=v.evidence))
    return out


def test_the_same_settings_in_every_gate_qualify():
    [row] = qualify.variants(with_session(variant_views("m", "q4")), screening=False)
    assert row["qualified"], row["blockers"]


@pytest.mark.parametrize("key, value", [("graph_optimization_level", "basic"), ("intra_op_threads", 1),
                                        ("free_dimension_overrides", {"batch": 1}),
                                        ("execution_provider", "XnnpackExecutionProvider")])
def test_a_setting_that_differs_between_a_variants_gates_blocks_it_naming_both(key, value):
    views = with_session(variant_views("m", "q4"), behavior={key: value})
    [row] = qualify.variants(views, screening=False)
    assert row["passed_all_gates"] and not row["qualified"]
    [blocker] = [b for b in row["blockers"] if b.startswith(qualify.SESSION)]
    assert f"{key} (" in blocker and f"{value!r} in suites/test_behavior.py::test_behavior[m-q4]" in blocker
    assert "suites/test_cache.py::test_cache[m-q4]" in blocker
    assert ("session", blocker) in qualify.to_qualify(row)


def test_receipts_without_a_record_are_not_compared():
    """A v1 receipt (written before the record existed) carries none: nothing to compare, no blocker."""
    views = variant_views("m", "q4")
    recorded = with_session(views[:1], cache={"intra_op_threads": 7}) + views[1:]
    [row] = qualify.variants(recorded, screening=False)
    assert row["qualified"], row["blockers"]


@pytest.fixture(scope="module")
def ci_graph(tmp_path_factory) -> Path:
    """A small real decoder graph (the probe tests' synthetic one: one layer, a KV cache)."""
    from test_throughput_probe import _decoder_graph

    path = tmp_path_factory.mktemp("ortsession") / "decoder.onnx"
    _decoder_graph(path)
    return path


def test_the_record_is_what_the_decoder_sets(ci_graph):
    from harness.runtime import OrtDecoder

    dec = OrtDecoder(ci_graph, threads=1, optimization="basic", options={"session.intra_op.allow_spinning": "0"})
    assert dec.settings == ortsession.settings(1, "basic", {"session.intra_op.allow_spinning": "0"})
    assert dec.session.get_providers() == [dec.settings["execution_provider"]]
    assert dec.session.get_session_options().intra_op_num_threads == dec.settings["intra_op_threads"]
    with pytest.raises(ValueError, match="unknown graph optimization level 'fast'"):
        ortsession.settings(2, "fast")


@pytest.mark.native
def test_the_native_probe_reports_the_settings_it_applied(ci_graph):
    import json
    import subprocess

    from harness.throughput import probe

    done = subprocess.run([str(probe.ensure_built()), "--graph", str(ci_graph), "--threads", "1"], input="",
                          capture_output=True, text=True, timeout=120)
    load = next(d for d in map(json.loads, done.stderr.splitlines()) if d.get("event") == "load")
    assert load["session"] == ortsession.settings(1)


def test_a_receipt_carries_the_record_and_refuses_a_second_different_one(tmp_path):
    from harness import receipt as receipts
    from harness.errors import ReceiptError
    from harness.receipt import Receipt

    from test_receipt import make

    data = make(tmp_path)
    assert "ort_session" not in data                           # a gate that ran no ONNX Runtime session
    r = Receipt("suites/test_x.py::test_gate[m-q4]", "cache", {"model": "m", "dtype": "q4"}, tmp_path / "ev")
    r.record_session(ortsession.settings(2))
    r.record_session(ortsession.settings(2))                   # the same record again is fine
    with pytest.raises(ReceiptError, match="ort_session recorded twice with different settings"):
        r.record_session(ortsession.settings(1))
    data["ort_session"] = ortsession.settings(2)
    receipts.validate(data, "r.json")
    data["ort_session"] = {**ortsession.settings(2), "graph_optimization_level": "max"}
    with pytest.raises(ReceiptError, match="ort_session/graph_optimization_level"):
        receipts.validate(data, "r.json")


def test_a_lane_whose_runtime_reports_its_session_records_it(tmp_path):
    from harness.receipt import Receipt

    r = Receipt("suites/test_x.py::test_lane[m-q4]", "throughput_native", {"model": "m", "dtype": "q4"}, tmp_path)
    r.record_lane("native-probe", {}, {"load_ms": 5.0, "threads": 2, "session": ortsession.settings(2)})
    assert r.ort_session == ortsession.settings(2)
