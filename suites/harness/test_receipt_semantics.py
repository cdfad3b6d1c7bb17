"""The semantic receipt check (harness/receipt_check): a receipt the schema accepts but whose typed blocks say
something impossible is listed by the report as invalid, with its file and field, and never counted.

Every receipt here is made by the code that makes them in a run (``Receipt.record_lane`` over the loop's
``stats.summarize``, ``record_behavior`` over ``evaluate.score`` and the paired rule's own record,
``record_calibration`` over ``Condition.as_dict``, ``record_winrule``, the sampler's ``summarize``, the machine's
``fingerprint.machine()``, a recipe's ``Recipe.as_dict``), then damaged: one case per class, and at random
(Hypothesis) with type swaps, infinities and NaNs, zero denominators and negative counts.
"""

import copy
import json
import math
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from harness import fingerprint, receipt as receipts, sampler
from harness.behavior import calibration, evaluate, paired
from harness.gates import behavior as behavior_gate, winrule as winrule_gate
from harness.receipt import Receipt
from harness.receipt_check import problems
from harness.recipes import Recipe
from harness.report.assemble import decide
from harness.report.collect import collect
from harness.report.markdown import markdown
from harness.rundir import RunDir
from harness.throughput import stats
from harness.verdict import Measurement, Verdict

from test_report_fuzz import _paths

SHA = "b" * 64
RUN = {"run_id": "run", "screening": False, "worker": "main"}
CATEGORIES = ("format", "arithmetic")


# -- receipts as a run makes them ----------------------------------------------------------------------------
def provenance():
    machine = fingerprint.machine()
    return {"harness": {"sha256": SHA, "git_commit": None}, "packages": {"numpy": "2"}, "machine_before": machine,
            "machine_after": dict(machine), "campaign": {"name": "c", "sha256": SHA, "screening": False}, "threads": 2}


def machine_during():
    """The sampler's summary of three readings of /proc (busy, idle, iowait and steal ticks, our tree's ticks)."""
    s = [sampler.Sample(0.0, (100, 0, 50, 800, 5, 0, 0, 2), 2, 10, (2600.0,)),
         sampler.Sample(0.5, (160, 0, 70, 860, 6, 0, 0, 3), 3, 60, (2590.0,)),
         sampler.Sample(1.0, (220, 0, 90, 920, 7, 0, 0, 5), 2, 110, (2600.0, 2400.0))]
    return sampler.summarize(s, interval_s=0.5, mhz_source="cpuinfo")


def lane_receipt(art, rates=None):
    """A native lane over the loop's cell summaries (per-repeat decode tok/s ``rates`` per cell)."""
    rates = rates or {"short": [150.0, 148.0, 152.0], "long": [120.0]}
    r = Receipt("suites/test_t.py::test_lane[m-q4]", "throughput_native",
                {"model": "m", "dtype": "q4", "tier": "benchmark", "browser": True}, art)
    r.pin(art / "graph.onnx", "graph")
    cells = {}
    for cell, xs in rates.items():
        summary = stats.summarize([{"decode_tok_s": x, "prefill_ms": 10.0 + i, "decode_tokens": 64, "decode_s": 64 / x}
                                   for i, x in enumerate(xs)])
        cells[cell] = {**summary, "cpu_per_wall": 1.9, "step": {"decode_step_ms": 1000 / xs[0], "kv_bytes": 2e6},
                       "profile": {"kernel_ms": 3.0, "model_run_ms": 4.0, "decode_runs": 8,
                                   "top_kernels_ms": {"MatMul": 2.0}}}
    r.record_lane("native-probe", cells, {"load_ms": 9.0, "threads": 2})
    r.record_machine_during(machine_during(), "the native-probe lane")
    r.recheck_graphs()
    v = r.decide(Verdict.from_checks([], {"decode_tok_s_short": Measurement(r.lane["cells"]["short"][
        "decode_tokens_per_s"], "tokens/s", len(rates["short"]))}))
    return _finish(r, v)


