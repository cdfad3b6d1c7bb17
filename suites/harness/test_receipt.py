"""Receipt schema round trip, rejection of malformed receipts, atomic replacement that keeps evidence."""

import copy
import json

import pytest

from harness import receipt as receipts
from harness.errors import ReceiptError
from harness.receipt import Receipt
from harness.verdict import Measurement, Verdict

SHA = "a" * 64


def make(tmp_path, outcome="pass", reasons=()):
    r = Receipt("suites/test_x.py::test_gate[m-q4]", "cache", {"model": "m", "dtype": "q4"}, tmp_path / "ev")
    r.set(parameters={"steps": 8}, policy={"atol": 1e-3}, seeds={"s": 1})
    r.pin_identity("graph", "/x/model.onnx", SHA, 10)
    r.decide(Verdict.from_checks(list(reasons), {"max_abs_error": Measurement(1e-5, "logit", 100)}))
    prov = {"harness": {"sha256": SHA, "git_commit": None}, "packages": {"numpy": "2"},
            "machine_before": {"cpu_model": "x", "logical_cpus": 2, "loadavg_1m": 0.1},
            "machine_after": {"loadavg_1m": 0.2}, "campaign": {"name": "c", "sha256": SHA, "screening": False}}
    return r.to_dict(outcome=outcome, reasons=list(reasons), provenance=prov,
                     run={"run_id": "r", "screening": False, "worker": "main"})


def test_round_trip(tmp_path):
    data = make(tmp_path)
    path = receipts.write(tmp_path / "receipts", data)
    assert receipts.load(path) == data
    assert path.read_text() == json.dumps(data, indent=2, sort_keys=True) + "\n"


@pytest.mark.parametrize("mutate, where", [
    (lambda d: d.pop("provenance"), "provenance"),
    (lambda d: d["verdict"].update(outcome="maybe"), "verdict/outcome"),
    (lambda d: d["artifacts"][0].update(sha256="nothex"), "artifacts/0/sha256"),
    (lambda d: d["measurements"].update({"BadName": {"value": 1, "unit": "x", "count": None}}), "measurements"),
    (lambda d: d["measurements"]["max_abs_error"].pop("unit"), "measurements/max_abs_error"),
    (lambda d: d.update(schema_version=3), "schema_version"),
    (lambda d: d.update(level="model"), "level"),
    (lambda d: d.update(lane={"name": "x", "cells": {"short": {"decode_tok_s": 1.0}}}), "lane"),
    (lambda d: d.update(winrule={"window": "sideways"}), "winrule"),
    (lambda d: d["verdict"].update(reasons=["but it failed"]), "passing receipt"),
])
def test_malformed_receipts_are_rejected_with_the_field(tmp_path, mutate, where):
    data = copy.deepcopy(make(tmp_path))
    mutate(data)
    with pytest.raises(ReceiptError) as err:
        receipts.validate(data, "r.json")
    assert "r.json" in str(err.value) and (where in str(err.value) or "schema_version" in str(err.value))


def test_invalid_receipt_is_never_written_and_old_evidence_survives(tmp_path):
    good = make(tmp_path)
    path = receipts.write(tmp_path / "receipts", good)
    bad = copy.deepcopy(good)
    bad["verdict"]["outcome"] = "maybe"
    with pytest.raises(ReceiptError):
        receipts.write(tmp_path / "receipts", bad)
    assert receipts.load(path) == good
    assert not list((tmp_path / "receipts").glob(".*tmp"))


