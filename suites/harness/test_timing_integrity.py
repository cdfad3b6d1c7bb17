"""What a timing receipt rests on besides its figures: the machine sampled during the timing
(``machine_during``), the engine files pinned (probe binary, ONNX Runtime library: ``harness.throughput.pins``),
every pinned graph re-hashed when the test ends (a graph that changed fails the test), and the report's
tables of them (the machine during each timing, steal and foreign CPU beside each lane, the behavior
evaluations' invalid-output counters per model).

The real receipts come from one child pytest of the CI tier's timing gates (native probe, Python onnxruntime,
ORT-GenAI's loop, the probe on its graph, step latency, the interleaved goal rounds, and one browser page), one
test of each gate and lane.
"""

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import receipt as receipts
from harness.errors import ArtifactError, ReceiptError
from harness.hashing import sha256_file
from harness.receipt import Receipt
from harness.report import collect as collect_mod
from harness import view as view_mod
from harness.report import integrity
from harness.view import ReceiptView
from harness.sampler import FIGURES
from harness.throughput import pins, probe
from harness.verdict import Measurement, Verdict

from socket_hosts import QUIET   # plugins no child pytest here uses, not loaded (1.5 s of CPU per child)

ROOT = Path(__file__).resolve().parents[2]
SHA = "c" * 64
PROV = {"harness": {"sha256": SHA, "git_commit": None}, "packages": {"numpy": "2"},
        "machine_before": {"cpu_model": "x", "logical_cpus": 2, "loadavg_1m": 0.1},
        "machine_after": {"loadavg_1m": 0.2}, "campaign": {"name": "c", "sha256": SHA, "screening": False}}
RUN = {"run_id": "r", "screening": False, "worker": "main"}


def _dict(r: Receipt, outcome="pass", reasons=()):
    return receipts.validate(r.to_dict(outcome=outcome, reasons=list(reasons), provenance=PROV, run=RUN), r.nodeid)


# -- the sampler in the receipt ------------------------------------------------------------------------
def test_sampling_records_the_machine_during_the_block_even_when_it_raises(tmp_path):
    r = Receipt("suites/test_t.py::test_lane[m-q4]", "throughput_native", {"model": "m", "dtype": "q4"}, tmp_path)
    with pytest.raises(RuntimeError, match="lane died"):
        with r.sampling("a lane that dies", interval_s=0.05):
            time.sleep(0.12)
            raise RuntimeError("lane died")
    m = _dict(r)["machine_during"]
    assert m["covers"] == "a lane that dies" and m["samples"] >= 3 and m["interval_s"] == 0.05
    assert set(FIGURES) <= set(m) and {"steal_fraction", "foreign_cpu_share", "absent"} <= set(m)
    with pytest.raises(ReceiptError, match="already recorded .'a lane that dies'.; sample the whole timing in one block"):
        with r.sampling("a second span"):
            pass


def test_the_schema_types_machine_during_and_graph_recheck(tmp_path):
    r = Receipt("n::t[m-q4]", "throughput_native", {"model": "m", "dtype": "q4"}, tmp_path)
    with r.sampling("t", interval_s=0.05):
        pass
    r.recheck_graphs()
    good = _dict(r)
    assert good["graph_recheck"] == {"roles": list(receipts.GRAPH_ROLES), "checked": [], "changed": [],
                                     "duration_s": good["graph_recheck"]["duration_s"]}
    for mutate, where in [(lambda d: d["machine_during"].update(steal_fraction="high"), "machine_during"),
                          (lambda d: d["machine_during"].pop("foreign_cpu_share"), "machine_during"),
                          (lambda d: d["graph_recheck"]["changed"].append({"role": "graph"}), "graph_recheck")]:
        bad = json.loads(json.dumps(good))
        mutate(bad)
        with pytest.raises(ReceiptError, match=where):
            receipts.validate(bad, "r.json")
    old = {k: v for k, v in good.items() if k not in ("machine_during", "graph_recheck")}
    receipts.validate(old, "an earlier v2 receipt")   # written before these fields: still valid


