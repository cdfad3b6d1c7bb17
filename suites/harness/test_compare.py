"""`bin/gatehouse compare`: the rank test and Holm's correction, the policy and its fail-on grammar (campaign
table and command line), the rule on small synthetic run directories (verdict flips, quality figures,
throughput on one machine or two, receipts without per-repeat samples), the rendering and the exit codes."""

import itertools
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

from harness import campaign, receipt as receipts
from harness.compare import cli, render
from harness.compare import stats as cstats
from harness.compare.policy import ComparePolicy, Threshold, parse_fail_on
from harness.compare.rule import compare, verdict_change
from harness.compare.throughput import NO_SAMPLES
from harness.errors import CampaignError
from harness.fields import Where
from harness.receipt import Receipt
from harness.report.collect import collect
from harness.rundir import RunDir
from harness.throughput import stats as tstats

from test_report_collect import MACHINE, PACKAGES, SHA, behavior_extra, make_receipt

ROOT = Path(__file__).resolve().parents[2]


# -- the rank test -----------------------------------------------------------------------------------
def _brute_counts(n_x, n_y):
    """U's null distribution by enumerating every placement of the x ranks."""
    counts = [0] * (n_x * n_y + 1)
    for pos in itertools.combinations(range(n_x + n_y), n_x):
        counts[sum(p - i for i, p in enumerate(pos))] += 1
    return counts


@pytest.mark.parametrize("n_x,n_y", [(1, 1), (1, 4), (2, 2), (3, 5), (5, 5), (4, 7), (6, 6)])
def test_exact_distribution_matches_enumeration(n_x, n_y):
    assert cstats.u_distribution(n_x, n_y) == _brute_counts(n_x, n_y)
    assert sum(cstats.u_distribution(n_x, n_y)) == math.comb(n_x + n_y, n_x)


# (x, y, method, U of x, two-sided p) from scipy 1.17.1's scipy.stats.mannwhitneyu(x, y, method=...)
SCIPY = [
    ([19, 22, 16, 29, 24], [20, 11, 17, 12], "exact", 17.0, 0.1111111111111111),
    ([19, 22, 16, 29, 24], [20, 11, 17, 12], "asymptotic", 17.0, 0.11134688653314041),
    ([1, 2, 2, 3, 4, 5], [2, 3, 3, 6, 7, 8, 9], "asymptotic", 9.0, 0.09667054340670089),   # ties
    ([101.5, 99.2, 100.7, 98.9, 102.3], [95.1, 94.0, 96.3, 93.8, 95.5], "exact", 25.0, 0.007936507936507936),
    ([101.5, 99.2, 100.7, 98.9, 102.3, 97.0, 100.1, 99.9], [100.2, 98.0, 101.1, 99.5, 97.7, 100.9, 98.8, 99.0],
     "exact", 39.0, 0.5053613053613053),
    ([3.0, 1.0, 2.0], [4.0, 5.0, 6.0, 7.0], "exact", 0.0, 0.05714285714285714),
    (list(range(1, 11)), list(range(11, 21)), "exact", 0.0, 1.082508822446903e-05),
    (list(range(1, 11)), list(range(11, 21)), "asymptotic", 0.0, 0.00018267179110955002),
]


@pytest.mark.parametrize("x,y,method,u,p", SCIPY)
def test_mann_whitney_matches_scipy_values(x, y, method, u, p):
    r = cstats.mann_whitney(x, y, method)
    assert r.u == u and math.isclose(r.p, p, rel_tol=1e-12)
    auto = cstats.mann_whitney(x, y)
    assert auto.method == ("exact" if len(set(x + y)) == len(x + y) else "normal approximation (tie and continuity corrected)")


def test_mann_whitney_is_symmetric_and_handles_degenerate_samples():
    x, y = [5.0, 7.0, 9.0, 11.0], [6.0, 8.0, 10.5]
    a, b = cstats.mann_whitney(x, y), cstats.mann_whitney(y, x)
    assert a.u + b.u == len(x) * len(y) and math.isclose(a.p, b.p)
    same = cstats.mann_whitney([5.0] * 4, [5.0] * 4)
    assert same.p == 1.0 and same.u == 8 and same.ties == 7          # no spread at all: no evidence
    with pytest.raises(ValueError, match="no ties"):
        cstats.mann_whitney([1.0, 1.0], [2.0], "exact")
    with pytest.raises(ValueError, match="a value on each side"):
        cstats.mann_whitney([], [1.0])
    with pytest.raises(ValueError, match="finite"):
        cstats.mann_whitney([float("nan")], [1.0])


