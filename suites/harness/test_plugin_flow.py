"""The plugin end to end through pytester: receipts, report rebuild, staleness, --lf, -n 2, refusals."""

import json

import pytest

# The toy gates' declarations: a project's conftest registers its own gates the same way.
CONFTEST = '''
from harness import gates
from harness.gates.spec import GateSpec, NoEvidence, NoPolicy

gates.register(GateSpec(name="toy", level="variant", applies_to=("fp32", "q4"), policy=NoPolicy, evidence=NoEvidence,
                        decide=lambda evidence, policy: evidence, describe="a toy gate", required=False))
gates.register(GateSpec(name="toy_setup", level="run", applies_to=(), policy=NoPolicy, evidence=NoEvidence,
                        decide=lambda evidence, policy: evidence, describe="a toy gate whose fixture can break"))
'''

GATE_TEST = '''
import os
from pathlib import Path
import pytest
from harness.verdict import Measurement, Verdict

@pytest.mark.gate("toy")
def test_toy_gate(variant, receipt):
    art = Path(os.environ["TOY_ARTIFACT"])
    receipt.pin(art, "graph")
    failing = set(filter(None, os.environ.get("TOY_FAIL", "").split(",")))
    reasons = [f"{variant.id} told to fail"] if variant.id in failing else []
    verdict = receipt.decide(Verdict.from_checks(reasons, {"value_s": Measurement(1.5, "s", 3)}))
    assert verdict.passed, verdict.render()

@pytest.mark.gate("toy_setup")
def test_setup_error(receipt, broken):
    pass

@pytest.fixture
def broken():
    if os.environ.get("TOY_BROKEN"):
        raise FileNotFoundError("/models/missing.gguf: model file is missing")
'''


@pytest.fixture
def sandbox(toy_sandbox, monkeypatch):
    monkeypatch.delenv("TOY_FAIL", raising=False)
    monkeypatch.delenv("TOY_BROKEN", raising=False)
    return toy_sandbox(GATE_TEST, CONFTEST)


def run(pt, run_dir, *args):
    return pt.runpytest_subprocess("--campaign", "campaign.toml", "--run-dir", str(run_dir), "-p", "no:randomly", *args)


def receipts_of(run_dir):
    return {json.loads(p.read_text())["nodeid"]: json.loads(p.read_text()) for p in (run_dir / "receipts").glob("*.json")}


