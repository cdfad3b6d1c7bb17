"""Sharded runs and merged reports (harness/shard.py, harness/merge.py, the report's machine groups): the split by
variant, every refusal of a merge naming the run directories, and timings never compared across machines."""

import json

import pytest

from harness import merge, report, shard
from harness.fingerprint import hardware_fingerprint, isa_flags
from harness.report import assemble
from harness.report.collect import collect
from harness.rundir import RunDir

from test_report_collect import MACHINE, SHA, receipts, variant_views


@pytest.mark.parametrize("text", ["", "2", "0/3", "4/3", "a/b", "1/0", "-1/2", "1/2/3"])
def test_a_bad_shard_is_refused_naming_the_value(text):
    with pytest.raises(shard.ShardError, match=r"--shard: .*" + repr(text).replace("/", "\\/")[1:-1]):
        shard.parse(text)


def test_shards_partition_the_units_and_keep_a_variant_whole():
    units = [shard.unit(f"suites/test_{g}.py::t[{v}]", v) for v in ("m-fp32", "m-q8", "m-q4", "n-fp32", "n-q4")
             for g in ("cache", "behavior", "throughput")] + [shard.unit("suites/test_streaming.py::t[x]", None)]
    kept = [shard.select(units, k, 3) for k in (1, 2, 3)]
    for i, u in enumerate(units):
        assert sum(k[i] for k in kept) == 1               # each test in exactly one shard
    for u in set(units):                                   # every test of one variant in the same shard
        assert len({next(k for k in (1, 2, 3) if kept[k - 1][i]) for i, x in enumerate(units) if x == u}) == 1
    assert all(any(k) for k in kept)                      # every shard has work
    assert shard.parse(" 2/3") == (2, 3) and shard.select(units, 1, 1) == [True] * len(units)


def _run(root, name, receipts_, campaign_sha=SHA, plan=None):
    run = RunDir(root / name)
    run.ensure({"name": "toy", "path": "toy.toml", "sha256": campaign_sha, "screening": False}, False, shard=plan)
    for r in receipts_:
        receipts.write(run, dict(r.data) if hasattr(r, "data") else r)
    return run


def test_merge_joins_shards_into_one_report_and_never_touches_them(tmp_path):
    a = _run(tmp_path, "a", variant_views("m", "q4", tok_s=100.0, files=tmp_path), plan=shard.Plan(1, 2))
    b = _run(tmp_path, "b", variant_views("m", "q8", tok_s=80.0, files=tmp_path), plan=shard.Plan(2, 2))
    ev = a.evidence(next(iter(json.loads(p.read_text())["nodeid"] for p in a.receipt_files())))
    ev.mkdir(parents=True)
    (ev / "raw.txt").write_text("evidence")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    out = merge.merge([a.path, b.path], tmp_path / "merged")
    assert {p: p.read_bytes() for p in before} == before
    record = out.read_record()
    assert [m["shard"] for m in record["merged_from"]] == ["1/2", "2/2"]
    assert len(out.receipt_files()) == len(a.receipt_files()) + len(b.receipt_files())
    assert (out.path / "evidence" / ev.name / "raw.txt").read_text() == "evidence"
    paths = report.rebuild(out)
    rep = json.loads(paths["json"].read_text())
    rows = {r["dtype"]: r for r in rep["variants"]}
    assert rows["q4"]["passed_all_gates"] and rows["q8"]["passed_all_gates"]
    assert [rows[d]["speed_rank"] for d in ("q4", "q8")] == [1, 2]     # one machine: ranked together
    with pytest.raises(merge.MergeError, match="exists and is not empty"):
        merge.merge([a.path, b.path], out.path)