def test_mann_whitney_against_scipy_when_installed():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = random.Random(7)
    for _ in range(200):
        n_x, n_y = rng.randint(2, 12), rng.randint(2, 12)
        x = [round(rng.gauss(100, 5), rng.choice((0, 3))) for _ in range(n_x)]   # rounding to 0 places makes ties
        y = [round(rng.gauss(103, 5), rng.choice((0, 3))) for _ in range(n_y)]
        ties = len(set(x + y)) < n_x + n_y
        for method in ("asymptotic",) + (() if ties else ("exact",)):
            ref = scipy_stats.mannwhitneyu(x, y, method=method)
            got = cstats.mann_whitney(x, y, method)
            assert got.u == float(ref.statistic) and math.isclose(got.p, float(ref.pvalue), rel_tol=1e-9, abs_tol=1e-15)


def test_holm_matches_known_values_and_controls_the_family():
    # R: p.adjust(c(0.01, 0.04, 0.03, 0.005), "holm") = 0.03 0.06 0.06 0.02
    assert [round(p, 12) for p in cstats.holm([0.01, 0.04, 0.03, 0.005])] == [0.03, 0.06, 0.06, 0.02]
    assert cstats.holm([]) == [] and cstats.holm([0.2]) == [0.2] and cstats.holm([0.6, 0.7]) == [1.0, 1.0]
    rng = random.Random(3)
    for _ in range(50):
        p = [rng.random() for _ in range(rng.randint(1, 12))]
        adj = cstats.holm(p)
        assert all(a >= q for a, q in zip(adj, p))
        order = sorted(range(len(p)), key=p.__getitem__)
        assert all(adj[i] <= adj[j] for i, j in zip(order, order[1:]))      # monotone in p


def test_what_n_per_side_can_show():
    assert cstats.smallest_p(5, 5) == 2 / 252
    assert cstats.repeats_needed(0.01, 1) == 5          # 2/252 < 0.01
    assert cstats.repeats_needed(0.01, 2) == 6          # 2/252 >= 0.005; 2/924 < 0.005
    assert cstats.repeats_needed(0.01, 28) == 8


# -- the policy ---------------------------------------------------------------------------------------
W = Where("c.toml", "compare")


def test_policy_defaults_and_table():
    assert ComparePolicy.parse(None, W) == ComparePolicy()
    p = ComparePolicy()
    assert (p.alpha, p.min_samples, [str(t) for t in p.fail_on]) == (0.01, 5, ["verdict", "decode:5%"])
    q = ComparePolicy.parse({"alpha": 0.05, "min_samples": 8, "fail_on": ["verdict", "loss:0.5%", "quality:5"]}, W)
    assert (q.alpha, q.min_samples) == (0.05, 8)
    assert q.fail_on == (Threshold("verdict"), Threshold("loss", 0.005), Threshold("quality", 5.0))
    assert q.threshold("decode") is None and ComparePolicy.parse({"fail_on": []}, W).fail_on == ()
    assert q.as_dict() == {"alpha": 0.05, "min_samples": 8, "fail_on": ["verdict", "loss:0.5%", "quality:5"],
                           "max_foreign_cpu": 0.1, "session_spread": 0.3}
    assert q.override(min_samples=3).min_samples == 3 and q.override(min_samples=3).alpha == 0.05


@pytest.mark.parametrize("table,message", [
    ({"alpah": 0.01}, r"c\.toml: compare: unknown key\(s\) alpah"),
    ({"alpha": 0}, r"c\.toml: compare\.alpha: must be above 0, got 0"),
    ({"alpha": "low"}, r"c\.toml: compare\.alpha: expected a finite number, got 'low'"),
    ({"min_samples": 1}, r"c\.toml: compare\.min_samples: must be >= 2, got 1"),
    ({"fail_on": "verdict"}, r"c\.toml: compare\.fail_on: expected a list of thresholds"),
    ({"fail_on": ["decode:5"]}, r"c\.toml: compare\.fail_on: 'decode:5': decode takes a percentage, e\.g\. decode:5%"),
    ({"fail_on": [5]}, r"c\.toml: compare\.fail_on: expected a threshold like 'decode:5%', got 5"),
    ({"max_foreign_cpu": 1.5}, r"c\.toml: compare\.max_foreign_cpu: must be <= 1\.0, got 1\.5"),
])
def test_a_bad_compare_table_names_file_field_and_value(table, message):
    with pytest.raises(CampaignError, match=message):
        ComparePolicy.parse(table, W)