def test_receipts_report_and_lf_flow(sandbox, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    monkeypatch.setenv("TOY_FAIL", "ci-tiny-q4")
    result = run(sandbox, run_dir)
    result.assert_outcomes(passed=2, failed=1)
    first = receipts_of(run_dir)
    assert {r["verdict"]["outcome"] for r in first.values()} == {"pass", "fail"}
    q4 = next(r for n, r in first.items() if "q4" in n)
    assert q4["verdict"]["reasons"] == ["ci-tiny-q4 told to fail"]
    assert q4["artifacts"][0]["bytes"] == len(b"graph-bytes")
    report = json.loads((run_dir / "report.json").read_text())
    assert {(v["dtype"], v["gates"]["toy"]["outcome"]) for v in report["variants"]} == {("fp32", "pass"), ("q4", "fail")}

    monkeypatch.setenv("TOY_FAIL", "")
    result = run(sandbox, run_dir, "--lf")
    result.assert_outcomes(passed=1)
    second = receipts_of(run_dir)
    assert set(second) == set(first)  # the report keeps every receipt
    for nodeid, r in second.items():
        if "q4" in nodeid:
            assert r["verdict"]["outcome"] == "pass"
        else:
            assert r == first[nodeid]
    assert len(list((run_dir / "superseded").glob("*.json"))) == 1
    report = json.loads((run_dir / "report.json").read_text())
    assert all(v["gates"]["toy"]["outcome"] == "pass" for v in report["variants"])


def test_stale_receipts_are_shown_not_mixed_in(sandbox, tmp_path):
    run_dir = tmp_path / "run"
    run(sandbox, run_dir).assert_outcomes(passed=3)
    sandbox.art.write_bytes(b"changed")
    from harness import report

    report.rebuild(run_dir)
    rep = json.loads((run_dir / "report.json").read_text())
    assert len(rep["stale_receipts"]) == 2 and "changed" in rep["stale_receipts"][0]["reasons"][0]
    assert all(v["gates"]["toy"]["outcome"] == "stale" and not v["passed_all_gates"] for v in rep["variants"])


PHASE_TEST = '''
import os
from pathlib import Path
import pytest
from harness.verdict import Measurement, Verdict

def _measure(receipt):
    receipt.pin(Path(os.environ["TOY_ARTIFACT"]), "graph")
    receipt.decide(Verdict.from_checks([], {"value_s": Measurement(1.5, "s", 3)}))

@pytest.mark.gate("toy")
def test_untimed(variant, receipt):
    _measure(receipt)

@pytest.mark.exclusive
@pytest.mark.gate("toy_setup")
def test_timed(receipt):
    _measure(receipt)
'''


def test_xdist_gives_the_same_receipts_and_report_as_serial(toy_sandbox, tmp_path, monkeypatch):
    """The same receipts and report verdicts serial and on two workers.  Each run's ``durations.jsonl`` names, per
    test, whether it held the machine lock exclusively (the plugin's own lock as taken, not the marker's wish), its
    worker and the session; the report's time budget sets the exclusive tests and the even split against the
    phase's wall time.  The children take their own private lock, not this test's hold."""
    from harness import locks

    monkeypatch.delenv(locks.HELD_ENV, raising=False)
    sandbox = toy_sandbox(PHASE_TEST, CONFTEST)
    serial, parallel = tmp_path / "serial", tmp_path / "parallel"
    run(sandbox, serial).assert_outcomes(passed=3)
    run(sandbox, parallel, "-n", "2").assert_outcomes(passed=3)
    for run_dir, workers in ((serial, {"main"}), (parallel, {"gw0", "gw1"})):
        lines = [json.loads(x) for x in (run_dir / "durations.jsonl").read_text().splitlines()]
        assert len(lines) == 3 and {x["nodeid"].split("::")[1].split("[")[0]: x["exclusive"] for x in lines} == {
            "test_untimed": False, "test_timed": True}, lines
        assert {x["worker"] for x in lines} <= workers and len({x["session"] for x in lines}) == 1
        phase = json.loads((run_dir / "report.json").read_text())["time"]["phase"]
        assert phase["exclusive_tests"] == 1 and phase["workers"] == len({x["worker"] for x in lines})
        assert phase["wall_seconds"] > 0 and phase["even_split_seconds"] > 0
        assert "1 test held the machine exclusively" in (run_dir / "report.md").read_text()
    # one worker: every test one after another, so the even split is their sum, within the wall time
    phase = json.loads((serial / "report.json").read_text())["time"]["phase"]
    lines = [json.loads(x) for x in (serial / "durations.jsonl").read_text().splitlines()]
    assert phase["even_split_seconds"] == pytest.approx(sum(x["seconds"] for x in lines), abs=0.01)
    assert phase["wall_seconds"] >= phase["even_split_seconds"] - 0.05
    a, b = receipts_of(serial), receipts_of(parallel)
    assert set(a) == set(b)
    for nodeid in a:
        for key in ("gate", "variant", "verdict", "measurements", "artifacts", "parameters", "policy"):
            assert a[nodeid][key] == b[nodeid][key], (nodeid, key)
    assert {r["run"]["worker"] for r in b.values()} <= {"gw0", "gw1"}
    ra, rb = (json.loads((d / "report.json").read_text())["variants"] for d in (serial, parallel))
    strip = lambda vs: [{k: v for k, v in x.items() if k != "gates"} for x in vs]
    assert strip(ra) == strip(rb)


def test_a_different_campaign_is_refused_and_nothing_is_lost(sandbox, tmp_path):
    run_dir = tmp_path / "run"
    run(sandbox, run_dir).assert_outcomes(passed=3)
    before = receipts_of(run_dir)
    sandbox.makefile(".toml", campaign=(sandbox.path / "campaign.toml").read_text().replace("seed = ", "seed = 1"))
    result = run(sandbox, run_dir)
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*run.json*belongs to campaign*refusing*"])
    assert receipts_of(run_dir) == before


def test_a_malformed_campaign_names_the_file_and_field(sandbox, tmp_path):
    sandbox.makefile(".toml", campaign=(sandbox.path / "campaign.toml").read_text().replace(
        'dtypes = ["fp32", "q8", "q4"]', 'dtypes = ["fp32", "q3"]'))
    result = run(sandbox, tmp_path / "run")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*campaign.toml*dtypes*unknown dtype 'q3'*"])
    assert not (tmp_path / "run").exists()


def test_a_setup_error_gets_a_complete_error_receipt(sandbox, tmp_path, monkeypatch):
    monkeypatch.setenv("TOY_BROKEN", "1")
    run_dir = tmp_path / "run"
    run(sandbox, run_dir).assert_outcomes(passed=2, errors=1)
    broken = next(r for n, r in receipts_of(run_dir).items() if "setup_error" in n)
    assert broken["verdict"]["outcome"] == "error"
    assert "missing.gguf: model file is missing" in broken["verdict"]["reasons"][0]
    assert not list((run_dir / "receipts").glob(".*"))


ORDER_TEST = '''
import os
import pytest

def _ran(name):
    with open(os.environ["ORDER_FILE"], "a") as f:
        f.write(f"{os.environ.get('PYTEST_XDIST_WORKER', 'serial')} {name}\\n")

@pytest.mark.exclusive
@pytest.mark.parametrize("k", range(3))
def test_timed(k):
    _ran(f"timed{k}")

@pytest.mark.parametrize("k", range(6))
def test_shared(k):
    _ran(f"shared{k}")
'''
SLOW_TEST = '''
import pytest
from test_toy import _ran

def test_quick():
    _ran("zquick")

@pytest.mark.slow
def test_long():
    _ran("zlong")
'''


def test_under_xdist_slow_modules_go_first_and_exclusive_tests_last(gate_sandbox, tmp_path, monkeypatch):
    """Interleaved, a worker about to time waited idle for the other worker's test, once per timing test; the workers
    collect the modules with a slow test first (whole) and the exclusive tests last, so xdist hands them out in that
    order. A serial run keeps the collected order."""
    pt = gate_sandbox(ORDER_TEST, CONFTEST)
    pt.makepyfile(test_zslow=SLOW_TEST)
    collected = [f"timed{k}" for k in range(3)] + [f"shared{k}" for k in range(6)] + ["zquick", "zlong"]
    for how, args in (("serial", ()), ("parallel", ("-n", "2", "--maxschedchunk", "1"))):
        order = tmp_path / f"{how}.txt"
        monkeypatch.setenv("ORDER_FILE", str(order))
        run(pt, tmp_path / how, *args).assert_outcomes(passed=11)
        lines = [line.split() for line in order.read_text().splitlines()]
        if how == "serial":
            assert [n for _, n in lines] == collected
            continue
        assert {w for w, _ in lines} == {"gw0", "gw1"}, lines
        rank = lambda n: 0 if n.startswith("z") else 2 if n.startswith("timed") else 1
        for worker in ("gw0", "gw1"):
            names = [n for w, n in lines if w == worker]
            assert [rank(n) for n in names] == sorted(rank(n) for n in names), (worker, names)
        assert sorted(n for _, n in lines) == sorted(collected)


class _Item:
    def __init__(self, name: str, *marks: str):
        self.name, self.path, self.marks = name, name.split(":")[0], marks

    def get_closest_marker(self, mark):
        return mark if mark in self.marks else None


def test_standalone_tests_alternate_two_by_two_with_the_first_slow_ones():
    """xdist (``--maxschedchunk 1``) first hands two consecutive tests to each worker: the tests that build nothing
    come two by two between the other slow ones, so one worker computes while the other builds what they need."""
    from harness.pytest_items import alternate, run_order

    assert alternate([1, 2, 3, 4, 5], ["a", "b"], 2) == [1, 2, "a", "b", 3, 4, 5]
    assert alternate([1], ["a", "b", "c"], 2) == [1, "a", "b", "c"]
    items = [_Item("m:quick"), _Item("m:cold", "slow"), _Item("m:warm"), _Item("t:timed", "exclusive"),
             *[_Item(f"s:sim{k}", "slow", "standalone") for k in range(3)], _Item("o:other")]
    assert [i.name for i in run_order(items)] == ["s:sim0", "s:sim1", "m:quick", "m:cold", "s:sim2", "m:warm",
                                                  "o:other", "t:timed"]

