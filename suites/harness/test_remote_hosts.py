"""Several hosts on this machine (suites/harness/socket_hosts.py): execnet socket servers, each in its own checkout
copy, artifact cache, lock directory, temporary directory and hostname (a UTS namespace), with CI-tier gates
spread over them by pytest-xdist; and --shard with report --merge against the unsharded run.

The hosts share this machine's two cores, so nothing here is a speed-up; DEVELOPERS.md records the overhead.

Every run here is a child pytest (or a host's worker) that starts, collects and loads the CI model's tokenizer: that,
not the gates (their evaluations come warm from the store), is most of its time. So a run is never made twice: the
single-host run is made once per test session (``single``, shared by xdist workers too), and the local run of the
timed gates is test_xdist_real_gates.py's serial run (``socket_hosts.serial_real_gates``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import jsonfile
from harness.receipt import validate

import socket_hosts
from socket_hosts import QUIET

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SELECTION = "ci and (cache or quantization)"
# the child pytests select gates only: not collecting the suite's own tests saves about 6 s per process
GATES_ONLY = ("--ignore=suites/harness",)


def _pytest(args, cwd=ROOT, locks=None, **kw):
    """pytest in a subprocess; with ``locks`` (a folder) it takes its own machine lock there instead of running
    as part of this test's (the lock this test holds is then not inherited)."""
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", *QUIET, *GATES_ONLY, *args], cwd=cwd,
                          env=socket_hosts.child_env(locks), capture_output=True, text=True, **kw)


def _verdicts(run: Path) -> dict[str, str]:
    return {d["nodeid"]: d["verdict"]["outcome"] for d in map(jsonfile.load, sorted((run / "receipts").glob("*.json")))}


def _gates_of(run: Path) -> dict[tuple[str, str], dict[str, str]]:
    rep = jsonfile.load(run / "report.json")
    return {(r["model"], r["dtype"]): {g: v["outcome"] for g, v in r["gates"].items()} for r in rep["variants"]}


def _used(run: Path) -> list[Path]:
    """The cache entries a run used (its build log)."""
    return [Path(p) for p in sorted({json.loads(l)["path"] for l in (run / "builds.jsonl").read_text().splitlines() if l})]


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """The selection on one host (this process's machine), and the cache entries it used: one run per test session,
    whichever xdist worker gets this module's tests (``socket_hosts.shared``)."""
    def make(base: Path) -> dict:
        done = _pytest(["-m", SELECTION, f"--run-dir={base / 'run'}", "-q", "-o", f"cache_dir={base / 'pcache'}"])
        assert (base / "run" / "report.json").exists(), done.stdout[-3000:] + done.stderr[-3000:]
        return {"run": str(base / "run"), "returncode": done.returncode}

    made = socket_hosts.shared(tmp_path_factory, "single-host", make)
    run = Path(made["run"])
    return run, _used(run), made["returncode"]


@pytest.fixture
def hosts(tmp_path, single):
    made = []

    def make(*names, edit=None, workers=1, seed=None):
        for name in names:
            h = socket_hosts.Host(tmp_path / name, name, single[1] if seed is None else seed, workers=workers)
            if edit and name in edit:
                edit[name](h.checkout)
            made.append(h.start())
        return made[-len(names):]

    yield make
    for h in made:
        h.stop()


def _remote(tmp_path, hosts_, *extra, run="run"):
    args = ["-m", SELECTION, f"--run-dir={tmp_path / run}", "--dist=load", "-o", f"cache_dir={tmp_path / 'pcache'}",
            *extra]
    for h in hosts_:
        for tx in h.txs:
            args += ["--tx", tx]
    return _pytest(args)


def test_ci_gates_spread_over_socket_hosts_report_as_the_single_host_run(tmp_path, single, hosts):
    a, b = hosts("hostA", "hostB")
    done = _remote(tmp_path, [a, b])
    assert done.returncode == single[2], done.stdout[-3000:] + done.stderr[-3000:]
    run = tmp_path / "run"
    assert _verdicts(run) == _verdicts(single[0])
    assert _gates_of(run) == _gates_of(single[0])
    receipts = [jsonfile.load(p) for p in sorted((run / "receipts").glob("*.json"))]
    by_host = {}
    for d in receipts:
        validate(d, d["nodeid"])
        m = d["provenance"]["machine_before"]
        by_host.setdefault((m["hostname"], d["run"]["worker"]), []).append(d)
        assert d["run"]["run_id"] == run.name                       # written into the controller's run
        host = a if d["run"]["worker"] == "hostA" else b
        assert all(x["path"].startswith(str(host.cache)) for x in d["artifacts"])   # built in the host's own cache
    expected = {("hostA", "hostA"), ("hostB", "hostB")} if a.named else {(os.uname().nodename, w) for w in ("hostA", "hostB")}
    assert set(by_host) == expected
    timed = [json.loads(line) for line in (run / "durations.jsonl").read_text().splitlines()]
    assert sorted(t["nodeid"] for t in timed) == sorted(d["nodeid"] for d in receipts)   # each test's seconds ...
    assert all(t["unit"].startswith("variant:ci-tiny-") and t["seconds"] > 0 for t in timed)   # ... by its variant
    assert {t["worker"] for t in timed} <= {"hostA", "hostB"} and not any(t["exclusive"] for t in timed)   # ... and host
    rep = jsonfile.load(run / "report.json")
    [machine] = rep["machines"]                                     # one machine: one fingerprint, two hosts
    assert sorted(machine["hosts"]) == sorted({h for h, _ in expected})
    assert not list(run.rglob("*.tmp")) and not list((run / "evidence").glob(".*"))


