"""Where a run's time went (harness.report.timebudget): by gate, file, build and lane, from the run's logs."""

from types import SimpleNamespace

from harness.report.timebudget import NO_RECEIPT, SUITE_OWN, time_budget


def view(nodeid, gate, lane=None, model="m", dtype="q4"):
    return SimpleNamespace(nodeid=nodeid, gate=gate, model=model, dtype=dtype, data={"lane": lane})


def test_seconds_go_to_gates_files_builds_and_lanes():
    durations = [{"nodeid": "suites/test_cache.py::test_cache_allclose[m-q4]", "seconds": 2.0},
                 {"nodeid": "suites/test_cache.py::test_cache_allclose[m-q4]", "seconds": 3.0},   # a rerun replaces
                 {"nodeid": "suites/test_throughput_native.py::test_throughput_native[m-q4]", "seconds": 5.0},
                 {"nodeid": "suites/harness/test_rules.py::test_x", "seconds": 1.0},
                 {"nodeid": "suites/test_models.py::test_export_layout[ci]", "seconds": 1.0}]
    builds = [{"kind": "export", "label": "m export", "hit": False, "seconds": 4.0, "build_seconds": 4.0, "key": "e"},
              {"kind": "recipe", "label": "m recipe", "hit": False, "seconds": 9.0, "build_seconds": 9.0, "key": "r"},
              {"kind": "export", "label": "m export", "hit": True, "seconds": 0.0, "build_seconds": 4.0, "key": "e"},
              {"kind": "behavior", "label": "m eval", "hit": True, "seconds": 0.1, "build_seconds": 30.0, "key": "b"},
              {"kind": "behavior", "label": "m eval", "hit": True, "seconds": 0.1, "build_seconds": 30.0, "key": "b"},
              {"kind": "behavior", "label": "m eval2", "hit": True, "seconds": 0.1, "build_seconds": 6.0, "key": "c"}]
    views = [view("suites/test_cache.py::test_cache_allclose[m-q4]", "cache"),
             view("suites/test_throughput_native.py::test_throughput_native[m-q4]", "throughput_native",
                  lane={"name": "native-probe"})]
    t = time_budget(durations, builds, views)
    assert (t["tests"], t["test_seconds"]) == (4, 10.0)
    assert [(g["gate"], g["tests"], g["seconds"]) for g in t["by_gate"]] == [
        ("throughput_native", 1, 5.0), ("cache", 1, 3.0), (SUITE_OWN, 1, 1.0), (NO_RECEIPT, 1, 1.0)]
    assert t["by_gate"][0]["share"] == 0.5
    assert t["by_file"][0] == {"file": "suites/test_throughput_native.py", "tests": 1, "seconds": 5.0}
    assert (t["builds"]["cold"], t["builds"]["reused"], t["builds"]["cold_build_seconds"]) == (2, 4, 13.0)
    # an empty store would add each reused entry once (one built in this run is not counted again)
    assert (t["builds"]["reused_entries"], t["builds"]["reused_build_seconds"]) == (2, 36.0)
    assert t["builds"]["reused_by_kind"] == [{"kind": "behavior", "entries": 2, "build_seconds": 36.0}]
    assert [b["label"] for b in t["builds"]["largest"]] == ["m recipe", "m export"]
    assert t["lanes"] == [{"model": "m", "dtype": "q4", "gate": "throughput_native", "lane": "native-probe",
                           "seconds": 5.0}]


def test_an_empty_run_has_no_time():
    t = time_budget([], [], [])
    assert (t["tests"], t["test_seconds"], t["by_gate"], t["builds"]["acquisitions"]) == (0, 0, [], 0)