# -- graphs re-hashed after measuring ------------------------------------------------------------------
def test_recheck_names_a_changed_and_a_vanished_graph_with_both_hashes(tmp_path):
    a, b = tmp_path / "model.onnx", tmp_path / "model.onnx.data"
    a.write_bytes(b"graph")
    b.write_bytes(b"weights")
    r = Receipt("n::t[m-q4]", "cache", {"model": "m", "dtype": "q4"}, tmp_path)
    r.pin(a, "graph")
    r.pin(b, "graph_data")
    r.pin(tmp_path / "model.onnx", "reference_graph")
    assert r.recheck_graphs() == [] and len(r.graph_recheck["checked"]) == 3
    before, data_sha = sha256_file(a), sha256_file(b)
    a.write_bytes(b"other graph")
    b.unlink()
    reasons = r.recheck_graphs()
    after = sha256_file(a)
    assert reasons == [
        f"graph {a} changed during the test: SHA-256 {before} when pinned, {after} after measuring (5 -> 11 bytes); "
        f"the figures do not describe one graph",
        f"graph_data {b} is gone after measuring (pinned SHA-256 {data_sha}): "
        f"the figures describe no graph on disk",
        f"reference_graph {a} changed during the test: SHA-256 {before} when pinned, {after} after measuring "
        f"(5 -> 11 bytes); the figures do not describe one graph"]
    assert receipts.recheck_reasons(_dict(r, "fail", reasons)["graph_recheck"]) == reasons


def test_recheck_reads_each_file_once_and_only_graphs(tmp_path, monkeypatch):
    g = tmp_path / "g.onnx"
    g.write_bytes(b"g")
    other = tmp_path / "report.json"
    other.write_bytes(b"{}")
    r = Receipt("n::t[m-q4]", "behavior", {"model": "m", "dtype": "q4"}, tmp_path)
    for role in ("graph", "reference_graph"):
        r.pin(g, role)
    r.pin(other, "behavior_report")
    read = []
    real = receipts.file_identity
    monkeypatch.setattr(receipts, "file_identity", lambda p: read.append(str(p)) or real(p))
    assert r.recheck_graphs() == []
    assert read == [str(g)]


GATE_TEST = '''
import os, time
from pathlib import Path
import pytest
from harness.verdict import Measurement, Verdict

@pytest.mark.gate("toy")
def test_toy_gate(variant, receipt, tmp_path):
    graph = tmp_path / f"{variant.id}.onnx"
    graph.write_bytes(b"graph of " + variant.id.encode())
    receipt.pin(graph, "graph")
    receipt.pin(graph, "reference_graph")
    with receipt.sampling("a toy timing", interval_s=0.05):
        time.sleep(0.06)
        if variant.id in os.environ.get("TOY_CHANGE", "").split(","):
            graph.write_bytes(b"rewritten while measuring")   # as an export rebuilt under a running test would
    verdict = receipt.decide(Verdict.from_checks([], {"value_s": Measurement(1.5, "s", 3)}))
    assert verdict.passed, verdict.render()
'''
CONFTEST = '''
from harness import gates
from harness.gates.spec import GateSpec, NoEvidence, NoPolicy

gates.register(GateSpec(name="toy", level="variant", applies_to=("fp32", "q4"), policy=NoPolicy, evidence=NoEvidence,
                        decide=lambda evidence, policy: evidence, describe="a toy gate", required=False))
'''


def test_a_graph_changed_while_measuring_fails_the_test_and_its_receipt_says_why(gate_sandbox, tmp_path, monkeypatch):
    pt = gate_sandbox(GATE_TEST, CONFTEST)
    monkeypatch.setenv("TOY_CHANGE", "ci-tiny-q4")
    run_dir = tmp_path / "run"
    result = pt.runpytest_subprocess("--campaign", "campaign.toml", "--run-dir", str(run_dir), "-p", "no:randomly",
                                     *QUIET)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*a pinned graph changed while the test measured it:*",
                                 "*graph *ci-tiny-q4.onnx changed during the test: SHA-256 * when pinned, * after measuring*"])
    got = {d["variant"]["dtype"]: d for d in (json.loads(p.read_text()) for p in (run_dir / "receipts").glob("*.json"))}
    q4, fp32 = got["q4"], got["fp32"]
    pinned = hashlib.sha256(b"graph of ci-tiny-q4").hexdigest()
    changed = q4["graph_recheck"]["changed"]
    assert q4["verdict"]["outcome"] == "fail" and q4["verdict"]["decided"] is True   # the rule passed; the graph did not hold
    assert [c["role"] for c in changed] == ["graph", "reference_graph"] and len(q4["graph_recheck"]["checked"]) == 2
    assert changed[0]["sha256_pinned"] == pinned
    assert changed[0]["sha256_after"] == hashlib.sha256(b"rewritten while measuring").hexdigest()
    assert q4["verdict"]["reasons"] == receipts.recheck_reasons(q4["graph_recheck"])
    assert pinned in q4["verdict"]["reasons"][0] and changed[0]["sha256_after"] in q4["verdict"]["reasons"][0]
    assert fp32["verdict"]["outcome"] == "pass" and fp32["graph_recheck"]["changed"] == []
    assert q4["machine_during"]["covers"] == "a toy timing" and q4["machine_during"]["samples"] >= 2
    report = json.loads((run_dir / "report.json").read_text())
    gates_by_dtype = {v["dtype"]: v["gates"]["toy"] for v in report["variants"]}
    assert gates_by_dtype["q4"]["outcome"] == "fail" and "changed during the test" in gates_by_dtype["q4"]["reasons"][0]


