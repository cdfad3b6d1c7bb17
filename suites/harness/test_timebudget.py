"""Where a run's time went (harness.report.timebudget): by gate, file, build and lane, from the run's logs."""

from types import SimpleNamespace

from harness.report.markdown import phase_lines
from harness.report.timebudget import NO_RECEIPT, SUITE_OWN, phase, time_budget


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


def line(nodeid, seconds, ended, exclusive=False, worker="gw0", session="s1"):
    return {"nodeid": nodeid, "unit": "u", "seconds": seconds, "exclusive": exclusive, "worker": worker,
            "session": session, "finished_at": f"2026-12-08T10:00:{ended:06.3f}+00:00"}


def test_the_phase_sets_the_exclusive_tests_and_an_even_split_against_the_wall_time():
    """Two workers: 10 s and 6 s of shared tests beside each other, then two timing tests (4 s, 3 s) alone. The
    even split is 7 + 16 / 2 = 15 s; the phase took 17 s (from 0 to 17), so 2 s went to gaps."""
    lines = [line("a", 10.0, 10.0), line("b", 6.0, 6.0, worker="gw1"),
             line("t1", 4.0, 14.0, exclusive=True), line("t2", 3.0, 17.0, exclusive=True, worker="gw1")]
    p = phase(lines)
    assert p == {"exclusive_tests": 2, "exclusive_seconds": 7.0, "workers": 2, "wall_seconds": 17.0,
                 "even_split_seconds": 15.0}
    text = " ".join(phase_lines(p))
    assert "2 tests held the machine exclusively" in text and "2 workers for 17 s" in text
    assert "would take 15 s" in text and "so 2 s went to gaps" in text
    # time_budget carries it, from each test's last line
    assert time_budget(lines, [], [])["phase"] == p


def test_a_phase_of_several_sessions_or_older_lines_gives_no_wall_time():
    lines = [line("a", 10.0, 10.0), line("t", 4.0, 14.0, exclusive=True)]
    # two sessions: --lf into the same run directory replaced one test's line (or shards merged into one report)
    two = phase([lines[0], {**lines[1], "session": "s2"}])
    assert two["wall_seconds"] is None
    assert (two["exclusive_seconds"], two["workers"], two["wall_seconds"], two["even_split_seconds"]) == (4.0, None, None, None)
    assert phase_lines(two) == ["1 test held the machine exclusively (timing tests, nothing beside them): 4 s.", ""]
    old = [{"nodeid": "a", "unit": "u", "seconds": 1.0}]                          # before these fields
    assert set(phase(old).values()) == {None} and phase_lines(phase(old)) == []
    # a rerun replaces a test's line: the budget sees two lines for one test
    rerun = time_budget([lines[0], lines[1], {**lines[1], "session": "s2", "finished_at": lines[1]["finished_at"]}], [], [])
    assert rerun["tests"] == 2 and rerun["phase"]["wall_seconds"] is None
    # every test run again in the second session: its lines alone are kept, one phase, its own wall time
    again = time_budget([*lines, *({**d, "session": "s2"} for d in lines)], [], [])
    assert again["phase"]["wall_seconds"] == 14.0