@pytest.mark.parametrize("specs,expected", [
    (["verdict,decode:5%"], ["verdict", "decode:5%"]),
    (["verdict", "decode:2.5%", "loss:1%", "quality:3"], ["verdict", "decode:2.5%", "loss:1%", "quality:3"]),
    ([" decode:10% , quality:0.5 "], ["decode:10%", "quality:0.5"]),
    (["none"], []),
])
def test_fail_on_grammar(specs, expected):
    assert [str(t) for t in parse_fail_on(Where("command line", "--fail-on"), specs)] == expected


@pytest.mark.parametrize("spec,message", [
    ("decode:five%", "'decode:five%': decode takes a percentage, e.g. decode:5%"),
    ("decode:0%", "a decode drop must be above 0 % and below 100 %"),
    ("decode:100%", "a decode drop must be above 0 % and below 100 %"),
    ("loss:2", "'loss:2': loss takes a percentage"),
    ("quality:5%", "quality takes points of the quality index without a % sign"),
    ("quality:500", "the quality index has 100 points"),
    ("verdict:1", "verdict takes no value"),
    ("speed:5%", "'speed:5%' is not a threshold; expected verdict, decode:N%"),
    ("verdict,,decode:5%", "an empty threshold"),
    ("verdict,none", "'none' cannot be combined"),
    ("decode:5%,decode:10%", "decode given more than once"),
])
def test_bad_fail_on_specs_name_the_option_and_value(spec, message):
    with pytest.raises(CampaignError) as exc:
        parse_fail_on(Where("command line", "--fail-on"), [spec])
    assert str(exc.value).startswith("command line: --fail-on: ") and message in str(exc.value)


_SHIPPED = (ROOT / "campaigns" / "default.toml").read_text().replace('suite = "../harness', f'suite = "{ROOT}/harness')
DEFAULT = _SHIPPED[:_SHIPPED.index("\n[compare]")] + "\n"   # the shipped campaign without its [compare] table


