"""Ranks and ratios as pure functions: speed (lane preference, short cell), quality and speed ranks with
their ties, the Pareto frontier, and the goal ratios with targets from a throughput_goal receipt or none."""

import dataclasses

from hypothesis import given, strategies as st

from harness.gates import goal_ratios
from harness.gates.throughput_goal import GoalPolicy
from harness.report import qualify, rank
from harness.view import CellFigures, LaneRow, ReceiptView

from test_report_collect import lane_measurements, make_receipt, variant_views


def lane(dtype, name, short, outcome="pass", model="m", iqr=None, cells=None):
    """A lane row as a receipt view reads it: the short cell at ``short`` tok/s (none when None), or ``cells``."""
    cells = cells if cells is not None else ({} if short is None else {"short": CellFigures(short, iqr, 10.0)})
    return LaneRow(model, dtype, name, "throughput_native", f"t[{model}-{dtype}-{name}]", outcome, None, cells)


def row(dtype, quality=None, size=1000, tok_s=None, passed=True, model="m", parameters=100):
    figures = {"parameters": parameters} if parameters is not None else {}
    if quality is not None:
        figures["quality_index"] = quality
    return {"model": model, "dtype": dtype, "passed_all_gates": passed, "graph_bytes": size, "figures": figures,
            "speed": None if tok_s is None else {"lane": "native-probe", "cell": "short", "decode_tok_s": tok_s}}


# -- speed --------------------------------------------------------------------------------------
def test_speed_prefers_the_probe_then_python_and_reads_the_short_cell():
    lanes = [lane("q4", "python-ort", 80.0), lane("q4", "native-probe", 150.0), lane("q4", "ort-web", 500.0)]
    assert rank.speed(lanes, "m", "q4") == {"lane": "native-probe", "cell": "short", "decode_tok_s": 150.0,
                                            "decode_tok_s_iqr": None, "foreign_cpu_share": None}
    lanes[1] = lane("q4", "native-probe", 150.0, iqr=4.5)         # the IQR over repeats travels with the figure
    assert rank.speed(lanes, "m", "q4")["decode_tok_s_iqr"] == 4.5
    lanes[1] = dataclasses.replace(lanes[1], outcome="fail")        # a failed probe receipt is not a speed
    assert rank.speed(lanes, "m", "q4")["lane"] == "python-ort"
    no_short = [lane("q4", "native-probe", None, cells={"long": CellFigures(90.0, None, 40.0)})]
    assert rank.speed(no_short, "m", "q4") is None
    again = [lane("q4", "native-probe", 150.0), lane("q4", "native-probe", 140.0)]
    assert rank.speed(again, "m", "q4")["decode_tok_s"] == 140.0   # the last receipt of the lane
    assert rank.speed(again, "m", "q8") is None


# -- ranks --------------------------------------------------------------------------------------
def test_quality_rank_orders_by_quality_then_smaller_graph_and_skips_the_unrankable():
    rows = [row("q4", 50.0, 500), row("q8", 50.0, 800), row("fp32", 60.0, 2000), row("q4", 99.0, 10, model="failed", passed=False),
            row("ort-genai-int4", 99.0, 10), row("q4", None, 400, model="unmeasured"), row("q8", 70.0, None, model="nosize")]
    assert rank.quality_ranks(rows) == {("m", "fp32"): 1, ("m", "q4"): 2, ("m", "q8"): 3}


def test_speed_rank_ties_by_quality_then_bytes():
    rows = [row("q4", 50.0, 500, tok_s=100.0), row("q8", 60.0, 800, tok_s=100.0), row("fp32", 60.0, 700, tok_s=100.0, model="n"),
            row("fp32", 70.0, 2000, tok_s=50.0), row("q4", 90.0, 100, tok_s=500.0, model="x", passed=False),
            row("q4", 90.0, 100, model="slowless")]
    assert rank.speed_ranks(rows) == {("n", "fp32"): 1, ("m", "q8"): 2, ("m", "q4"): 3, ("m", "fp32"): 4}


def test_frontier_uses_latency_only_when_every_rankable_variant_has_a_speed():
    rows = [row("fp32", 60.0, 4000, tok_s=100.0), row("q8", 55.0, 2000, tok_s=120.0), row("q4", 50.0, 1000, tok_s=90.0)]
    dims, front = rank.frontier(rows)
    assert dims == ["parameters", "graph_bytes", "latency_ms_per_token"]
    assert front == {("m", "q8"), ("m", "q4")}                     # fp32 is larger and slower than q8
    rows[2]["speed"] = None
    dims, front = rank.frontier(rows)
    assert dims == ["parameters", "graph_bytes"] and front == {("m", "q4")}
    rows.append(row("q4", 50.0, 10, model="noparams", parameters=None))
    assert ("noparams", "q4") not in rank.frontier(rows)[1]
    assert rank.frontier([row("q4", passed=False)]) == (["parameters", "graph_bytes"], set())


points = st.lists(st.fixed_dictionaries({"a": st.integers(0, 4), "b": st.integers(0, 4)}), min_size=1, max_size=12)