# -- engine files pinned -------------------------------------------------------------------------------
class Pins:
    def __init__(self):
        self.artifacts = []

    def pin_identity(self, role, path, sha256, size):
        self.artifacts.append((role, path, sha256, size))


def test_pin_runtime_pins_the_probe_its_library_and_in_process_engines(tmp_path, monkeypatch):
    import onnxruntime  # noqa: F401  (the Python lane's runtime, loaded)

    binary, lib = tmp_path / "gatehouse-probe", tmp_path / "libonnxruntime.so.1.32.0"
    binary.write_bytes(b"probe")
    lib.write_bytes(b"runtime")
    r = Pins()
    got = pins.pin_runtime(r, probe_binary=binary, probe_load={"runtime_library": str(lib)}, in_process=("onnxruntime",))
    roles = [g["role"] for g in got]
    assert roles[:2] == ["probe_binary", "onnxruntime_library"] and got[0]["sha256"] == sha256_file(binary)
    assert got[1] == {"role": "onnxruntime_library", "path": str(lib), "sha256": sha256_file(lib), "bytes": 7}
    assert any("onnxruntime_pybind11_state" in g["path"] for g in got[2:]) and len(r.artifacts) == len(got)
    # no load record (the probe never started): the library native/setup.sh linked it against
    monkeypatch.setattr(probe, "BUILD", tmp_path)
    (tmp_path / "RUNTIME").write_text(f"{lib}\n")
    assert pins.probe_runtime_library(None) == lib
    (tmp_path / "RUNTIME").unlink()
    with pytest.raises(ArtifactError, match="RUNTIME: the probe's runtime library is not recorded"):
        pins.probe_runtime_library({"runtime_library": "unknown"})
    with pytest.raises(ValueError, match="unknown in-process engine 'torch'"):
        pins.pin_runtime(r, in_process=("torch",))


def test_an_engine_not_loaded_is_refused_and_a_rewritten_file_is_hashed_again(tmp_path):
    maps = "7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n7f02-7f03 rw-p 0 0:0 0 [heap]\n"
    assert pins.mapped_files(maps) == ["/usr/lib/x86_64-linux-gnu/libc.so.6"]
    assert pins.loaded_shared_objects("onnxruntime", maps=maps) == []
    f = tmp_path / "lib.so"
    f.write_bytes(b"one")
    first = pins.identity(f)
    time.sleep(0.01)
    f.write_bytes(b"two")   # a rewrite changes mtime and ctime: the cached hash is not reused
    assert pins.identity(f)["sha256"] == sha256_file(f) != first["sha256"]


# -- the real receipts of the CI tier's timing gates ------------------------------------------------------
REAL = ("suites/test_throughput_native.py", "suites/test_step_latency.py", "suites/test_throughput_browser.py")
REAL_SELECT = "ci and (throughput_native or throughput_python or peer_ortgenai or step_latency or throughput_goal " \
              "or throughput_browser)"