def test_a_host_running_another_harness_source_is_refused_by_name(tmp_path, hosts):
    def edit(checkout):
        f = checkout / "harness" / "gates" / "cache.py"
        f.write_text(f.read_text() + "\n# a local edit on this host\n")

    [b] = hosts("hostB", edit={"hostB": edit})
    done = _remote(tmp_path, [b])
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "worker hostB on host" in out and "harness source SHA-256" in out and "differs from the controller's" in out
    assert not list((tmp_path / "run").glob("receipts/*.json"))     # nothing measured by the refused host


def test_a_killed_host_leaves_an_error_receipt_and_no_corrupt_file_and_lf_completes_the_run(tmp_path, single, hosts):
    a, b = hosts("hostA", "hostB")
    run = tmp_path / "run"
    args = [sys.executable, "-m", "pytest", *QUIET, *GATES_ONLY, "-m", SELECTION, f"--run-dir={run}", "--dist=load",
            "--max-worker-restart=0", "-o", f"cache_dir={tmp_path / 'pcache'}", "--tx", a.tx, "--tx", b.tx]
    controller = subprocess.Popen(args, cwd=ROOT, env=socket_hosts.child_env(), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:   # kill host B while a test runs there: its evidence folder made, no receipt
        staged = list(b.tmp.glob("gatehouse-remote/*/evidence/*"))
        if any(not (e.parent.parent / "receipts" / f"{e.name}.json").exists() for e in staged if e.is_dir()):
            break
        time.sleep(0.005)
    b.kill()
    out, _ = controller.communicate(timeout=600)
    assert controller.returncode != 0, out[-3000:]
    died = [d for d in map(jsonfile.load, sorted(run.glob("receipts/*.json"))) if d["verdict"]["outcome"] == "error"]
    assert died, out[-3000:]
    assert all("crashed while running" in d["verdict"]["reasons"][0] and "hostB" in d["verdict"]["reasons"][0]
               and "--lf" in d["verdict"]["reasons"][0] for d in died)
    for p in run.rglob("*"):                                         # no half-written file anywhere
        assert not p.name.endswith(".tmp") and ".incoming-" not in p.name, p
        if p.suffix == ".json":
            jsonfile.load(p)
    again = _pytest(["-m", SELECTION, f"--run-dir={run}", "--lf", "--dist=load", "-o",
                     f"cache_dir={tmp_path / 'pcache'}", "--tx", a.tx])
    assert _verdicts(run) == _verdicts(single[0]), again.stdout[-3000:]
    assert _gates_of(run) == _gates_of(single[0])
    assert list((run / "superseded").glob("*.json"))                 # the error receipts were kept, not deleted


def test_three_shards_merged_equal_the_unsharded_run(tmp_path, single):
    parts = []
    for k in (1, 2, 3):
        done = _pytest(["-m", SELECTION, f"--run-dir={tmp_path / f's{k}'}", f"--shard={k}/3", "-q", "-p",
                        "no:cacheprovider"])
        assert (tmp_path / f"s{k}" / "run.json").exists(), done.stdout[-2000:]
        parts.append(tmp_path / f"s{k}")
    sizes = [len(list((p / "receipts").glob("*.json"))) for p in parts]
    assert all(sizes) and sum(sizes) == len(_verdicts(single[0]))
    merged = subprocess.run([sys.executable, "-m", "harness.report", "--merge", *map(str, parts), "--out",
                             str(tmp_path / "merged")], cwd=ROOT, capture_output=True, text=True)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert _verdicts(tmp_path / "merged") == _verdicts(single[0])
    assert _gates_of(tmp_path / "merged") == _gates_of(single[0])
    again = subprocess.run([sys.executable, "-m", "harness.report", "--merge", str(parts[0]), str(parts[0].parent / "s1"),
                            "--out", str(tmp_path / "twice")], cwd=ROOT, capture_output=True, text=True)
    assert again.returncode == 2 and "named twice" in again.stderr


def test_shards_weighted_by_a_runs_durations_merge_to_the_unsharded_run(tmp_path, single):
    """``--shard-durations`` (here the single run's directory): both jobs record the same plan, the one on an xdist
    worker gets the durations from its controller, and the merge equals the unsharded run."""
    from harness import shard

    parts = [tmp_path / "s1", tmp_path / "s2"]
    for k, extra in ((1, []), (2, ["-n", "1"])):
        done = _pytest(["-m", SELECTION, f"--run-dir={parts[k - 1]}", f"--shard={k}/2",
                        f"--shard-durations={single[0]}", "-q", "-p", "no:cacheprovider", *extra])
        assert (parts[k - 1] / "run.json").exists(), done.stdout[-2000:] + done.stderr[-2000:]
    records = [jsonfile.load(p / "run.json") for p in parts]
    weights, sha = shard.load_durations(single[0])
    assert [r["shard"] for r in records] == ["1/2", "2/2"]
    assert records[0]["shard_plan"] == records[1]["shard_plan"] == {
        "n": 2, "split": "durations", "durations": str(single[0]), "durations_sha256": sha}
    held = [{shard.receipt_unit(jsonfile.load(f)) for f in (p / "receipts").glob("*.json")} for p in parts]
    assert held == [{u for u, k in shard.assign(weights, 2, weights).items() if k == i} for i in (1, 2)]
    merged = subprocess.run([sys.executable, "-m", "harness.report", "--merge", *map(str, parts), "--out",
                             str(tmp_path / "merged")], cwd=ROOT, capture_output=True, text=True)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert _verdicts(tmp_path / "merged") == _verdicts(single[0])
    alone = _pytest(["-m", SELECTION, f"--shard-durations={single[0]}", "-q", "-p", "no:cacheprovider",
                     f"--run-dir={tmp_path / 'alone'}"])
    assert alone.returncode == 4 and f"--shard-durations {single[0]}: needs --shard K/N" in alone.stderr


# the timing gate (throughput_python, exclusive) and gates that only build and read: the serial run
# test_xdist_real_gates.py compares its -n 2 run with, so the local side is made once per session
TIMED = socket_hosts.REAL_GATES


def test_two_workers_on_one_host_share_its_cache_and_take_turns_timing(tmp_path_factory, tmp_path, hosts):
    """``bin/gatehouse host --workers 2``: two servers of one host, one worker each. Both build into the host's one
    artifact cache, and the host's machine lock keeps its timing tests (exclusive) from overlapping each other."""
    serial = socket_hosts.serial_real_gates(tmp_path_factory)
    local = Path(serial["run"])
    assert (local / "report.json").exists(), serial["output"]
    [h] = hosts("hostC", workers=2, seed=_used(local))
    assert len(h.txs) == 2
    done = _pytest(["-m", TIMED, f"--run-dir={tmp_path / 'run'}", "--dist=load", "-p", "no:cacheprovider",
                    *[a for tx in h.txs for a in ("--tx", tx)]])
    assert done.returncode == serial["returncode"], done.stdout[-3000:] + done.stderr[-3000:]
    assert _verdicts(tmp_path / "run") == _verdicts(local)
    receipts = [jsonfile.load(p) for p in sorted((tmp_path / "run" / "receipts").glob("*.json"))]
    assert {d["run"]["worker"] for d in receipts} == {"hostC-w1", "hostC-w2"}           # both workers measured
    assert all(x["path"].startswith(str(h.cache)) for d in receipts for x in d["artifacts"]
               if x["role"] != "onnxruntime_library")                               # built in the host's cache
    timed = sorted((d["timing"]["started_at"], d["timing"]["finished_at"], d["run"]["worker"]) for d in receipts
                   if d["timing"]["exclusive"])
    assert len(timed) == 3 and len({w for *_, w in timed}) == 2, timed               # timed on both workers ...
    for (_, end, _), (start, _, _) in zip(timed, timed[1:]):
        assert end <= start, timed                                                    # ... never at once
    # the workers' progress lines came home with their reports and were shown, prefixed with the worker's id
    shown = {p.stem: p.read_text() for p in (tmp_path / "run" / "progress").glob("*.log")}
    assert set(shown) <= {"hostC-w1", "hostC-w2"} and any("python-ort" in t for t in shown.values()), shown
    assert any(line.startswith("hostC-w") and "python-ort" in line for line in done.stdout.splitlines()), done.stdout[-2000:]


def test_a_host_with_several_workers_listens_on_consecutive_ports_and_refuses_a_bad_address():
    from harness import host

    assert host.ports("10.0.0.5:8888", 3) == ["10.0.0.5:8888", "10.0.0.5:8889", "10.0.0.5:8890"]
    for bad in ("nohost", ":8888", "10.0.0.5:x", "10.0.0.5:65535"):
        with pytest.raises(ValueError, match=f"expected HOST:PORT with room for 2 consecutive port.*{bad!r}"):
            host.ports(bad, 2)
    said = subprocess.run([sys.executable, "-m", "harness.host", "--workers", "0"], cwd=ROOT, capture_output=True,
                          text=True)
    assert said.returncode == 2 and "--workers: expected 1 or more, got 0" in said.stderr