@given(points)
def test_pareto_frontier_properties(rows):
    front = rank.pareto_frontier(rows, ("a", "b"))
    assert front                                                   # a finite set always has a minimal element

    def dominates(o, c):
        return o["a"] <= c["a"] and o["b"] <= c["b"] and (o["a"] < c["a"] or o["b"] < c["b"])
    assert not any(dominates(o, c) for c in front for o in rows)
    assert all(any(dominates(o, c) for o in rows) for c in rows if not any(c is f for f in front))


# -- goal targets and ratios -------------------------------------------------------------------
def test_goal_fields_are_the_goal_policys():
    assert goal_ratios.GOAL_FIELDS == tuple(f.name for f in dataclasses.fields(GoalPolicy))


def test_targets_from_a_receipt_policy_new_and_v1_spellings():
    policy = GoalPolicy(vs_llamacpp=1.5, browser_over_native=0.4)
    recorded = {**policy.as_dict(), "targets": policy.rule_targets()}        # what test_throughput_goal records
    assert goal_ratios.targets_of(recorded) == {"vs_ortgenai": 1.0, "vs_llamacpp": 1.5, "probe_vs_ortgenai_within": 0.03,
                                         "browser_over_native": 0.4, "ort_web_over_transformers_js": 1.0,
                                         "browser_over_peer": 1.0}
    v1 = {"targets": {"vs_ortgenai": 1.0, "vs_llamacpp": 1.3, "probe_vs_ortgenai_tolerance": 0.03}}   # before GoalPolicy
    assert goal_ratios.targets_of(v1) == {"vs_ortgenai": 1.0, "vs_llamacpp": 1.3, "probe_vs_ortgenai_within": 0.03,
                                   "browser_over_native": None, "ort_web_over_transformers_js": None,
                                   "browser_over_peer": None}
    assert goal_ratios.targets_of({}) == dict.fromkeys(goal_ratios.GOAL_FIELDS)


def _lane_view(dtype, name, short, outcome="pass", model="m"):
    return ReceiptView(make_receipt("throughput_native" if name != "ort-web" else "throughput_browser", model, dtype,
                                    nodeid=f"t::{model}-{dtype}-{name}", outcome=outcome,
                                    measurements=lane_measurements(short), extra={"lane": name}))


def _judged(views, passed):
    return [v if qualify.is_run_level(v) else dataclasses.replace(v, variant_passed=(v.model, v.dtype) in passed)
            for v in views]


def test_ratios_take_targets_from_the_runs_goal_receipt():
    views = [_lane_view("q4", "native-probe", 150.0), _lane_view("q8", "native-probe", 300.0),
             _lane_view("ort-genai-int4", "ort-genai", 100.0), _lane_view("q4", "ort-web", 60.0)]
    goal = ReceiptView(make_receipt("throughput_goal", "m", "fp32", policy=GoalPolicy(vs_ortgenai=1.4).as_dict()))
    got = {q["ratio"]: q for q in goal_ratios.ratios(_judged(views + [goal], {("m", "q4")}), "throughput_goal")}
    fastest = got["fastest passing variant (probe) / ORT-GenAI own loop"]
    assert fastest["numerator"] == "q4 150" and fastest["value"] == 1.5     # q8 is faster but did not pass
    assert fastest["target"] == 1.4 and fastest["met"] is True
    browser = got["best browser variant (ort-web) / fastest passing native variant (probe)"]
    assert browser["value"] == 0.4 and browser["target"] == 0.5 and browser["met"] is False   # against q4, not q8

    untargeted = goal_ratios.ratios(_judged(views, {("m", "q4")}), "throughput_goal")
    assert [q["value"] for q in untargeted] == [q["value"] for q in got.values()]
    assert all(q["met"] is None and q["target"] is None and q["within"] is None for q in untargeted)


def test_each_model_reads_its_own_goal_receipt_else_the_runs():
    goals = [ReceiptView(make_receipt("throughput_goal", "a", "fp32", policy={"vs_ortgenai": 2.0})),
             ReceiptView(make_receipt("throughput_goal", "b", "fp32", policy={"vs_ortgenai": 3.0}))]
    t = goal_ratios.goal_targets(goals, ["a", "b", "c"])
    assert (t["a"]["vs_ortgenai"], t["b"]["vs_ortgenai"], t["c"]["vs_ortgenai"]) == (2.0, 3.0, 2.0)
    assert goal_ratios.goal_targets([], ["a"]) == {}


def test_ratios_over_a_whole_qualification():
    """Rows decided by qualify feed the passing set: a variant with a failing gate is never the fastest."""
    views = variant_views("m", "q4", tok_s=150.0) + variant_views("m", "q8", tok_s=300.0, skip=("cache",))
    views.append(ReceiptView(make_receipt("throughput_native", "m", "ort-genai-int4", nodeid="t::genai",
                                          measurements=lane_measurements(100.0), extra={"lane": "ort-genai"})))
    rows = qualify.variants(views, False)
    passed = {k for k, ok in qualify.passing(rows).items() if ok}
    assert ("m", "q4") in passed and ("m", "q8") not in passed
    [fastest] = [q for q in goal_ratios.ratios(_judged(views, passed), "throughput_goal") if q["ratio"].startswith("fastest")]
    assert fastest["numerator"] == "q4 150" and fastest["met"] is None