def test_the_campaign_parses_its_compare_table(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text(DEFAULT)
    assert campaign.load(p).compare == ComparePolicy()                  # no table: the defaults
    shipped = tmp_path / "shipped.toml"
    shipped.write_text(_SHIPPED)
    assert campaign.load(shipped).compare == ComparePolicy()            # the shipped table states the defaults
    p.write_text(DEFAULT + '\n[compare]\nalpha = 0.05\nfail_on = ["decode:10%"]\n')
    c = campaign.load(p)
    assert c.compare.alpha == 0.05 and [str(t) for t in c.compare.fail_on] == ["decode:10%"]
    assert campaign.compare_policy(p) == c.compare
    p.write_text(DEFAULT + '\n[compare]\nfail_on = ["decode:ten%"]\n')
    for read in (campaign.load, campaign.compare_policy):
        with pytest.raises(CampaignError, match=rf"{p}: compare\.fail_on: 'decode:ten%': decode takes a percentage"):
            read(p)
    p.write_text(DEFAULT + "\n[compare]\nalfa = 0.05\n")
    with pytest.raises(CampaignError, match=r"c\.toml: compare: unknown key\(s\) alfa \(allowed: alpha, fail_on, max_foreign_cpu, min_samples, session_spread\)"):
        campaign.load(p)


# -- synthetic runs ----------------------------------------------------------------------------------
def provenance(machine=None, harness_sha=SHA, packages=None):
    return {"harness": {"sha256": harness_sha, "git_commit": None}, "packages": dict(packages or PACKAGES),
            "machine_before": {**MACHINE, **(machine or {})}, "machine_after": {"loadavg_1m": 0.7},
            "campaign": {"name": "c", "sha256": SHA, "screening": False}}


def lane_receipt(cells, *, lane="native-probe", model="m", dtype="q4", gate="throughput_native", samples=True,
                 machine=None, harness_sha=SHA, packages=None, foreign_cpu=None):
    """A v2 throughput receipt written the way the gate test writes it: the loop's summaries of these
    per-repeat decode rates ({cell: [tok/s, ...]}) through ``record_lane``."""
    summaries = {}
    for cell, rates in cells.items():
        s = tstats.summarize([{"decode_tokens": 31, "decode_s": 31 / r, "decode_tok_s": r, "prefill_ms": 2.0}
                              for r in rates])
        if not samples:
            s.pop("decode_tok_s_samples")
        summaries[cell] = {**s, "cpu_per_wall": 1.9}
    r = Receipt(f"suites/test_{gate}.py::test_{gate}[{model}-{dtype}-{lane}]", gate,
                {"model": model, "dtype": dtype, "tier": "benchmark"}, Path("/nonexistent"))
    r.record_lane(lane, summaries, load={"load_ms": 10.0, "threads": 2})
    if foreign_cpu is not None:
        r.record_machine_during({"samples": 4, "interval_s": 0.5, "duration_s": 2.0, "steal_fraction": 0.0,
                                 "foreign_cpu_share": foreign_cpu, "absent": []}, f"the {lane} lane")
    return r.to_dict(outcome="pass", reasons=[], provenance=provenance(machine, harness_sha, packages),
                     run={"run_id": "r", "screening": False, "worker": "main"})


def quant_receipt(dtype="q4", increase=0.01, model="m", outcome="pass"):
    return make_receipt("quantization", model, dtype, outcome=outcome, measurements={
        "relative_increase": increase, "ln_perplexity_ratio_stderr": 0.004, "fp_loss": 4.0, "kld_mean": 0.02,
        "top1_agreement": 0.9, "top1_agreement_stderr": 0.006})


def run_dir(path, receipts_, campaign_path=None):
    run = RunDir(path)
    run.ensure({"name": "c", "path": str(campaign_path or path / "missing.toml"), "sha256": SHA, "screening": False}, False)
    for data in receipts_:
        receipts.write(run, data)
    return run


def rates(center, n=8, spread=0.01, seed=0):
    rng = random.Random(seed)
    return [center * (1 + spread * rng.uniform(-1, 1)) for _ in range(n)]


def both(tmp_path, base, new, policy=ComparePolicy()):
    return compare(collect(run_dir(tmp_path / "base", base)), collect(run_dir(tmp_path / "new", new)), policy)


def row(c, lane="native-probe", cell="short", dtype="q4"):
    return next(r for r in c.throughput if (r.lane, r.cell, r.dtype) == (lane, cell, dtype))


def test_same_speed_is_no_change_and_a_slowed_variant_is_a_regression(tmp_path):
    base = [lane_receipt({"short": rates(1000, seed=1), "long": rates(800, seed=2)}),
            lane_receipt({"short": rates(600, seed=3), "long": rates(500, seed=4)}, dtype="fp32")]
    quiet = [lane_receipt({"short": rates(1000, seed=5), "long": rates(800, seed=6)}),
             lane_receipt({"short": rates(600, seed=7), "long": rates(500, seed=8)}, dtype="fp32")]
    c = both(tmp_path / "aa", base, quiet)
    assert c.tests == 4 and not c.failed and {r.result for r in c.throughput} == {"unchanged"}
    assert all(r.statistic == "median" and r.test.method == "exact" for r in c.throughput)

    slowed = [lane_receipt({"short": rates(700, seed=5), "long": rates(560, seed=6)}),    # q4 on one thread: -30 %
              lane_receipt({"short": rates(600, seed=7), "long": rates(500, seed=8)}, dtype="fp32")]
    c = both(tmp_path / "ab", base, slowed, ComparePolicy(session_spread=0.5))   # one run a side: a registered spread
    assert row(c).result == "slower" and "within the session guard 50 %" in row(c).why and not c.failed
    c = both(tmp_path / "ac", base, slowed, ComparePolicy(session_spread=0.1))
    r = row(c)
    assert r.result == "regression" and r.test.u == 0 and r.test.p == cstats.smallest_p(8, 8)
    assert r.p_holm == pytest.approx(4 * r.test.p) and r.change == pytest.approx(-0.3, abs=0.03)
    assert c.failed and [x.threshold for x in c.crossed] == ["decode:5%"]
    assert len(c.crossed[0].items) == 2 and "native-probe m-q4 short" in " ".join(c.crossed[0].items)
    assert row(c, dtype="fp32").result == "unchanged"


def test_small_or_upward_changes_never_fail(tmp_path):
    base = [lane_receipt({"short": rates(1000, spread=0.002, seed=1)})]
    slightly = [lane_receipt({"short": rates(970, spread=0.002, seed=2)})]     # significant, -3 %: within decode:5%
    c = both(tmp_path / "a", base, slightly)
    assert row(c).result == "slower" and "within the decode:5% threshold" in row(c).why and not c.failed
    c = both(tmp_path / "b", base, [lane_receipt({"short": rates(1300, seed=2)})])
    assert row(c).result == "faster" and not c.failed
    c = both(tmp_path / "c", base, slightly, ComparePolicy(fail_on=(Threshold("decode", 0.02),), session_spread=0.01))
    assert row(c).result == "regression" and c.failed


def test_too_few_repeats_for_the_family_are_said_so(tmp_path):
    cells = ("a", "b", "c", "d")
    base = [lane_receipt({k: rates(1000, n=5, seed=i) for i, k in enumerate(cells)})]
    new = [lane_receipt({k: rates(500, n=5, seed=9 + i) for i, k in enumerate(cells)})]
    c = both(tmp_path, base, new)
    assert c.tests == 4 and all(r.test.p == 2 / 252 for r in c.throughput)
    assert all(r.result == "unchanged" for r in c.throughput) and not c.failed   # 4 x 2/252 > 0.01
    assert any("no throughput change can be significant here" in n and "6 repeats per side" in n for n in c.notes)
    c = both(tmp_path / "few", [lane_receipt({"short": rates(1000, n=3)})], [lane_receipt({"short": rates(500, n=3)})])
    assert row(c).result == "not tested" and row(c).why == "n=3/3, below the minimum of 5 samples per side"


def test_throughput_is_compared_on_one_machine_only(tmp_path):
    base = [lane_receipt({"short": rates(1000, seed=1)})]
    elsewhere = [lane_receipt({"short": rates(500, seed=2)}, machine={"hostname": "ci-2", "logical_cpus": 8})]
    c = both(tmp_path, base, elsewhere)
    r = row(c)
    assert r.result == "not compared" and r.test is None and not c.failed and not c.same_machine
    assert r.why.startswith(f"different machines ({r.base.machine.digest} vs {r.new.machine.digest}: ")
    assert "logical_cpus 2 vs 8" in r.why and "hostname 'vm' vs 'ci-2'" in r.why
    assert r.change == pytest.approx(-0.5, abs=0.02)      # the figures are still shown


def test_a_lane_timed_beside_other_work_is_not_tested(tmp_path):
    base = [lane_receipt({"short": rates(1000, seed=1)}, foreign_cpu=0.02)]
    busy = [lane_receipt({"short": rates(500, seed=2)}, foreign_cpu=0.495)]
    c = both(tmp_path, base, busy)
    assert row(c).result == "not tested" and row(c).test is None and not c.failed
    assert row(c).why == "busy machine: other processes took more than 10 % of the CPU during the timing (the new run's 49.5 %)"
    c = both(tmp_path / "lenient", base, busy, ComparePolicy(max_foreign_cpu=0.5))
    assert row(c).result == "regression" and c.failed
    assert "| m | q4 | native-probe | short | median |" in render.markdown(c) and "2 %/49.5 %" in render.markdown(c)


def test_receipts_without_samples_are_shown_not_tested(tmp_path):
    old = [lane_receipt({"short": rates(1000, seed=1)}, samples=False)]
    c = both(tmp_path, old, [lane_receipt({"short": rates(500, seed=2)})])
    r = row(c)
    assert r.result == "not tested" and r.why == f"{NO_SAMPLES} in the base run" and r.statistic == "pooled"
    assert r.base_value == pytest.approx(tstats.pooled_rate([31] * 8, [31 / x for x in rates(1000, seed=1)]))
    v1 = make_receipt("throughput_native", measurements={"decode_tok_s_short": 1000.0, "prefill_ms_short": 2.0},
                      extra={"lane": "native-probe"}, nodeid="suites/test_throughput_native.py::test_throughput_native[m-q4-native-probe]")
    c = both(tmp_path / "v1", [v1], [lane_receipt({"short": rates(500, seed=2)})])
    assert row(c).result == "not tested" and row(c).why.startswith(NO_SAMPLES)
    assert any("carry only pooled rates" in n for n in c.notes)
    c = both(tmp_path / "gone", [lane_receipt({"short": rates(1000)})], [])
    assert row(c).result == "not compared" and row(c).why == "only in the base run"


def test_verdict_flips_and_disappearances(tmp_path):
    base = [make_receipt("cache", dtype="q4"), make_receipt("cache", dtype="q8", outcome="fail"),
            make_receipt("cache", dtype="fp32"), make_receipt("behavior", dtype="q4", outcome="skip"),
            make_receipt("training", "m", None, measurements={"final_over_initial_train_loss": 0.4})]
    new = [make_receipt("cache", dtype="q4", outcome="fail", reasons=["left-padded row: max error 2.76"]),
           make_receipt("cache", dtype="q8"), make_receipt("behavior", dtype="q4"),
           make_receipt("quantization", dtype="q4")]
    c = both(tmp_path, base, new)
    changes = {(r.dtype, r.gate, r.scope): r.change for r in c.verdicts}
    assert changes == {("q4", "cache", "variant"): "regression", ("q8", "cache", "variant"): "fixed",
                       ("fp32", "cache", "variant"): "disappeared", ("q4", "behavior", "variant"): "changed",
                       ("q4", "quantization", "variant"): "appeared", (None, "training", "run"): "disappeared"}
    reg = next(r for r in c.verdicts if r.change == "regression")
    assert reg.reasons == ("suites/test_cache.py::test_cache[m-q4]: left-padded row: max error 2.76",)
    verdict = next(x for x in c.thresholds if x.threshold == "verdict")
    assert len(verdict.items) == 3 and c.failed
    assert any("m-q4 / cache: pass → fail" in i for i in verdict.items)
    assert any("training" in i and "no receipt" in i for i in verdict.items)
    assert verdict_change("pass", "error") == "regression" and verdict_change("error", "fail") == "changed"
    assert not both(tmp_path / "same", base, base).failed


def test_quality_figures_with_uncertainty_and_thresholds(tmp_path):
    base = [quant_receipt(increase=0.01),
            make_receipt("behavior", dtype="q4", extra={"behavior": behavior_extra(60.0, ("format", "stopping"))})]
    new = [quant_receipt(increase=0.03),
           make_receipt("behavior", dtype="q4", extra={"behavior": behavior_extra(50.0, ("format", "stopping"))})]
    policy = ComparePolicy(fail_on=(Threshold("loss", 0.01), Threshold("quality", 5.0)))
    c = both(tmp_path, base, new, policy)
    q = {r.figure: r for r in c.quality}
    loss = q["held-out loss increase"]
    assert loss.base.stderr == pytest.approx(0.004 / 4.0) and loss.delta == pytest.approx(0.02)
    assert loss.delta_stderr == pytest.approx(math.sqrt(2) * 0.001) and loss.crossed == ("loss:1%",)
    assert q["quality index"].delta == -10 and q["quality index"].crossed == ("quality:5",)
    assert q["greedy.format"].base.counts == (1, 2) and q["mean KLD"].base.stderr is None
    assert [x.threshold for x in c.crossed] == ["loss:1%", "quality:5"] and c.failed
    assert not both(tmp_path / "loose", base, new, ComparePolicy(fail_on=(Threshold("loss", 0.05),))).failed


def test_provenance_differences_are_notes(tmp_path):
    c = both(tmp_path, [lane_receipt({"short": rates(1000)})],
             [lane_receipt({"short": rates(1000, seed=4)}, harness_sha="b" * 64, packages={**PACKAGES, "onnxruntime": "1.33.0"})])
    assert any(n.startswith("the harness source differs (informational): aaaaaaaaaaaa vs bbbbbbbbbbbb") for n in c.notes)
    assert any("onnxruntime 1.32.0 → 1.33.0" in n for n in c.notes)
    assert row(c).result == "unchanged"     # throughput is still compared: same machine


# -- rendering and the command line -------------------------------------------------------------------
def _runs(tmp_path, slowed=True, toml=""):
    camp = tmp_path / "campaign.toml"
    camp.write_text(toml)
    base = run_dir(tmp_path / "base", [lane_receipt({"short": rates(1000, seed=1)}), make_receipt("cache")], camp)
    new = run_dir(tmp_path / "new", [lane_receipt({"short": rates(600 if slowed else 1000, seed=2)}),
                                     make_receipt("cache")], camp)
    return base.path, new.path


def test_markdown_says_what_was_tested_and_crossed(tmp_path):
    base, new = _runs(tmp_path)
    c = compare(collect(base), collect(new), ComparePolicy(session_spread=0.2))
    md = render.markdown(c)
    for text in ("# Gatehouse compare: base → new", "**Result: regression.** Crossed: `decode:5%` (1)",
                 "**Mann-Whitney U (two-sided)**", "α = 0.01, family-wise: Holm's correction across the 1 throughput",
                 "Minimum samples: 5 per side", "not interleaved", "`decode:5%` (a decode throughput drop significant "
                 "after Holm's correction and larger than 5 %): **crossed** by 1", "`verdict` (", "not crossed",
                 "| m | q4 | native-probe | short | median | 1,000 | 602 | -39.8 % | 8/8 | 0 | 1.55×10⁻⁴ | 1.55×10⁻⁴ | 20 % |",
                 "**regression**: significant, slower than the decode:5% threshold and the session guard",
                 "Distribution used: exact.", "machine fingerprint", f"`{c.base.machines[0].digest}`"):
        assert text in md, text
    assert "2 gate verdict(s) compared" in md or "1 gate verdict(s) compared" in md
    summary = render.summary(c)
    assert summary.splitlines()[1].startswith("regression: decode:5% crossed by native-probe m-q4 short: -")


def test_cli_exit_codes_and_files(tmp_path, capsys):
    base, new = _runs(tmp_path)
    assert cli.main([str(base), str(new)]) == 1
    out, err = capsys.readouterr()
    assert out.startswith("# Gatehouse compare") and "decode:5% crossed by native-probe m-q4 short" in err
    assert cli.main([str(base), str(new), "--fail-on", "verdict"]) == 0
    assert cli.main([str(base), str(new), "--fail-on", "verdict", "--fail-on", "decode:50%"]) == 0
    assert cli.main([str(base), str(new), "--fail-on", "none"]) == 0
    assert cli.main([str(base), str(new), "--min-samples", "9"]) == 0     # 8 repeats a side: not tested
    assert cli.main([str(base), str(new), "--alpha", "0.0001"]) == 0      # the smallest p with 8/8 is 0.000155
    capsys.readouterr()
    md, page = tmp_path / "out.md", tmp_path / "out.html"
    from harness.report import mdhtml

    html_args = ["--html", str(page)] if hasattr(mdhtml, "markdown_page") else []
    assert cli.main([str(base), str(new), "--markdown", str(md), *html_args]) == 1
    out, _ = capsys.readouterr()
    assert out.splitlines()[0].startswith("compare base → new:") and str(md) in out
    assert md.read_text().startswith("# Gatehouse compare")
    if html_args:
        assert page.read_text().startswith("<!DOCTYPE html>") and "Mann-Whitney U (two-sided)" in page.read_text()


def test_the_new_runs_campaign_supplies_the_policy(tmp_path, capsys):
    base, new = _runs(tmp_path, toml='[compare]\nfail_on = ["decode:50%"]\n')
    assert cli.main([str(base), str(new)]) == 0
    assert "policy: [compare] of" in capsys.readouterr().out
    assert cli.main([str(base), str(new), "--fail-on", "decode:5%"]) == 1      # the command line wins
    other = tmp_path / "other.toml"
    other.write_text('[compare]\nfail_on = ["verdict"]\n')
    assert cli.main([str(base), str(new), "--campaign", str(other)]) == 0
    other.write_text('[compare]\nfail_on = ["sometimes"]\n')
    capsys.readouterr()
    assert cli.main([str(base), str(new), "--campaign", str(other)]) == 2
    assert f"{other}: compare.fail_on: 'sometimes' is not a threshold" in capsys.readouterr().err


@pytest.mark.parametrize("args,message", [
    (["{tmp}/nowhere", "{new}"], "{tmp}/nowhere: no such run directory"),
    (["{tmp}", "{new}"], "{tmp}/run.json: cannot read the run record"),
    (["{base}", "{new}", "--fail-on", "decode:5"], "command line: --fail-on: 'decode:5': decode takes a percentage"),
    (["{base}", "{new}", "--alpha", "often"], "command line: --alpha: expected a number, got 'often'"),
    (["{base}", "{new}", "--alpha", "0.9"], "command line: --alpha: must be <= 0.5, got 0.9"),
    (["{base}", "{new}", "--min-samples", "1"], "command line: --min-samples: must be >= 2, got 1"),
    (["{base}", "{new}", "--min-samples", "five"], "command line: --min-samples: expected an integer, got 'five'"),
    (["{base}", "{new}", "--max-foreign-cpu", "50%"], "command line: --max-foreign-cpu: expected a number, got '50%'"),
])
def test_unusable_input_exits_2_naming_it(tmp_path, capsys, args, message):
    base, new = _runs(tmp_path)
    fill = {"tmp": tmp_path, "base": base, "new": new}
    assert cli.main([a.format(**fill) for a in args]) == 2
    assert message.format(**fill) in capsys.readouterr().err


def test_python_dash_m_and_bin_gatehouse_wiring(tmp_path):
    base, new = _runs(tmp_path, slowed=False)
    out = subprocess.run([sys.executable, "-m", "harness.compare", str(base), str(new)], capture_output=True, text=True,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("# Gatehouse compare") and "no fail-on threshold crossed" in out.stderr
    script = (ROOT / "bin" / "gatehouse").read_text()
    assert 'compare)\n    shift\n    setup\n    exec "$PY" -m harness.compare "$@"' in script


# -- per-repeat samples recorded by the loop ------------------------------------------------------------
def test_the_loop_summary_keeps_per_repeat_rates_in_order():
    reps = [{"decode_tokens": 10, "decode_s": 1.0, "decode_tok_s": 10.0, "prefill_ms": 5.0},
            {"decode_tokens": 10, "decode_s": 0.5, "decode_tok_s": 20.0, "prefill_ms": 7.0}]
    s = tstats.summarize(reps)
    assert s["decode_tok_s_samples"] == [10.0, 20.0] and s["prefill_ms_samples"] == [5.0, 7.0]
    data = lane_receipt({"short": [100.0, 101.0, 99.0]})
    assert data["lane"]["cells"]["short"]["decode_tokens_per_s_samples"] == [100.0, 101.0, 99.0]
    assert json.loads(json.dumps(data)) == receipts.validate(data)


# -- several sessions per side: their spread is measured, not assumed -------------------------------------
def _sessions(tmp_path, name, centers, seed=0):
    """One run directory per session, each with the q4 short cell at its own center (a session's shift)."""
    return [collect(run_dir(tmp_path / f"{name}{i}", [lane_receipt({"short": rates(c, seed=seed + i)})]))
            for i, c in enumerate(centers)]


def test_sessions_that_land_apart_raise_the_guard_and_a_larger_slowdown_is_a_regression(tmp_path):
    base = _sessions(tmp_path, "b", [1000, 1250, 1100])            # same code: one session 20 % below another
    shifted = _sessions(tmp_path, "n", [900, 1000], seed=10)         # -17 %: no more than the sessions' own spread
    c = compare(base, shifted, ComparePolicy(session_spread=0.1))
    r = row(c)
    assert r.guard == pytest.approx(0.2, abs=0.01) and r.guard_source.startswith("measured")
    assert r.result == "slower" and not c.failed
    assert r.test.n_x == 16 and r.test.n_y == 24 and len(r.base.run_medians) == 3   # every session's repeats pooled
    slowed = _sessions(tmp_path, "s", [700, 720], seed=20)          # one thread: -35 %, beyond the spread
    c = compare(base, slowed, ComparePolicy(session_spread=0.1))
    assert row(c).result == "regression" and c.failed and c.runs == (("b0", "b1", "b2"), ("s0", "s1"))
    assert "measured: two runs of one side lie 20" in row(c).why
    c = compare(base, slowed, ComparePolicy(session_spread=0.4))    # the registered spread is the floor
    assert row(c).result == "slower" and row(c).guard == 0.4 and "registered" in row(c).guard_source


def test_the_cli_takes_several_runs_per_side(tmp_path, capsys):
    from harness.compare.cli import main

    paths = [run_dir(tmp_path / name, [lane_receipt({"short": rates(c, seed=i)})]).path
             for i, (name, c) in enumerate((("b0", 1000), ("b1", 1150), ("n0", 600), ("n1", 620)))]
    code = main(["--base", str(paths[0]), "--base", str(paths[1]), "--new", str(paths[2]), "--new", str(paths[3])])
    out = capsys.readouterr().out
    assert code == 1 and "runs (every session)" in out and "| 30 % |" in out
    with pytest.raises(SystemExit):
        main([str(paths[0]), "--base", str(paths[1]), "--new", str(paths[2])])