def test_merge_refuses_mixed_campaigns_harnesses_and_duplicates_naming_the_run_directories(tmp_path):
    a = _run(tmp_path, "a", variant_views("m", "q4"))
    other = _run(tmp_path, "other", variant_views("m", "q8"), campaign_sha="c" * 64)
    with pytest.raises(merge.MergeError, match=rf"different campaigns: campaign sha256 {SHA[:12]} in {a.path}; "
                                               rf"campaign sha256 cccccccccccc in {other.path}"):
        merge.merge([a.path, other.path], tmp_path / "m1")
    newer = _run(tmp_path, "newer", variant_views("m", "q8", harness_sha="d" * 64))
    with pytest.raises(merge.MergeError, match=rf"different harness sources: .* in {a.path}; .*dddddddddddd in {newer.path}"):
        merge.merge([a.path, newer.path], tmp_path / "m2")
    twice = _run(tmp_path, "twice", variant_views("m", "q4"))
    with pytest.raises(merge.MergeError, match=rf"duplicate receipt for suites/test_\w+\.py::\S+: in {a.path} and {twice.path}"):
        merge.merge([a.path, twice.path], tmp_path / "m3")
    with pytest.raises(merge.MergeError, match=rf"{tmp_path / 'nope'}: not a Gatehouse run directory"):
        merge.merge([a.path, tmp_path / "nope"], tmp_path / "m4")
    with pytest.raises(merge.MergeError, match="two or more run directories"):
        merge.merge([a.path], tmp_path / "m5")
    assert not any((tmp_path / f"m{i}").exists() for i in range(1, 5))


def test_the_hardware_fingerprint_ignores_the_hostname_and_names_the_instruction_set():
    assert isa_flags("processor : 0\nflags\t\t: fpu sse2 avx2 smep avx512_vnni fma\n") == "avx2 avx512_vnni fma sse2"
    assert isa_flags("Features\t: fp asimd asimddp sve i8mm\n") == "asimd asimddp i8mm sve"
    assert hardware_fingerprint({**MACHINE, "hostname": "a"}) == hardware_fingerprint({**MACHINE, "hostname": "b"})
    assert hardware_fingerprint(MACHINE) != hardware_fingerprint({**MACHINE, "isa_flags": "avx2"})


def test_timings_of_unlike_machines_are_grouped_and_never_compared(tmp_path):
    """Variant q4 timed on machine A, q8 on machine B: each gets a speed and rank on its machine only, the run-wide
    speed rank stays empty, and each gate section is drawn per machine."""
    big = {"cpu_model": "Big CPU", "logical_cpus": 64, "hostname": "big"}
    run = _run(tmp_path, "run", variant_views("m", "q4", tok_s=100.0, files=tmp_path) + variant_views("m", "q8", tok_s=300.0, files=tmp_path,
                                                                                        machine=big))
    rep, views = assemble.decide(collect(run))
    assert len(rep["machines"]) == 2 and {tuple(m["hosts"]) for m in rep["machines"]} == {("vm",), ("big",)}
    rows = {r["dtype"]: r for r in rep["variants"]}
    # same instruction set: the receipts of two hosts stand together (no provenance blocker)
    assert not [b for r in rows.values() for b in r["blockers"] if b.startswith("provenance")]
    assert rows["q4"]["speed_rank"] is None and rows["q8"]["speed_rank"] is None
    fp_small, fp_big = hardware_fingerprint(MACHINE), hardware_fingerprint({**MACHINE, **big})
    assert rows["q4"]["speed_by_machine"] == {fp_big: None, fp_small: rows["q4"]["speed_by_machine"][fp_small]}
    assert rows["q4"]["speed_rank_by_machine"][fp_small] == 1 and rows["q8"]["speed_rank_by_machine"][fp_big] == 1
    assert all(r.get("machine") in (fp_small, fp_big) for r in rep["ratios"])
    md = report.rebuild(run) and (run.path / "report.md").read_text()
    assert "## Machines (timings are compared only within one)" in md
    assert f"— machine `{fp_small}`" in md and f"— machine `{fp_big}`" in md