def _rows(passed):
    """Transcript rows (greedy) of the cases: ``passed[i]`` for case i, alternating the categories."""
    return [{"mode": "greedy", "case": f"c{i}", "category": CATEGORIES[i % 2], "passed": ok, "stopped": True,
             "output_ids": [1, 2, 3], "flags": {"repetition": False, "empty": False, "garbage": False,
                                                 "budget_exhausted": False}} for i, ok in enumerate(passed)]


def _report(rows):
    rates = evaluate.score(rows, list(CATEGORIES), ("greedy",))
    return {"status": "complete", "suite_sha256": "s" * 64, "contract": {"seed": 1}, "categories": list(CATEGORIES),
            "rates": {k: v["value"] for k, v in rates.items()},
            "rate_counts": {k: {"numerator": v["numerator"], "denominator": v["denominator"]} for k, v in rates.items()},
            "quality_index": evaluate.quality_index(rates, list(CATEGORIES))}


def behavior_receipt(art, reference=(True,) * 12, candidate=(True,) * 10 + (False,) * 2):
    """A behavior comparison: both evaluations scored from their transcripts, the paired rule's record and verdict."""
    ref_rows, cand_rows = _rows(reference), _rows(candidate)
    ref, cand = _report(ref_rows), _report(cand_rows)
    policy = behavior_gate.BehaviorPolicy(minimum=tuple(f"greedy.{c}" for c in CATEGORIES) + ("greedy.stopped",),
                                          maximum=("greedy.garbage",))
    evidence = behavior_gate.BehaviorEvidence.pick({"reference": ref, "candidate": cand,
                                                    "flips": paired.table(ref_rows, cand_rows, 4)})
    timing = {"seconds": 3.0, "generated_tokens": 36, "modes": {"greedy": {"seconds": 3.0, "generated_tokens": 36}}}
    b = Receipt("suites/test_b.py::test_behavior[m-q4]", "behavior", {"model": "m", "dtype": "q4", "tier": "benchmark"}, art)
    b.pin(art / "report.json", "behavior_report")
    b.record_behavior({"quality_index": cand["quality_index"], "reference_quality_index": ref["quality_index"],
                       "categories": list(CATEGORIES), "rate_counts": cand["rate_counts"],
                       "reference_rate_counts": ref["rate_counts"], "timing": timing, "reference_timing": timing,
                       "evaluation_cached": False, "paired": behavior_gate.paired_record(evidence, policy)})
    return _finish(b, b.decide(behavior_gate.decide_gate(evidence, policy)))


def calibration_receipt(art, lost=3, gained=2, n=40):
    """The rule's calibration: a null condition (nothing changed) and a damaged one, each with its flips."""
    def condition(name, kind, lost, gained, failing):
        flips = (paired.count("greedy.format", [(True, False)] * lost + [(False, True)] * gained
                              + [(True, True)] * (n - lost - gained)),)
        return calibration.Condition(name, kind, f"{name} condition", ("greedy.format",), bool(failing),
                                     0.02 if kind == "null" else 0.95, 200, flips, failing, {"kl": 0.01})
    conds = [condition("same", "null", lost, gained, ()), condition("noise", "damaged", 20, 0, ("greedy.format",))]
    r = Receipt("suites/test_c.py::test_calibration[m-fp32]", "behavior_calibration", {"model": "m", "dtype": "fp32"}, art)
    r.level = "run"
    r.record_calibration([c.as_dict() for c in conds])
    return _finish(r, r.decide(calibration.decide(conds, 0.05, 0.8)))


