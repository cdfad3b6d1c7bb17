"""The capture's error paths against small fake engines: each failure is named, the group is gone, logs kept."""

import json
import os
import sys
import textwrap
import time

import pytest

from harness.errors import ArtifactError
from harness.streaming.capture import Limits, feeder_violations, partial_sample, run_stream
from harness.streaming.engine import FEEDER, build_feeder
from harness.streaming.feeder import FeederSettings
from harness.streaming.gnutime import group_members, parse_time_report
from harness.streaming.metrics import feeder_figures

FAST = Limits(ready_timeout_seconds=2.0, run_timeout_seconds=4.0, max_events=200, kill_grace_seconds=0.5)
READY = 'print(json.dumps({"kind": "ready", "seconds": 0.0}), flush=True)'


@pytest.fixture(scope="module")
def native_feeder(tmp_path_factory):
    out = tmp_path_factory.mktemp("feeder")
    build_feeder(out)
    return out / FEEDER


@pytest.fixture(params=["process", "thread"])
def feeder(request):
    """Both feeders: the native process the gate uses, and the Python thread fallback."""
    return request.getfixturevalue("native_feeder") if request.param == "process" else None


def fake(tmp_path, body):
    path = tmp_path / "fake_engine.py"
    path.write_text("import json, os, subprocess, sys, time\n" + textwrap.dedent(body))
    return [sys.executable, str(path)]


def pcm(seconds):
    return b"\0\0\0\0" * int(16000 * seconds)


def assert_clean(capture, evidence):
    assert capture.group_left == ()
    for name in ("events.jsonl", "observed.jsonl", "feeder.jsonl", "stderr.txt", "capture.json"):
        assert (evidence / name).exists(), name
    assert json.loads((evidence / "capture.json").read_text())["failure"] == capture.failure


def test_well_behaved_fake_is_paced_and_complete(tmp_path, feeder):
    cmd = fake(tmp_path, f"""
        {READY}
        n = 0
        while True:
            b = sys.stdin.buffer.read1(65536)
            if not b:
                break
            n += len(b)
            print(json.dumps({{"kind": "window", "index": n}}), flush=True)
        print(json.dumps({{"kind": "complete", "bytes": n}}), flush=True)
    """)
    ev = tmp_path / "ev"
    capture = run_stream(cmd, pcm(0.5), ev, FAST, feeder=feeder)
    assert capture.failure is None, capture.failure
    assert capture.events[-1] == {"kind": "complete", "bytes": 32000}
    assert not feeder_violations(capture.feeder, 32000)
    assert len(capture.feeder) == 25
    assert all(r["before_seconds"] >= r["deadline_seconds"] for r in capture.feeder)
    assert feeder_figures(capture.feeder)["feeder_lateness_seconds_max"].value < 0.05
    assert capture.feeder_started_after_ready_seconds >= 0
    assert all(o["since_feeder_start_seconds"] is not None for o in capture.observations[1:])
    assert capture.peak_rss_kib is None or capture.peak_rss_kib > 0
    assert_clean(capture, ev)


def test_engine_that_dies(tmp_path, feeder):
    cmd = fake(tmp_path, f"""
        {READY}
        sys.stdin.buffer.read(3200)
        sys.stderr.write("model exploded\\n")
        sys.exit(3)
    """)
    ev = tmp_path / "ev"
    capture = run_stream(cmd, pcm(1.0), ev, FAST, feeder=feeder)
    assert capture.returncode == 3
    assert "status 3" in capture.failure and "model exploded" in capture.failure
    assert_clean(capture, ev)


def test_engine_that_hangs_with_a_child_is_killed_as_a_group(tmp_path, feeder):
    cmd = fake(tmp_path, f"""
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        print(json.dumps({{"kind": "pid", "child": child.pid}}), flush=True)
        {READY}
        time.sleep(60)
    """)
    ev = tmp_path / "ev"
    t0 = time.monotonic()
    capture = run_stream(cmd, pcm(30.0), ev, FAST, feeder=feeder)
    assert time.monotonic() - t0 < FAST.run_timeout_seconds + 8
    assert "run timeout" in capture.failure
    child = capture.events[0]["child"]
    assert_clean(capture, ev)
    assert not os.path.exists(f"/proc/{child}") or _zombie(child)


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def test_engine_that_never_gets_ready(tmp_path, feeder):
    cmd = fake(tmp_path, "time.sleep(60)\n")
    ev = tmp_path / "ev"
    capture = run_stream(cmd, pcm(0.2), ev, FAST, feeder=feeder)
    assert "no ready event within 2.0 s" in capture.failure
    assert capture.feeder == ()
    assert_clean(capture, ev)


def test_engine_that_floods(tmp_path, feeder):
    cmd = fake(tmp_path, f"""
        {READY}
        while True:
            print(json.dumps({{"kind": "window", "index": 0}}), flush=True)
    """)
    ev = tmp_path / "ev"
    capture = run_stream(cmd, pcm(1.0), ev, FAST, feeder=feeder)
    assert "flooded: more than 200 events" in capture.failure
    assert (ev / "events.jsonl").read_text().count("\n") >= 200
    assert_clean(capture, ev)


def test_engine_that_writes_garbage(tmp_path, feeder):
    cmd = fake(tmp_path, f"""
        {READY}
        print("not json at all", flush=True)
        time.sleep(60)
    """)
    ev = tmp_path / "ev"
    capture = run_stream(cmd, pcm(1.0), ev, FAST, feeder=feeder)
    assert "is not JSON" in capture.failure
    assert_clean(capture, ev)