def test_one_machine_reports_as_before(tmp_path):
    run = _run(tmp_path, "run", variant_views("m", "q4", tok_s=100.0, files=tmp_path) + variant_views("m", "q8", tok_s=300.0, files=tmp_path,
                                                                                        machine={"hostname": "other"}))
    rep, _ = assemble.decide(collect(run))
    assert len(rep["machines"]) == 1 and rep["machines"][0]["hosts"] == ["vm", "other"]
    rows = {r["dtype"]: r for r in rep["variants"]}
    assert (rows["q8"]["speed_rank"], rows["q4"]["speed_rank"]) == (1, 2) and "speed_by_machine" not in rows["q4"]
    assert "## Machines" not in (report.rebuild(run) and (run.path / "report.md").read_text())


def test_durations_place_the_longest_units_first_onto_the_least_loaded_shard():
    weights = {"variant:a-fp32": 10.0, "variant:a-q4": 6.0, "variant:a-q8": 5.0, "test:s.py::t": 4.0, "variant:b-q4": 1.0}
    units = list(weights) + ["variant:new-q4"]                       # a unit the durations do not know
    by = shard.assign(units, 2, weights)
    assert by == {"variant:a-fp32": 1, "variant:a-q4": 2, "variant:a-q8": 2, "variant:new-q4": 1,
                  "test:s.py::t": 2, "variant:b-q4": 1}           # the new unit weighs the median (5.0)
    assert shard.loads(by, 2, weights) == [16.0, 15.0]
    rr = shard.assign(units, 2)                                      # no durations: round-robin over the sorted units
    assert rr == {u: i % 2 + 1 for i, u in enumerate(sorted(units))}
    assert max(shard.loads(rr, 2, weights)) > max(shard.loads(by, 2, weights))
    for n in (1, 3, 7):                                              # a partition, every shard given work while it can
        kept = [shard.select(units, k, n, weights) for k in range(1, n + 1)]
        assert [sum(k[i] for k in kept) for i in range(len(units))] == [1] * len(units)
        assert sum(1 for k in kept if any(k)) == min(n, len(units))


def test_a_runs_durations_are_its_receipts_seconds_by_unit(tmp_path, capsys):
    views = variant_views("m", "q4", files=tmp_path) + variant_views("m", "q8", files=tmp_path)
    run = _run(tmp_path, "run", views)
    weights, sha = shard.load_durations(run.path)
    recorded = [json.loads(p.read_text()) for p in run.receipt_files()]
    assert set(weights) == {"variant:m-q4", "variant:m-q8"}
    assert weights["variant:m-q4"] == pytest.approx(sum(r["timing"]["duration_s"] for r in recorded
                                                        if r["variant"]["dtype"] == "q4"), abs=1e-3)
    out = tmp_path / "durations.json"
    assert shard.main([str(run.path), "--out", str(out), "--shards", "2"]) == 0
    assert shard.load_durations(out) == (weights, sha)               # the file weighs the split as the run does
    said = capsys.readouterr().err.splitlines()
    assert said[0].startswith("2 shards by these durations: the longest ") and said[1].startswith("2 shards round-robin")
    assert shard.main([str(tmp_path / "nope")]) == 2 and "not a run directory" in capsys.readouterr().err


@pytest.mark.parametrize("doc, field, value", [
    ({"kind": "other"}, "'kind'", "'other'"),
    ([1, 2], "'kind'", "'list'"),
    ({"kind": shard.DURATIONS_KIND, "units": {}}, "'units'", "{}"),
    ({"kind": shard.DURATIONS_KIND, "units": {"m-q4": 3}}, "'units'", "'m-q4'"),
    ({"kind": shard.DURATIONS_KIND, "units": {"variant:m-q4": -1}}, "'units.variant:m-q4'", "-1"),
    ({"kind": shard.DURATIONS_KIND, "units": {"variant:m-q4": "3 s"}}, "'units.variant:m-q4'", "'3 s'"),
    ({"kind": shard.DURATIONS_KIND, "units": {"variant:m-q4": True}}, "'units.variant:m-q4'", "True"),
])
def test_a_bad_durations_file_is_refused_naming_the_file_field_and_value(tmp_path, doc, field, value):
    f = tmp_path / "durations.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(shard.ShardError) as err:
        shard.load_durations(f)
    assert str(f) in str(err.value) and field in str(err.value) and value in str(err.value)