def winrule_receipt(art, verdict="TIE", looks=(5, 10)):
    """A win-rule window's block (as harness.winrule.probe_window writes it) and the gate's verdict on it."""
    w = Receipt("suites/test_w.py::test_win_rule[m-q4-real]", "winrule", {"model": "m", "dtype": "q4"}, art)
    w.level = "run"
    reasons = ["the A/A spread exceeds the bound"] if verdict == "INVALID" else []
    w.record_winrule({"window": "real", "verdict": verdict, "verdict_before_override": None, "reasons": reasons,
                      "expected": "WIN", "markdown": "decision.md", "chart": "chart.png", "archive": "/a.jsonl",
                      "archived_rows": 3, "bad_evidence": [], "looks": list(looks), "outputs": "identical greedy ids",
                      "sampled": {"A1": machine_during(), "B1": machine_during()}, "waived": {},
                      "schedule_sha256": "c" * 64})
    evidence = winrule_gate.WindowEvidence(verdict=verdict, control_token_ms=2.0, reasons=tuple(reasons),
                                           window="real", expected="WIN")
    return _finish(w, w.decide(winrule_gate.decide(evidence, winrule_gate.WinrulePolicy())))


def recipe_receipt(art):
    recipe = Recipe(id="q4-x", method="gptq")
    r = Receipt("suites/test_q.py::test_quantization[m-q4-x]", "quantization",
                {"model": "m", "dtype": recipe.id, "tier": "benchmark", "browser": True, "recipe": recipe.as_dict()}, art)
    r.pin(art / "graph.onnx", "graph")
    return _finish(r, r.decide(Verdict.from_checks([], {"relative_increase": Measurement(0.02, "fraction", 100)})))


def _finish(r, verdict):
    outcome = "pass" if verdict.passed else "fail"
    return r.to_dict(outcome=outcome, reasons=list(verdict.reasons), provenance=provenance(), run=RUN)


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    folder = tmp_path_factory.mktemp("art")
    (folder / "graph.onnx").write_bytes(b"graph")
    (folder / "report.json").write_bytes(b"{}")
    return folder


def made(art):
    """One receipt of each typed block, by name (lane, behavior, calibration, winrule, recipe)."""
    return {"lane": lane_receipt(art), "behavior": behavior_receipt(art), "calibration": calibration_receipt(art),
            "winrule": winrule_receipt(art), "recipe": recipe_receipt(art)}


def write_run(path, datas):
    """A run directory holding ``datas`` (name -> receipt), written as JSON text as a disk or another tool may
    leave it: an infinity as ``1e999``, which Python's reader takes for infinity, a NaN as the literal ``NaN``."""
    run = RunDir(path)
    run.ensure({"name": "c", "path": "c.toml", "sha256": SHA, "screening": False}, False)
    files = {}
    for name, data in datas.items():
        text = json.dumps(data, indent=1).replace("-Infinity", "-1e999").replace("Infinity", "1e999")
        files[name] = run.receipt(data["nodeid"])
        files[name].write_text(text)
    return run, files


def report(run):
    """What the report reads, decides and renders (never raises)."""
    c = collect(run)
    rep, views = decide(c)
    return c, rep, markdown(rep, views)


def test_every_receipt_the_code_makes_is_valid(art):
    for name, data in made(art).items():
        assert problems(data) == [], name
        receipts.validate(data, name)


# -- one case per class ----------------------------------------------------------------------------------------
def _set(path, value):
    def mutate(d):
        node = d
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
    return mutate