def test_engine_error_event_is_the_first_reason(tmp_path, feeder):
    cmd = fake(tmp_path, f"""
        {READY}
        sys.stdin.buffer.read(1280)
        print(json.dumps({{"kind": "error", "reason": "NaN sample at index 3"}}), flush=True)
        sys.exit(2)
    """)
    ev = tmp_path / "ev"
    capture = run_stream(cmd, pcm(1.0), ev, FAST, feeder=feeder)
    assert capture.failure.startswith("engine reported an error: NaN sample at index 3")
    assert capture.engine_error == "NaN sample at index 3"
    assert_clean(capture, ev)


def test_missing_binary_is_a_failure(tmp_path, feeder):
    capture = run_stream([str(tmp_path / "nope")], pcm(0.1), tmp_path / "ev", FAST, measure_memory=False, feeder=feeder)
    assert "could not start" in capture.failure


def test_feeder_violations():
    recs = [{"chunk": 0, "samples": 320, "deadline_seconds": 0.02, "before_seconds": 0.019, "after_seconds": 0.02}]
    assert any("before their deadline" in v for v in feeder_violations(recs, 1280))
    assert any("coverage" in v for v in feeder_violations(recs, 4000))


def test_parse_time_report():
    text = "\tCommand being timed: \"x\"\n\tMaximum resident set size (kbytes): 12345\n\tExit status: 2\n"
    assert parse_time_report(text)["peak_rss_kib"] == 12345
    assert parse_time_report(text)["exit_status"] == 2
    assert parse_time_report("")["peak_rss_kib"] is None
    assert group_members(2 ** 22 + 12345) == []


ECHO = f"""
    {READY}
    n = 0
    while True:
        b = sys.stdin.buffer.read1(65536)
        if not b:
            break
        n += len(b)
    print(json.dumps({{"kind": "complete", "bytes": n}}), flush=True)
"""


def test_native_feeder_reports_what_it_applied_and_falls_back(tmp_path, native_feeder):
    # priority 100 is outside SCHED_FIFO's range, so it is refused wherever this runs: the feeder carries on
    # under the default scheduler and says so
    limits = Limits(**{**FAST.__dict__, "feeder": FeederSettings(realtime_priority=100, nice=0)})
    capture = run_stream(fake(tmp_path, ECHO), pcm(0.3), tmp_path / "ev", limits, feeder=native_feeder)
    assert capture.failure is None, capture.failure
    assert capture.feeder_kind == "process"
    assert capture.feeder_setup["scheduler"] == "SCHED_OTHER"
    assert any("SCHED_FIFO 100" in r for r in capture.feeder_setup["refused"])
    assert capture.events[-1]["bytes"] == 4 * 4800 and len(capture.feeder) == 15
    assert not feeder_violations(capture.feeder, 4 * 4800)
    reports = (tmp_path / "ev" / "feeder-reports.jsonl").read_text().splitlines()
    assert [json.loads(x)["kind"] for x in reports][:3] == ["setup", "loaded", "start"]
    assert json.loads((tmp_path / "ev" / "capture.json").read_text())["feeder_setup"] == capture.feeder_setup


STARTED = f"""
    open(os.environ["MARK"], "w").close()
    {READY}
    sys.stdin.buffer.read()
    print(json.dumps({{"kind": "complete"}}), flush=True)
"""


@pytest.mark.parametrize("extra", [b"\0", b"\0\0", b"\0\0\0"])
def test_a_partial_f32_sample_is_refused_before_anything_starts(tmp_path, feeder, monkeypatch, extra):
    """A byte count that is not a multiple of 4 (a truncated final sample) is refused, naming the input and the
    byte count: never fed as a fractional sample, never dropped; the engine and the feeder never start."""
    monkeypatch.setenv("MARK", str(tmp_path / "engine-started"))
    data = b"\0" * 1280 + extra
    with pytest.raises(ArtifactError) as exc:
        run_stream(fake(tmp_path, STARTED), data, tmp_path / "ev", FAST, feeder=feeder, source="cases/odd/case.f32")
    print(exc.value)
    n = len(extra)
    assert str(exc.value) == (f"cases/odd/case.f32: partial F32 sample: {1280 + n} bytes is not a whole number of "
                              f"4-byte float32 samples (320 whole samples, then a truncated final sample of {n} "
                              f"byte{'s' if n > 1 else ''}); refused rather than fed or dropped")
    assert not (tmp_path / "engine-started").exists() and not (tmp_path / "ev").exists()


def test_partial_sample_rule():
    assert partial_sample(0, "x") is None and partial_sample(4 * 16000, "x") is None
    assert partial_sample(6, "in.f32").startswith("in.f32: partial F32 sample: 6 bytes ")
    assert any("partial F32 sample: 1283 bytes" in v for v in feeder_violations([], 1283))
    assert not any("partial" in v for v in feeder_violations([], 1280))


def test_missing_feeder_binary_is_a_failure(tmp_path):
    capture = run_stream(fake(tmp_path, ECHO), pcm(0.1), tmp_path / "ev", FAST, feeder=tmp_path / "no-feeder")
    assert "feeder" in capture.failure and "could not start" in capture.failure
    assert capture.group_left == ()


def test_feeder_records_are_checked_against_the_input():
    recs = [{"chunk": 0, "samples": 320.0, "deadline_seconds": 0.02, "before_seconds": 0.02, "after_seconds": 0.021},
            {"chunk": 1, "samples": 640.0, "deadline_seconds": 0.03, "before_seconds": 0.04, "after_seconds": 0.041}]
    assert any("wrong index, end sample, deadline" in v for v in feeder_violations(recs, 2560))
    recs[1]["deadline_seconds"] = 0.04
    assert not feeder_violations(recs, 2560)