# One test per gate and lane: what a receipt carries is decided by the gate's test and the plugin, not by the graph it
# timed, so the other variants' receipts (the native probe on five more graphs and on ORT-GenAI's k-quant build, the
# Python lane on two more, step latency on five more, ORT-GenAI's loop on its k-quant build) repeat the same checks
# (20 s of the child's 110 s of tests, measured 2026-12-07 under load). Kept: the fp32 graph in each lane (the goal's
# one test, one browser page) and ORT-GenAI's int4 build twice: its own loop (peer_ortgenai) and the native probe on
# its graph (a graph with external data: graph and graph_data pinned and re-hashed).
REAL_K = "(fp32 and (not throughput_browser or transformers)) or int4"


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("timing")
    run_dir = tmp / "run"
    env = {**os.environ, "GATEHOUSE_LOCK_DIR": str(tmp / "locks")}
    out = subprocess.run([sys.executable, "-m", "pytest", *QUIET, *REAL, "-m", REAL_SELECT, "-k", REAL_K, "--run-dir",
                          str(run_dir), "-p", "no:cacheprovider", "-q", "-n", "0"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=900)
    found = [json.loads(p.read_text()) for p in sorted((run_dir / "receipts").glob("*.json"))]
    assert found and out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return run_dir, found


def _roles(d, role):
    return [a for a in d["artifacts"] if a["role"] == role]


@pytest.mark.ci
@pytest.mark.slow
def test_every_real_timing_receipt_carries_the_machine_engine_pins_and_graph_recheck(real_run):
    run_dir, found = real_run
    gates = {d["gate"] for d in found}
    assert gates == {"throughput_native", "throughput_python", "peer_ortgenai", "step_latency", "throughput_goal",
                     "throughput_browser"}
    for d in found:
        m = d["machine_during"]
        assert m is not None and m["covers"] and m["samples"] >= 2, d["nodeid"]
        assert m["steal_fraction"] is not None and m["foreign_cpu_share"] is not None, (d["nodeid"], m["absent"])
        assert 0 <= m["steal_fraction"] <= 1 and 0 <= m["foreign_cpu_share"] <= 1
        recheck = d["graph_recheck"]
        assert recheck["changed"] == [], d["nodeid"]
        assert sorted(c["path"] for c in recheck["checked"]) == sorted(
            a["path"] for a in d["artifacts"] if a["role"] in receipts.GRAPH_ROLES), d["nodeid"]
        if d["gate"] not in ("throughput_goal", "throughput_browser"):
            assert recheck["checked"], d["nodeid"]
        if d["gate"] == "throughput_native":   # the probe and the library its process reported loading
            (binary,) = _roles(d, "probe_binary")
            assert binary["sha256"] == sha256_file(probe.BINARY) and binary["bytes"] == probe.BINARY.stat().st_size
            (lib,) = _roles(d, "onnxruntime_library")
            assert lib["path"] == d["extra"]["load_receipt"]["runtime_library"] and lib["sha256"] == sha256_file(lib["path"])
        if d["gate"] in ("throughput_python", "step_latency"):   # the runtime linked into onnxruntime's pybind module
            assert [Path(a["path"]).name.split(".")[0] for a in _roles(d, "onnxruntime_library")] == \
                ["onnxruntime_pybind11_state"]
        if d["gate"] == "peer_ortgenai":
            assert _roles(d, "onnxruntime_genai_library") and _roles(d, "onnxruntime_library")
    md = (run_dir / "report.md").read_text()
    assert "## The machine during each timing" in md and "not sampled" not in md
    lanes = md[md.index("## Throughput, every lane"):]
    assert "| steal | foreign CPU |" in lanes.splitlines()[4]
    rep = json.loads((run_dir / "report.json").read_text())
    assert all(l["foreign_cpu_share"] is not None and l["steal_fraction"] is not None for l in rep["lanes"])


# -- the report's tables ----------------------------------------------------------------------------------
def _behavior(tmp_path, dtype, reference, invalid, ref_invalid):
    r = Receipt(f"suites/test_behavior.py::test_behavior_parity[m-{dtype}]", "behavior", {"model": "m", "dtype": dtype},
                tmp_path)
    r.set(parameters={"reference": reference})
    counts = lambda xs: {f"{mode}.{c}": {"numerator": n, "denominator": 20} for mode, row in xs.items()
                         for c, n in zip(view_mod.INVALID_OUTPUT_COUNTERS, row)}
    r.record_behavior({"quality_index": 50.0, "reference_quality_index": 55.0, "categories": ["format"],
                       "rate_counts": {"greedy.format": {"numerator": 10, "denominator": 20}, **counts(invalid)},
                       "reference_rate_counts": counts(ref_invalid), "timing": {"seconds": 1.0, "modes": {}}})
    r.decide(Verdict.from_checks([], {"quality_index": Measurement(50.0, "points/100")}))
    return ReceiptView(_dict(r))


def test_invalid_output_counters_are_tabled_per_model_beside_each_reference(tmp_path):
    from harness.behavior.evaluate import COUNTERS

    assert view_mod.INVALID_OUTPUT_COUNTERS == COUNTERS
    graph = {"greedy": (0, 1, 0, 3), "sampled": (1, 1, 0, 4)}
    views = [_behavior(tmp_path, "fp32", "pytorch", graph, {"greedy": (0, 0, 0, 2), "sampled": (0, 1, 0, 3)}),
             _behavior(tmp_path, "q4", "fp32 graph", {"greedy": (2, 1, 1, 6), "sampled": (3, 1, 0, 7)}, graph),
             _behavior(tmp_path, "q8", "fp32 graph", {"greedy": (0, 1, 0, 3), "sampled": (1, 1, 0, 5)}, graph)]
    lines = integrity.invalid_output_lines(views)
    assert lines[0] == "## Invalid outputs in the behavior evaluations" and "### m" in lines
    header = next(l for l in lines if l.startswith("| graph"))
    assert header == ("| graph | reference of | greedy.repetition | greedy.empty | greedy.garbage | greedy.budget exhausted "
                      "| sampled.repetition | sampled.empty | sampled.garbage | sampled.budget exhausted |")
    rows = [l for l in lines if l.startswith("| ") and not l.startswith("| graph")]
    assert rows == ["| fp32 |  | 0/20 | 1/20 | 0/20 | 3/20 | 1/20 | 1/20 | 0/20 | 4/20 |",
                    "| q4 |  | 2/20 | 1/20 | 1/20 | 6/20 | 3/20 | 1/20 | 0/20 | 7/20 |",
                    "| q8 |  | 0/20 | 1/20 | 0/20 | 3/20 | 1/20 | 1/20 | 0/20 | 5/20 |",
                    "| reference: pytorch | fp32 | 0/20 | 0/20 | 0/20 | 2/20 | 0/20 | 1/20 | 0/20 | 3/20 |",
                    "| reference: fp32 graph | q4, q8 | 0/20 | 1/20 | 0/20 | 3/20 | 1/20 | 1/20 | 0/20 | 4/20 |"]


def test_a_malformed_counter_is_refused_by_name_not_rendered(tmp_path):
    view = _behavior(tmp_path, "q4", "fp32 graph", {"greedy": (0, 0, 0, 0)}, {"greedy": (0, 0, 0, 0)})
    data = json.loads(json.dumps(dict(view.data)))
    data["behavior"]["reference_rate_counts"]["greedy.garbage"] = {"numerator": "1", "denominator": 20}
    assert collect_mod.readable(data) == ["behavior.reference_rate_counts.greedy.garbage: expected integer numerator "
                                          "and denominator, got {'numerator': '1', 'denominator': 20}"]


def test_the_machine_table_shows_each_timing_and_an_exclusive_receipt_that_was_not_sampled(tmp_path):
    sampled = Receipt("suites/test_throughput_native.py::test_throughput_native[m-q4]", "throughput_native",
                      {"model": "m", "dtype": "q4"}, tmp_path)
    sampled.exclusive = True
    sampled.record_machine_during({**{k: None for k in FIGURES}, "steal_fraction": 0.0123, "steal_fraction_peak": 0.05,
                                   "iowait_fraction": 0.0, "foreign_cpu_share": 0.4567, "run_queue_mean": 2.5,
                                   "run_queue_peak": 4, "cpu_mhz_min": 2596.2, "cpu_mhz_max": 2596.2, "samples": 9,
                                   "interval_s": 0.5, "duration_s": 4.0, "cpu_mhz_source": "cpuinfo",
                                   "absent": ["cpu_mhz_spread"]}, "the native-probe lane")
    sampled.record_lane("native-probe", {"short": {"decode_tok_s": 100.0, "prefill_ms_median": 5.0, "repeats": 3}})
    bare = Receipt("suites/test_streaming.py::test_streaming[x]", "streaming", {"model": None, "dtype": None}, tmp_path)
    bare.exclusive = True
    views = [ReceiptView(_dict(sampled)), ReceiptView(_dict(bare))]
    lines = integrity.machine_during_lines(views)
    assert "| streaming | x | not sampled | — | — | — | — | — | — | — | — | — |" in lines
    assert ("| throughput_native | m-q4 | the native-probe lane | 4 s | 9 | 1.23 % | 5 % | 0 % | 45.7 % | 2.5/4 | "
            "2,600 (cpuinfo) | cpu_mhz_spread |") in lines   # one formatter: 3 significant figures, units
    from harness.gates import throughput_native

    table = throughput_native.section(views)[0].tables()[0]
    assert table.rows[-1][-2:] == ("1.23 %", "45.7 %")