CASES = [
    # a boolean where a count belongs
    ("behavior", _set(("behavior", "rate_counts", "greedy.format", "numerator"), True),
     "behavior.rate_counts.greedy.format.numerator: expected a whole number, got True"),
    ("lane", _set(("lane", "cells", "short", "repeats"), True), "lane/cells/short/repeats: True is not of type 'integer'"),
    ("behavior", _set(("behavior", "paired", "metrics", 0, "lost"), False), "behavior.paired.metrics[0].lost: expected a whole number"),
    # a zero denominator
    ("behavior", _set(("behavior", "paired", "metrics", 0, "n"), 0), "behavior.paired.metrics[0].n: expected a count >= 1, got 0"),
    ("behavior", _set(("behavior", "rate_counts", "greedy.format", "denominator"), 0),
     "behavior.rate_counts.greedy.format: numerator 5 of denominator 0: a zero denominator counts no case"),
    ("calibration", _set(("calibration", 0, "flips", 0, "n"), 0), "calibration/0/flips/0/n: 0 is less than the minimum of 1"),
    ("lane", _set(("lane", "cells", "long", "repeats"), 0),
     "lane.cells.long.decode_tokens_per_s: a figure over 0 repeats (null expected), got 120.0"),
    # a number overflowing to infinity (1e999 in the file)
    ("lane", _set(("lane", "cells", "short", "decode_tokens_per_s"), math.inf),
     "lane.cells.short.decode_tokens_per_s: expected a finite number, got inf"),
    ("behavior", _set(("behavior", "paired", "metrics", 0, "p_adjusted"), -math.inf),
     "behavior.paired.metrics[0].p_adjusted: expected a finite number, got -inf"),
    ("winrule", _set(("winrule", "sampled", "A1", "steal_fraction"), math.inf),
     "winrule.sampled.A1.steal_fraction: expected a finite number, got inf"),
    # a list where a fingerprint string belongs
    ("lane", _set(("provenance", "machine_before", "fingerprint"), ["0123456789abcdef"]),
     "provenance/machine_before/fingerprint: ['0123456789abcdef'] is not of type 'string'"),
    # a string where a recipe table belongs
    ("recipe", _set(("variant", "recipe"), "q4-x"), "variant/recipe: 'q4-x' is not of type 'object', 'null'"),
    # negative counts and figures
    ("lane", _set(("lane", "cells", "short", "prefill_ms"), -1.0), "lane/cells/short/prefill_ms: -1.0 is less than the minimum of 0"),
    ("winrule", _set(("winrule", "archived_rows"), -2), "winrule/archived_rows: -2 is less than the minimum of 0"),
    # counts against their denominators
    ("behavior", _set(("behavior", "paired", "metrics", 0, "gained"), 500),
     "behavior.paired.metrics[0]: lost 1 + gained 500, reference right 6 and candidate right 5 must each fit the 6 "
     "paired cases"),
    ("behavior", _set(("behavior", "reference_rate_counts", "greedy.arithmetic", "numerator"), 7),
     "behavior.reference_rate_counts.greedy.arithmetic: numerator 7 of denominator 6: more than every case"),
    ("lane", _set(("lane", "cells", "short", "decode_tokens_per_s_samples"), [150.0, 148.0]),
     "lane.cells.short.decode_tokens_per_s_samples: one sample per repeat (3), got 2"),
    # what the blocks imply of each other and of the verdict
    ("behavior", _set(("behavior", "quality_index"), 95.0),
     "behavior.quality_index: expected 100 x the mean greedy category rate, 83.3333 (format 5/6, arithmetic 5/6), got 95.0"),
    ("behavior", _set(("behavior", "paired", "metrics", 0, "decision"), "fail"),
     "behavior.paired.metrics[0].decision: a failing metric beside a rule that passed (verdict.decided true)"),
    ("winrule", _set(("winrule", "verdict"), "INVALID"),
     "winrule.verdict: an INVALID window beside a rule that passed (verdict.decided true)"),
    ("recipe", _set(("verdict", "decided"), False), "verdict.outcome: the rule decided fail (verdict.decided false), got outcome 'pass'"),
    ("recipe", _set(("variant", "recipe", "bits"), 8), "variant.recipe.bits: expected 4 (policy_dtype 'q4' is the 4-bit dtype), got 8"),
    ("calibration", _set(("calibration", 0, "failed"), True), "calibration[0].failed: expected False (failing metrics: none), got True"),
    ("lane", _set(("graph_recheck", "changed"), [{"role": "graph", "path": "/elsewhere.onnx", "sha256_pinned": SHA,
                                                 "sha256_after": SHA, "bytes_pinned": 5, "bytes_after": 5}]),
     "graph_recheck.changed[0]: graph /elsewhere.onnx changed but is not among the graphs checked"),
    ("lane", _set(("machine_during", "steal_fraction"), 0.5), "machine_during.steal_fraction: expected at most steal_fraction_peak"),
]