def test_durations_that_are_not_a_run_or_a_file_are_refused(tmp_path):
    (tmp_path / "junk.json").write_text("{not json")
    (tmp_path / "empty").mkdir()
    for path, why in (("junk.json", "not JSON"), ("empty", "not a Gatehouse run directory"), ("nope", "no such file")):
        with pytest.raises(shard.ShardError, match=rf"--shard-durations {tmp_path / path}: {why}"):
            shard.load_durations(tmp_path / path)


def test_merge_refuses_shards_of_different_plans_a_shard_twice_or_missing(tmp_path):
    weighted = shard.Plan(1, 2, {"variant:m-q4": 3.0}, "d.json", "e" * 64)

    def part(name, dtype, plan):
        return _run(tmp_path, name, variant_views("m", dtype), plan=plan)

    a = part("a", "q4", weighted)
    b = part("b", "q8", shard.Plan(2, 2))
    assert a.read_record()["shard_plan"] == {"n": 2, "split": "durations", "durations": "d.json",
                                             "durations_sha256": "e" * 64}
    with pytest.raises(merge.MergeError, match=rf"different plans .*: N=2 durations sha256 eeeeeeeeeeee in {a.path}; "
                                               rf"N=2 round-robin in {b.path}"):
        merge.merge([a.path, b.path], tmp_path / "m1")
    c = part("c", "q8", shard.Plan(1, 3))
    with pytest.raises(merge.MergeError, match=rf"N=3 round-robin in {c.path}"):
        merge.merge([b.path, c.path], tmp_path / "m2")
    d = part("d", "q8", shard.Plan(1, 2, {"variant:m-q4": 3.0}, "d.json", "e" * 64))
    with pytest.raises(merge.MergeError, match=rf"shard 1/2 twice: in {a.path} and {d.path}"):
        merge.merge([a.path, d.path], tmp_path / "m3")
    e = part("e", "q8", shard.Plan(3, 3))
    with pytest.raises(merge.MergeError, match=rf"shard\(s\) 2/3 missing \(merged: 1/3 in {c.path}, 3/3 in {e.path}\)"):
        merge.merge([c.path, e.path], tmp_path / "m4")
    plain = _run(tmp_path, "plain", variant_views("m", "fp32"))
    with pytest.raises(merge.MergeError, match=rf"shards mixed with unsharded runs: shard 1/3 in {c.path}; not sharded in {plain.path}"):
        merge.merge([c.path, plain.path], tmp_path / "m5")
    assert not any((tmp_path / f"m{i}").exists() for i in range(1, 6))


def test_a_runs_durations_jsonl_weighs_every_test_and_a_rerun_counts_once(tmp_path):
    """``durations.jsonl`` (every test's set-up, call and teardown, receipt or not) is preferred to the receipts;
    a test run again (``--lf``) counts its last line; a bad line is refused naming the file."""
    run = _run(tmp_path, "run", variant_views("m", "q4"))
    lines = [{"nodeid": "suites/test_cache.py::t[m-q4]", "unit": "variant:m-q4", "seconds": 3.0},
             {"nodeid": "suites/test_streaming.py::t[case]", "unit": "test:suites/test_streaming.py::t[case]", "seconds": 9.5},
             {"nodeid": "suites/test_cache.py::t[m-q4]", "unit": "variant:m-q4", "seconds": 4.0},    # the --lf rerun
             {"nodeid": "suites/test_behavior.py::t[m-q4]", "unit": "variant:m-q4", "seconds": 1.5}]
    run.durations.write_text("".join(json.dumps(x) + "\n" for x in lines))
    weights, _ = shard.load_durations(run.path)
    assert weights == {"test:suites/test_streaming.py::t[case]": 9.5, "variant:m-q4": 5.5}
    run.durations.write_text('{"nodeid": "x"}\n')
    with pytest.raises(shard.ShardError, match=rf"--shard-durations {run.durations}: a line is not a test's duration"):
        shard.load_durations(run.path)