def test_replacing_a_receipt_keeps_the_old_one(tmp_path):
    first = make(tmp_path)
    receipts.write(tmp_path / "receipts", first)
    second = make(tmp_path, outcome="fail", reasons=["worse"])
    path = receipts.write(tmp_path / "receipts", second)
    assert receipts.load(path)["verdict"]["outcome"] == "fail"
    kept = list((tmp_path / "superseded").glob("*.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text()) == first


def test_nan_becomes_null_and_non_json_is_refused(tmp_path):
    r = Receipt("n::t", "g", {"model": None, "dtype": None}, tmp_path)
    r.measure("x_s", float("nan"), "s")
    assert r.measurements["x_s"]["value"] is None
    with pytest.raises(ReceiptError):
        r.note("obj", object())


CELL = {"decode_tok_s": 150.0, "decode_tok_s_cv": 0.02, "decode_tok_s_iqr": 3.0, "prefill_ms_median": 12.5,
        "prefill_ms_iqr": 0.4, "repeats": 5, "cpu_per_wall": 1.9, "raw": [1, 2, 3]}


def test_a_lane_is_a_typed_block_with_units_spelled_out(tmp_path):
    r = Receipt("suites/test_x.py::test_lane[m-q4]", "throughput_native", {"model": "m", "dtype": "q4"}, tmp_path)
    r.record_lane("native-probe", {"short": CELL, "long": {**CELL, "decode_tok_s": float("nan")}},
                  load={"load_ms": 80.0, "threads": 2})
    prov = make(tmp_path)["provenance"]
    data = r.to_dict(outcome="pass", reasons=[], provenance=prov, run={"run_id": "r", "screening": False, "worker": "main"})
    receipts.validate(data)
    cell = data["lane"]["cells"]["short"]
    assert cell == {"decode_tokens_per_s": 150.0, "decode_tokens_per_s_cv": 0.02, "decode_tokens_per_s_iqr": 3.0,
                    "prefill_ms": 12.5, "prefill_ms_iqr": 0.4, "repeats": 5, "cpu_per_wall": 1.9}
    assert data["lane"]["cells"]["long"]["decode_tokens_per_s"] is None   # unknown is null, never NaN
    assert data["lane"]["load_ms"] == 80.0 and data["lane"]["threads"] == 2
    assert data["level"] == "variant" and data["behavior"] is None and data["winrule"] is None


def test_version_1_receipts_still_load(tmp_path):
    data = make(tmp_path)
    for key in ("level", "lane", "behavior", "winrule", "machine_during", "graph_recheck"):
        data.pop(key)
    data["schema_version"] = 1
    receipts.validate(data)
    with pytest.raises(ReceiptError, match="unknown receipt schema_version 0"):
        receipts.validate({**data, "schema_version": 0})


def test_a_lane_cell_may_carry_its_per_repeat_samples(tmp_path):
    """decode_tokens_per_s_samples (schema v2, optional): written from the loop's summary, finite numbers only;
    a cell without it (every receipt written before it) stays valid."""
    r = Receipt("suites/test_x.py::test_lane[m-q4]", "throughput_native", {"model": "m", "dtype": "q4"}, tmp_path)
    r.record_lane("native-probe", {"short": {**CELL, "decode_tok_s_samples": [148.0, 150.5, 151.0, 149.5, 150.0]},
                                   "long": {**CELL, "decode_tok_s_samples": [1.0, float("inf")]}, "mid": CELL})
    prov = make(tmp_path)["provenance"]
    data = r.to_dict(outcome="pass", reasons=[], provenance=prov, run={"run_id": "r", "screening": False, "worker": "main"})
    receipts.validate(data)
    cells = data["lane"]["cells"]
    assert cells["short"]["decode_tokens_per_s_samples"] == [148.0, 150.5, 151.0, 149.5, 150.0]   # one per repeat
    assert "decode_tokens_per_s_samples" not in cells["long"]      # a non-finite repeat: none rather than a partial list
    assert "decode_tokens_per_s_samples" not in cells["mid"]       # an older summary: absent, still valid
    for key, bad in (("decode_tokens_per_s_samples", []), ("decode_tokens_per_s_samples", ["fast"]),
                     ("decode_tokens_per_s_samples", 150.0),
                     ("decode_tok_s_samples", [1.0])):     # the summary's name is not the receipt's
        broken = copy.deepcopy(data)
        broken["lane"]["cells"]["short"][key] = bad
        with pytest.raises(ReceiptError, match="r.json: invalid receipt at lane/cells/short"):   # the field, not the oneOf
            receipts.validate(broken, "r.json")