@pytest.mark.parametrize("name, mutate, says", CASES, ids=[c[2].split(":")[0] for c in CASES])
def test_a_receipt_that_says_something_impossible_is_listed_with_its_field_and_never_counted(art, tmp_path, name,
                                                                                          mutate, says):
    datas = made(art)
    bad = copy.deepcopy(datas[name])
    mutate(bad)
    run, files = write_run(tmp_path / "run", {**datas, name: bad})
    c, rep, md = report(run)
    listed = [b for b in rep["invalid_receipts"] if b["path"] == str(files[name])]
    assert len(listed) == 1 and says in listed[0]["error"], rep["invalid_receipts"]
    assert listed[0]["error"].startswith(f"{files[name]}: invalid receipt at ")
    assert bad["nodeid"] not in {v.nodeid for v in c.views}                 # never counted
    assert rep["receipts"] == len(datas) - 1 and str(files[name]) in md      # the rest is, and report.md lists it


def test_the_merge_and_the_remote_controller_refuse_it_by_file_and_field(art, tmp_path):
    from harness import merge, remote
    from harness.errors import HarnessError

    bad = copy.deepcopy(made(art)["lane"])
    bad["lane"]["cells"]["short"]["repeats"] = 0
    run, files = write_run(tmp_path / "run", {"lane": bad})
    with pytest.raises(HarnessError, match=re.escape(f"{files['lane']}: invalid receipt at lane.cells.short.decode")):
        merge.read(run.path)
    shipped = {"receipt": json.dumps(bad), "evidence": {}, "builds": []}
    target = RunDir(tmp_path / "controller")
    target.ensure({"name": "c", "path": "c.toml", "sha256": SHA, "screening": False}, False)
    with pytest.raises(HarnessError, match="shipped by a remote worker: invalid receipt at lane.cells.short"):
        remote.accept(target, shipped, "controller")
    nan = json.dumps(made(art)["lane"]).replace('"load_ms": 9.0', '"load_ms": NaN')   # Python's reader takes NaN
    with pytest.raises(HarnessError, match="invalid receipt at lane.load_ms: expected a finite number, got nan"):
        remote.accept(target, {"receipt": nan}, "controller")
    assert not target.receipt_files()


# -- at random --------------------------------------------------------------------------------------------------
TYPED = (("lane",), ("behavior",), ("calibration",), ("winrule",), ("machine_during",), ("graph_recheck",),
         ("variant", "recipe"), ("provenance", "machine_before"), ("provenance", "machine_after"))
SWAPS = ("fast", True, [], {}, [1, "x"], {"value": "x"}, 1.5, -1)
# figures that may be negative (a drop, its interval, a change measured, a temperature)
SIGNED = re.compile(r"(\.drop|\.low|\.high|\.measured\.[^.]+|thermal_max_c)$")
# counts whose zero is no count: paired cases, a thread count, a look, resamples and seeds, CPUs, a block size
NEVER_ZERO = re.compile(r"(\.n|lane\.threads|looks\[\d+\]|\.resamples|calibration\[\d+\]\.seeds|metrics\[\d+\]\.seeds"
                        r"|logical_cpus|affinity_cpus|block_size)$")


def _get(data, path):
    for k in path:
        try:
            data = data[k]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _kind(v):
    return {bool: "flag", int: "number", float: "number", str: "text", list: "list", dict: "table"}.get(type(v))


def _dotted(path):
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path).lstrip(".")


def _must_refuse(pristine, final, path, how, value):
    """Whether one surviving mutation makes the receipt invalid, whatever else changed: a non-finite number
    anywhere; a value of another JSON type than the one the code wrote (null aside); a negative figure that is
    never negative; a zero that is no count; a zero denominator under a numerator."""
    if how in ("inf", "nan"):
        return True
    before, where = _get(pristine, path), _dotted(path)
    if how == "swap":
        return _kind(before) is not None and _kind(value) != _kind(before)
    if _kind(before) != "number":
        return False
    if how == "negative":
        return not SIGNED.search(where)
    if NEVER_ZERO.search(where):
        return True
    sibling = _get(final, path[:-1]) or {}
    if path[-1] == "denominator":
        return isinstance(sibling.get("numerator"), int) and sibling["numerator"] > 0
    if path[-1] == "repeats":
        return isinstance(sibling.get("decode_tokens_per_s"), (int, float))
    return False


MUTATION = st.tuples(st.integers(0, 4), st.integers(0, 10**6), st.sampled_from(["swap", "inf", "nan", "zero", "negative"]),
                     st.sampled_from(range(len(SWAPS))))


def _mutate(datas, pristine, mutations):
    """Apply the mutations (to the typed blocks of one receipt each) and say which receipts must be refused."""
    names = sorted(datas)
    log = []
    for which, pick, how, swap in mutations:
        name = names[which % len(names)]
        data = datas[name]
        targets = [p for root in TYPED if _get(data, root) is not None for p in _paths(_get(data, root), root)]
        if how in ("zero", "negative"):
            targets = [p for p in targets if _kind(_get(data, p)) == "number"]
        if not targets:
            continue
        path = targets[pick % len(targets)]
        value = {"swap": SWAPS[swap], "inf": math.inf if pick % 2 else -math.inf, "nan": math.nan, "zero": 0,
                 "negative": -1}[how]
        node = _get(data, path[:-1])
        node[path[-1]] = copy.deepcopy(value)
        log.append((name, path, how, value))
    refused, kept = set(), []
    for name, path, how, value in reversed(log):     # a later mutation at the same field or above it wins
        if any(n == name and path[:len(p)] == p for n, p in kept):
            continue
        kept.append((name, path))
        if _must_refuse(pristine[name], datas[name], path, how, value):
            refused.add(name)
    return refused


@settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(short=st.lists(st.floats(1.0, 1000.0), min_size=1, max_size=4),
       candidate=st.lists(st.booleans(), min_size=4, max_size=12), lost=st.integers(0, 20),
       verdict=st.sampled_from(["WIN", "LOSS", "TIE", "INCONCLUSIVE", "INVALID"]),
       mutations=st.lists(MUTATION, max_size=3))
def test_damaged_typed_blocks_never_crash_the_report_and_are_never_counted(art, tmp_path, short, candidate, lost,
                                                                         verdict, mutations):
    import tempfile

    datas = {"lane": lane_receipt(art, {"short": short, "long": short[:1]}),
             "behavior": behavior_receipt(art, (True,) * len(candidate), tuple(candidate)),
             "calibration": calibration_receipt(art, lost, 20 - lost, 40), "winrule": winrule_receipt(art, verdict),
             "recipe": recipe_receipt(art)}
    for name, data in datas.items():
        assert problems(data) == [], name             # what the code makes is valid
    pristine = copy.deepcopy(datas)
    refused = _mutate(datas, pristine, mutations)
    run, files = write_run(Path(tempfile.mkdtemp(dir=tmp_path)) / "run", datas)
    c, rep, md = report(run)                          # never raises
    invalid = {b["path"] for b in c.invalid}
    counted = {v.nodeid for v in c.views}
    for name, data in datas.items():
        assert (str(files[name]) in invalid) != (data["nodeid"] in counted), name   # listed or counted, not both
        if name in refused:
            assert str(files[name]) in invalid and str(files[name]) in md, (name, mutations)
    for v in c.views:                                 # what is counted holds nothing the check refuses
        assert problems(v.data) == []
