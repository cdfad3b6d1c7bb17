"""Unit tests of the A/B/A win rule: statistic, checks, drift, decision record and its renderings."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from harness.errors import EvidenceError
from harness.winrule import (
    INCONCLUSIVE, LOSS, TIE, WIN, Bound, DriftPolicy, Metric, Registration, RegistrationError, Start,
    StartRecordError, WaveInput, check_drift, decide, draw_chart, paired_verdict, render_markdown,
)
from harness.winrule.statistics import log_gain, t_quantile

REG = Registration(
    "decode-abab", 1, ("short-decode", "long-decode"), repeats=3, waves_per_repeat=2,
    primary=Metric("decode_tokens_per_s", "tokens/s", True),
    guards=(Metric("prefill_ms", "ms", False),), reported=(Metric("ttft_ms", "ms", False),),
    required_effect=0.02)
FP = {"cpu_model": "Test CPU", "logical_cpus": 2, "cpu_governor": "performance", "cpu_mhz": 3000.0,
      "thermal_max_c": 50.0, "loadavg_1m": 0.5, "threads": 2}
POLICY = DriftPolicy(equal=("cpu_model", "logical_cpus", "cpu_governor", "threads"),
                     bounds={"cpu_mhz": Bound(max_rel=0.05), "thermal_max_c": Bound(max_abs=10.0)},
                     max_loadavg=1.5)
NOISE = (1.0, 1.003, 0.998)


def start(index: int, *, primary: float = 1.0, guard: float = 1.0, reg: Registration = REG, **changes) -> Start:
    """Start ``index`` (0, 1, 2) of a window; the candidate's metrics are scaled by ``primary`` / ``guard``."""
    role = "candidate" if index == 1 else "control"
    values = {}
    inputs = {}
    outputs = {}
    for c, cell in enumerate(reg.cells):
        base = 40.0 / (c + 1)
        scale = {reg.primary.name: primary, **{g.name: guard for g in reg.guards}}
        values[cell] = {m.name: [base * (m.name != "prefill_ms" or 0.5) * n * (scale.get(m.name, 1.0) if role ==
                                                                              "candidate" else 1.0)
                                 for n in NOISE[:reg.repeats]] for m in reg.metrics}
        inputs[cell] = [WaveInput(f"sha-{cell}-{w}", f"fam-{w % 2}", 42 + w, f"salt-{index}-{cell}-{w}")
                        for w in range(reg.waves)]
        outputs[cell] = [[7, 11, 13, c, w] for w in range(reg.waves)]
    record = dict(label=f"s{index + 1}", role=role, registration=reg.key,
                  config="candidate" if role == "candidate" else "baseline", values=values, inputs=inputs,
                  fingerprint=dict(FP), commit="c0ffee", outputs=outputs)
    record.update(changes)
    return Start(**record)


def window(primary: float = 1.0, guard: float = 1.0) -> list[Start]:
    return [start(0), start(1, primary=primary, guard=guard), start(2)]


# --- the statistic -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("df, expected", [(1, 6.313752), (2, 2.919986), (3, 2.353363), (4, 2.131847),
                                          (9, 1.833113), (30, 1.697261)])
def test_t_quantile_matches_the_published_table(df, expected):
    assert t_quantile(0.95, df) == pytest.approx(expected, abs=2e-6)


def test_t_quantile_refuses_bad_arguments():
    with pytest.raises(EvidenceError, match="df"):
        t_quantile(0.95, 0)
    with pytest.raises(EvidenceError, match="p must"):
        t_quantile(0.4, 3)


def test_log_gain_is_oriented_and_antisymmetric():
    assert log_gain(100.0, 110.0, True) == pytest.approx(math.log(1.1))
    assert log_gain(100.0, 110.0, False) == pytest.approx(-math.log(1.1))
    assert log_gain(3.7, 1.9, True) == -log_gain(1.9, 3.7, True)


def test_paired_verdict_win_loss_tie():
    control = [100.0, 101.0, 99.0]
    win = paired_verdict(control, [105.0, 106.5, 104.2], higher_is_better=True, required_effect=0.02, alpha=0.05)
    assert win.verdict == WIN and win.all_clear_win and win.lower_bound > 0
    loss = paired_verdict(control, [95.0, 96.0, 94.0], higher_is_better=True, required_effect=0.02, alpha=0.05)
    assert loss.verdict == LOSS
    # Lower is better: the same numbers are a WIN.
    assert paired_verdict(control, [95.0, 96.0, 94.0], higher_is_better=False, required_effect=0.02,
                          alpha=0.05).verdict == WIN
    # One repeat short of the effect: TIE, however large the others.
    assert paired_verdict(control, [110.0, 111.0, 100.0], higher_is_better=True, required_effect=0.02,
                          alpha=0.05).verdict == TIE


def test_paired_verdict_needs_the_statistic_to_agree():
    # Every repeat clears 2 %, but they scatter so widely that the t bound does not exclude zero.
    result = paired_verdict([100.0, 100.0, 100.0], [102.5, 103.0, 160.0], higher_is_better=True,
                            required_effect=0.02, alpha=0.05)
    assert result.all_clear_win and result.lower_bound <= 0 and result.verdict == TIE


@pytest.mark.parametrize("control, candidate, match", [
    ([1.0, 2.0], [1.0], "differ in length"),
    ([1.0], [1.0], "at least 2"),
    ([1.0, math.nan], [1.0, 1.0], r"control\[1\]"),
    ([1.0, 1.0], [1.0, -1.0], r"candidate\[1\]"),
    ([1.0, 1.0], [1.0, math.inf], r"candidate\[1\]"),
])
def test_paired_verdict_refuses_partial_or_bad_series(control, candidate, match):
    with pytest.raises(EvidenceError, match=match):
        paired_verdict(control, candidate, higher_is_better=True, required_effect=0.02, alpha=0.05)


# --- registration and start records --------------------------------------------------------------------------


@pytest.mark.parametrize("change, match", [
    ({"repeats": 1}, "repeats"), ({"cells": ()}, "cell"), ({"required_effect": 0.0}, "required_effect"),
    ({"required_effect": math.nan}, "required_effect"), ({"alpha": 0.5}, "alpha"), ({"seeds": "maybe"}, "seeds"),
    ({"guards": (Metric("decode_tokens_per_s", "tokens/s", True),)}, "metric names repeat"),
    ({"name": "Bad Name"}, "registration name"), ({"version": 0}, "version"),
])
def test_registration_refuses_bad_fields_by_name(change, match):
    with pytest.raises(RegistrationError, match=match):
        dataclasses.replace(REG, **change)


def test_registration_round_trips_through_json():
    data = json.loads(json.dumps(REG.as_dict()))
    assert Registration.from_dict(data) == REG


def test_start_record_round_trips_and_keeps_non_finite_values_for_the_rule():
    s = start(0)
    values = {c: dict(m) for c, m in s.values.items()}
    values["short-decode"]["ttft_ms"] = (math.nan, 1.0, 2.0)  # a lane measured a NaN: still recordable
    s = dataclasses.replace(s, values=values)
    data = json.loads(json.dumps(s.as_dict(), allow_nan=False))
    back = Start.from_dict(data)
    assert math.isnan(back.values["short-decode"]["ttft_ms"][0])
    assert back.inputs == s.inputs and back.fingerprint == s.fingerprint


@pytest.mark.parametrize("change, match", [
    ({"role": "treatment"}, "role"), ({"label": ""}, "label"),
    ({"values": {"short-decode": {"decode_tokens_per_s": ["fast"]}}}, r"values\['short-decode'\]"),
    ({"fingerprint": {"cpu": [1, 2]}}, r"fingerprint\['cpu'\]"),
])
def test_malformed_start_record_is_an_error_naming_the_field(change, match):
    with pytest.raises(StartRecordError, match=match):
        start(0, **change)


def test_start_record_is_read_only():
    s = start(0)
    with pytest.raises(TypeError):
        s.values["short-decode"]["ttft_ms"] = (1.0, 1.0, 1.0)
    with pytest.raises(TypeError):
        s.fingerprint["cpu_mhz"] = 1.0


def test_start_from_dict_names_a_missing_field():
    data = start(0).as_dict()
    del data["config"]
    with pytest.raises(StartRecordError, match="config"):
        Start.from_dict(data)


# --- windows ---------------------------------------------------------------------------------------------------


def test_clear_improvement_is_a_win_with_a_full_record():
    d = decide(window(primary=1.05), REG, POLICY)
    assert d.verdict == WIN and d.verdict_before_override == WIN and not d.reasons
    assert len(d.series) == len(REG.cells) * len(REG.metrics)
    s = d.series_of("short-decode", "decode_tokens_per_s")
    assert s.control == tuple((a + b) / 2 for a, b in zip(s.control_first, s.control_last))
    assert s.off_off_spread == 0.0
    assert d.alternatives == {"prefill_ms": TIE, "ttft_ms": TIE}
    json.dumps(d.as_dict(), allow_nan=False, sort_keys=True)
    assert "WIN" in d.render()


def test_clear_regression_is_a_loss():
    assert decide(window(primary=0.95), REG, POLICY).verdict == LOSS


def test_loss_in_one_cell_is_a_loss_even_if_the_other_wins():
    starts = window(primary=1.05)
    values = {c: dict(m) for c, m in starts[1].values.items()}
    values["long-decode"]["decode_tokens_per_s"] = tuple(v / 1.05 / 1.05
                                                         for v in values["long-decode"]["decode_tokens_per_s"])
    starts[1] = dataclasses.replace(starts[1], values=values)
    d = decide(starts, REG, POLICY)
    assert d.series_of("short-decode", "decode_tokens_per_s").verdict == WIN
    assert d.series_of("long-decode", "decode_tokens_per_s").verdict == LOSS
    assert d.verdict == LOSS


def test_guard_loss_blocks_the_win_and_is_named():
    d = decide(window(primary=1.05, guard=1.05), REG, POLICY)  # prefill_ms is lower-is-better: +5 % is a loss
    assert d.verdict == TIE
    assert d.blocked_by == ("prefill_ms LOSS in cell 'short-decode'", "prefill_ms LOSS in cell 'long-decode'")
    assert d.alternatives["prefill_ms"] == LOSS


def test_a_guard_win_adds_nothing():
    assert decide(window(primary=1.0, guard=0.9), REG, POLICY).verdict == TIE


def _inputs(s: Start, cell: str, wave: int, **change) -> Start:
    inputs = {c: list(w) for c, w in s.inputs.items()}
    inputs[cell][wave] = dataclasses.replace(inputs[cell][wave], **change)
    return dataclasses.replace(s, inputs=inputs)


OVERRIDES = {
    "prompt": (lambda w: [w[0], _inputs(w[1], "long-decode", 3, prompt_sha256="other"), w[2]],
               "matched inputs differ: cell 'long-decode' wave 3 prompt_sha256"),
    "family": (lambda w: [w[0], w[1], _inputs(w[2], "short-decode", 0, family="fam-9")], "family"),
    "order": (lambda w: [w[0], dataclasses.replace(w[1], inputs={c: tuple(reversed(x)) for c, x in
                                                                  w[1].inputs.items()}), w[2]], "matched inputs"),
    "seed": (lambda w: [w[0], _inputs(w[1], "short-decode", 2, seed=7), w[2]], "seed is 44"),
    "salt": (lambda w: [w[0], _inputs(w[1], "short-decode", 0, salt="salt-0-short-decode-0"), w[2]],
             "salts repeat where they must be fresh"),
    "seed-within": (lambda w: [_inputs(s, "short-decode", 1, seed=42) for s in w], "seeds repeat"),
    "salt-missing": (lambda w: [w[0], _inputs(w[1], "short-decode", 1, salt=None), w[2]],
                     "salt recorded for some waves"),
    "governor": (lambda w: [w[0], dataclasses.replace(w[1], fingerprint={**FP, "cpu_governor": "powersave"}), w[2]],
                 "'cpu_governor' differs"),
    "frequency": (lambda w: [w[0], w[1], dataclasses.replace(w[2], fingerprint={**FP, "cpu_mhz": 2000.0})],
                  "'cpu_mhz' moved"),
    "thermal": (lambda w: [w[0], w[1], dataclasses.replace(w[2], fingerprint={**FP, "thermal_max_c": 75.0})],
                "'thermal_max_c' moved by 25"),
    "load": (lambda w: [w[0], dataclasses.replace(w[1], fingerprint={**FP, "loadavg_1m": 3.0}), w[2]],
             "machine load"),
    "threads-missing": (lambda w: [w[0], dataclasses.replace(w[1], fingerprint={k: v for k, v in FP.items()
                                                                                 if k != "threads"}), w[2]],
                        "'threads' is missing at some starts"),
    # The last control 20 % faster than the first: a monotone drift could bias the pairing by up to ~9.5 %,
    # more than the candidate's ~5.5 % over its paired control.
    "off-off": (lambda w: [w[0], dataclasses.replace(w[1], values={
        c: {m: tuple(v * (1.16 / 1.05 if m == "decode_tokens_per_s" else 1.0) for v in s) for m, s in ms.items()}
        for c, ms in w[1].values.items()}), dataclasses.replace(w[2], values={
            c: {m: tuple(v * 1.2 for v in s) for m, s in ms.items()} for c, ms in w[2].values.items()})],
                "drift could explain the effect"),
}


@pytest.mark.parametrize("name", sorted(OVERRIDES))
def test_each_override_makes_the_window_inconclusive_with_its_reason(name):
    perturb, phrase = OVERRIDES[name]
    d = decide(perturb(window(primary=1.05)), REG, POLICY)
    assert d.verdict == INCONCLUSIVE
    assert d.verdict_before_override == WIN  # complete evidence: what the rule said is kept, and overridden
    assert any(phrase in r for r in d.reasons), d.reasons


BAD_INPUT = {
    "missing-start": (lambda w: w[:2], "needs 3 starts, got 2"),
    "no-starts": (lambda w: [], "got 0"),
    "order": (lambda w: [w[1], w[0], w[2]], "out of order"),
    "incomplete": (lambda w: [w[0], w[1], dataclasses.replace(w[2], complete=False,
                                                              incomplete_reason="killed at repeat 2")],
                   "incomplete: killed at repeat 2"),
    "registration": (lambda w: [w[0], dataclasses.replace(w[1], registration="decode-abab@2"), w[2]],
                     "recorded under registration 'decode-abab@2'"),
    "unequal-repeats": (lambda w: [w[0], dataclasses.replace(w[1], values={
        c: {m: s[:2] for m, s in ms.items()} for c, ms in w[1].values.items()}), w[2]], "has 2 repeats"),
    "non-finite": (lambda w: [w[0], dataclasses.replace(w[1], values={
        **w[1].values, "short-decode": {**w[1].values["short-decode"], "decode_tokens_per_s": (1.0, math.nan, 1.0)}}),
        w[2]], "non-finite or non-positive values at repeats [1]"),
    "missing-cell": (lambda w: [w[0], dataclasses.replace(w[1], values={"short-decode": w[1].values["short-decode"]}),
                                w[2]], "lacks cell 'long-decode'"),
    "missing-metric": (lambda w: [w[0], w[1], dataclasses.replace(w[2], values={
        c: {m: s for m, s in ms.items() if m != "ttft_ms"} for c, ms in w[2].values.items()})],
        "lacks metric 'ttft_ms'"),
    "extra-metric": (lambda w: [dataclasses.replace(w[0], values={
        c: {**ms, "tokens": (1.0, 1.0, 1.0)} for c, ms in w[0].values.items()}), w[1], w[2]],
        "unregistered metric 'tokens'"),
    "controls-differ": (lambda w: [w[0], w[1], dataclasses.replace(w[2], config="other")],
                        "control starts ran different configs"),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUT))
def test_bad_input_is_inconclusive_and_no_verdict_is_computed(name):
    perturb, phrase = BAD_INPUT[name]
    d = decide(perturb(window(primary=1.05)), REG, POLICY)
    assert d.verdict == INCONCLUSIVE and d.verdict_before_override is None
    assert all(s.result is None for s in d.series)
    assert set(d.alternatives.values()) == {None}
    assert any(phrase in r for r in d.reasons), d.reasons
    json.dumps(d.as_dict(), allow_nan=False)  # NaN becomes null in the record
    render_markdown(d)


def test_decide_refuses_what_is_not_evidence():
    with pytest.raises(EvidenceError, match=r"starts\[1\]"):
        decide([start(0), {"label": "s2"}, start(2)], REG, POLICY)
    with pytest.raises(EvidenceError, match="registration"):
        decide(window(), REG.as_dict(), POLICY)


def test_a_guard_with_its_own_effect_uses_it():
    reg = dataclasses.replace(REG, guards=(Metric("prefill_ms", "ms", False, required_effect=0.10),))
    w = [start(0, reg=reg), start(1, primary=1.05, guard=1.05, reg=reg), start(2, reg=reg)]
    d = decide(w, reg, POLICY)
    assert d.series_of("short-decode", "prefill_ms").required_effect == 0.10
    assert d.verdict == WIN  # a 5 % guard slowdown is inside that guard's registered 10 %


# --- drift -----------------------------------------------------------------------------------------------------


def test_drift_records_what_was_checked_and_fails_closed_on_what_is_not_exposed():
    policy = DriftPolicy(equal=("cpu_model", "gpu_model"), bounds={"cpu_mhz": Bound(max_abs=100.0)})
    report = check_drift([FP, {**FP, "cpu_mhz": 3050.0}], policy)
    assert report.checked == ("cpu_model", "cpu_mhz") and report.absent == ("gpu_model",)
    assert report.reasons == ("clock guard: fingerprint reading 'gpu_model' was not recorded at any start; the guard "
                              "fails closed (a campaign may waive it by name with its reason)",)
    waived = dataclasses.replace(policy, waived={"gpu_model": "no GPU on this machine"})
    report = check_drift([FP, {**FP, "cpu_mhz": 3050.0}], waived)
    assert not report.drifted and report.waived == (("gpu_model", "no GPU on this machine"),)


def test_drift_treats_none_as_not_exposed_and_one_sided_none_as_drift():
    policy = DriftPolicy(equal=("cpu_governor",))
    assert check_drift([{"cpu_governor": None}] * 3, policy).absent == ("cpu_governor",)
    report = check_drift([{"cpu_governor": None}, {"cpu_governor": "performance"}], policy, ["a", "b"])
    assert report.reasons == ("machine drift: fingerprint key 'cpu_governor' is missing at some starts "
                              "(a=None, b='performance')",)


def test_drift_bounds_are_absolute_and_relative():
    policy = DriftPolicy(bounds={"cpu_mhz": Bound(max_rel=0.05), "thermal_max_c": Bound(max_abs=5.0)})
    assert not check_drift([FP, {**FP, "cpu_mhz": 3100.0}, FP], policy).drifted
    report = check_drift([FP, {**FP, "cpu_mhz": 2500.0, "thermal_max_c": 56.0}, FP], policy)
    assert len(report.reasons) == 2
    assert check_drift([FP, {**FP, "cpu_mhz": "fast"}], policy).reasons[0].startswith(
        "machine drift: 'cpu_mhz' must be a finite number")


def test_drift_refuses_the_wrong_number_of_fingerprints_and_bad_policies():
    with pytest.raises(EvidenceError, match="2 or 3"):
        check_drift([FP], POLICY)
    with pytest.raises(EvidenceError, match="both equal and bounded"):
        DriftPolicy(equal=("cpu_mhz",), bounds={"cpu_mhz": Bound(max_abs=1.0)})
    with pytest.raises(EvidenceError, match="max_abs"):
        Bound(max_abs=-1.0)


def test_default_policy_covers_the_fingerprint_collectors_keys():
    policy = DriftPolicy.default()
    assert {"cpu_model", "logical_cpus", "cpu_governor"} <= set(policy.equal)
    assert {"cpu_mhz", "thermal_max_c"} <= set(policy.bounds)


# --- renderings --------------------------------------------------------------------------------------------------


def test_markdown_lists_every_series_and_repeat_and_the_reasons():
    d = decide(OVERRIDES["governor"][0](window(primary=1.05)), REG, POLICY)
    text = render_markdown(d)
    assert "**INCONCLUSIVE**" in text and "Before the override the rule said **WIN**" in text
    assert "'cpu_governor' differs" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == len(REG.cells) * len(REG.metrics) * REG.repeats
    assert "With another primary:" in text and "+5.00%" in text


def test_chart_is_written_as_png(tmp_path):
    out = draw_chart(decide(window(primary=1.05), REG, POLICY), tmp_path / "charts" / "window.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    partial = draw_chart(decide(window()[:2], REG, POLICY), tmp_path / "partial.png")
    assert partial.stat().st_size > 0


def test_a_bad_reported_metric_never_voids_a_window_and_is_named():
    """A zero CPU-per-wall (a coarse clock) in a reported metric: the primary still decides, and the record
    names the impossible value instead of treating it as missing evidence."""
    w = window(primary=1.10)
    w[1] = dataclasses.replace(w[1], values={**w[1].values, "short-decode": {
        **w[1].values["short-decode"], "ttft_ms": (0.0, 1.0, 1.0)}})
    d = decide(w, REG, POLICY)
    assert d.verdict == WIN and not d.reasons
    assert len(d.bad_evidence) == 1 and "'ttft_ms'" in d.bad_evidence[0] and "[0.0]" in d.bad_evidence[0]
    assert d.series_of("short-decode", "ttft_ms").result is None and d.alternatives["ttft_ms"] is None
    assert d.as_dict()["bad_evidence"] == list(d.bad_evidence)
    assert "Bad evidence in reported metrics" in render_markdown(d)


# --- the correctness prerequisite, the fail-closed guard, the schedule and the stopping rule -------------------


def _wrong(s: Start, cell: str = "long-decode", wave: int = 3, token: int = 2) -> Start:
    outputs = {c: [list(ids) for ids in ws] for c, ws in s.outputs.items()}
    outputs[cell][wave][token] += 1
    return dataclasses.replace(s, outputs=outputs)


def test_a_faster_candidate_with_other_greedy_ids_is_invalid_naming_the_first_difference():
    w = window(primary=1.5)
    d = decide([w[0], _wrong(w[1]), w[2]], REG, POLICY)
    assert d.verdict == "INVALID" and d.verdict_before_override == WIN
    assert d.reasons[0] == ("the candidate computes something else: greedy ids differ in cell 'long-decode' wave 3 "
                            "at token 2 ('s1' 13 vs 's2' 14)")


def test_controls_that_do_not_repeat_themselves_are_invalid_whatever_the_candidate():
    w = window(primary=1.05)
    d = decide([w[0], w[1], _wrong(w[2], "short-decode", 0, 0)], REG, POLICY)
    assert d.verdict == "INVALID"
    assert "the control starts do not repeat themselves: greedy ids differ in cell 'short-decode' wave 0" in d.reasons[0]


def test_a_start_without_its_outputs_is_invalid():
    w = window(primary=1.05)
    d = decide([w[0], dataclasses.replace(w[1], outputs={}), w[2]], REG, POLICY)
    assert d.verdict == "INVALID" and "kept 0 waves' greedy ids, expected 6" in d.reasons[0]


def test_a_numerics_changing_candidate_needs_its_passing_behavior_verdict():
    from harness.winrule import Behavior

    reg = dataclasses.replace(REG, numerics_changing=True)
    w = [start(0, reg=reg), _wrong(start(1, primary=1.05, reg=reg, config="graph=abc123")), start(2, reg=reg)]
    missing = decide(w, reg, POLICY)
    assert missing.verdict == "INVALID" and "no behavior verdict for it is attached" in missing.reasons[-1]
    failed = decide(w, reg, POLICY, behavior=Behavior("abc123", False))
    assert failed.verdict == "INVALID" and "did not pass" in failed.reasons[-1]
    other = decide(w, reg, POLICY, behavior=Behavior("fff999", True))
    assert other.verdict == "INVALID" and "not the candidate" in other.reasons[-1]
    passed = decide(w, reg, POLICY, behavior=Behavior("abc123", True, "receipts/behavior.json"))
    assert passed.verdict == WIN and "tolerated" in passed.outputs
    assert passed.as_dict()["behavior"] == {"subject": "abc123", "passed": True, "receipt": "receipts/behavior.json"}


SAMPLED = DriftPolicy(equal=POLICY.equal, bounds=POLICY.bounds, max_loadavg=1.5,
                      sampled={"steal_fraction": 0.02, "foreign_cpu_share": 0.10})
QUIET = {"steal_fraction": 0.0, "foreign_cpu_share": 0.01}


def test_the_machine_sampled_during_each_start_is_held_to_its_bounds():
    w = [dataclasses.replace(s, samples=QUIET) for s in window(primary=1.05)]
    assert decide(w, REG, SAMPLED).verdict == WIN
    busy = [w[0], dataclasses.replace(w[1], samples={**QUIET, "foreign_cpu_share": 0.45}), w[2]]
    d = decide(busy, REG, SAMPLED)
    assert d.verdict == INCONCLUSIVE and d.verdict_before_override == WIN
    assert d.reasons == ("machine busy: sampled foreign_cpu_share = 0.45 during start 's2' crossed its bound 0.1",)


def test_the_guard_fails_closed_on_an_unrecorded_reading_unless_waived():
    fp = {k: v for k, v in FP.items() if k != "thermal_max_c"}
    w = [dataclasses.replace(s, fingerprint=fp, samples={"foreign_cpu_share": 0.0}) for s in window(primary=1.05)]
    d = decide(w, REG, SAMPLED)
    assert d.verdict == INCONCLUSIVE and set(d.reasons) == {
        "clock guard: fingerprint reading 'thermal_max_c' was not recorded at any start; the guard fails closed "
        "(a campaign may waive it by name with its reason)",
        "clock guard: sampled reading 'steal_fraction' was not recorded during any start; the guard fails closed "
        "(a campaign may waive it by name with its reason)"}
    waived = dataclasses.replace(SAMPLED, waived={"thermal_max_c": "no thermal zone", "steal_fraction": "no /proc"})
    d = decide(w, REG, waived)
    assert d.verdict == WIN
    assert "  - waived: thermal_max_c (no thermal zone)" in d.render().splitlines()
    assert {"reading": "steal_fraction", "reason": "no /proc"} in d.as_dict()["drift"]["waived"]
    with pytest.raises(Exception, match="waived names readings the policy does not check"):
        dataclasses.replace(SAMPLED, waived={"gpu_clock": "none"})


def test_the_registered_schedule_and_greedy_seeds_are_checked():
    reg = dataclasses.replace(REG, seeds="greedy",
                              prompts={c: [f"{i:064x}" for i in range(6)] for c in REG.cells})

    def fed(s, shas, seed=None):
        return dataclasses.replace(s, inputs={c: [WaveInput(h, "heldout", seed, None) for h in shas]
                                              for c in REG.cells})

    shas = [f"{i:064x}" for i in range(6)]
    w = [fed(s, shas) for s in window(primary=1.05)]
    w = [dataclasses.replace(s, registration=reg.key) for s in w]
    assert decide(w, reg, POLICY).verdict == WIN
    other = [w[0], fed(w[1], shas[:5] + ["f" * 64]), w[2]]
    assert any("is not the registered schedule's" in r for r in decide(other, reg, POLICY).reasons)
    repeated = [fed(s, shas[:5] + shas[:1]) for s in w]
    assert any("every wave needs a distinct frozen prompt" in r for r in decide(repeated, reg, POLICY).reasons)
    seeded = [w[0], fed(w[1], shas, seed=42), w[2]]
    assert any("seeds recorded at waves" in r for r in decide(seeded, reg, POLICY).reasons)
    with pytest.raises(RegistrationError, match="distinct frozen prompt"):
        dataclasses.replace(reg, prompts={c: ["a" * 64] * 6 for c in REG.cells})


def test_the_stopping_rule_decides_at_each_look_and_refuses_repeats_past_its_stop():
    reg = dataclasses.replace(REG, max_repeats=6)
    assert reg.looks == (3, 6) and reg.look_alpha == 0.025
    tie = decide(window(primary=1.0), reg, POLICY)
    assert tie.verdict == TIE and tie.wants_more
    # Six repeats whose first three already WIN: the rule would have stopped at three.
    six = [dataclasses.replace(s, values={c: {m: tuple(v) * 2 for m, v in ms.items()} for c, ms in s.values.items()},
                               inputs={c: list(ws) + [dataclasses.replace(x, salt=f"{x.salt}-2", seed=x.seed + 10)
                                                      for x in ws] for c, ws in s.inputs.items()},
                               outputs={c: list(ws) * 2 for c, ws in s.outputs.items()})
           for s in window(primary=1.05)]
    d = decide(six, reg, POLICY)
    assert d.verdict == INCONCLUSIVE and [x.repeats for x in d.looks] == [3]
    assert any("repeats past the stop would be optional stopping" in r for r in d.reasons)


def test_drift_that_cannot_explain_the_effect_leaves_the_verdict():
    # The last control 4 % faster than the first against a ~20 % loss: a monotone drift biases by <= 2 %.
    w = window(primary=0.8)
    w[2] = dataclasses.replace(w[2], values={c: {m: tuple(v * 1.04 for v in s) for m, s in ms.items()}
                                             for c, ms in w[2].values.items()})
    assert decide(w, REG, POLICY).verdict == LOSS


# --- the gate's judgement of a decision, and its policy -----------------------------------------------------------


def _policy(**extra):
    from harness.fields import Where
    from harness.gates.winrule import WinrulePolicy

    raw = {"name": "p", "version": 1, "cells": ["short"], "repeats": 5, "waves_per_repeat": 2, "required_effect": 0.02,
           "control": {"threads": 2}, "candidate": {"threads": 1}, "expected": {"m": "LOSS"}, "explain": "x", **extra}
    return WinrulePolicy.parse(raw, Where("c.toml", "policy.winrule"))


@pytest.mark.parametrize("window, verdict, passes", [
    ("real", "LOSS", True), ("real", "TIE", True), ("real", INCONCLUSIVE, True), ("real", WIN, False),
    ("real", "INVALID", False), ("aa", TIE, True), ("aa", INCONCLUSIVE, True), ("aa", WIN, False),
    ("aa", "INVALID", False),
])
def test_the_gate_fails_the_opposite_verdict_an_invalid_window_and_an_aa_win(window, verdict, passes):
    from harness.gates.winrule import WindowEvidence, decide as gate_decide

    expected = "LOSS" if window == "real" else "not WIN"
    v = gate_decide(WindowEvidence(window=window, verdict=verdict, expected=expected, control_token_ms=14.0), _policy())
    assert v.passed == passes, v.render()
    assert v.figures["verdict_gated"].value is True


@pytest.mark.parametrize("window, verdict, passes", [
    ("real", WIN, True), ("aa", WIN, True),              # a 0.06 ms step: the verdict is recorded, not held
    ("real", "INVALID", False), ("aa", "INVALID", False),   # a wrong computation fails on any model
])
def test_below_min_token_ms_only_an_invalid_window_fails(window, verdict, passes):
    from harness.gates.winrule import WindowEvidence, decide as gate_decide

    expected = "LOSS" if window == "real" else "not WIN"
    v = gate_decide(WindowEvidence(window=window, verdict=verdict, expected=expected, control_token_ms=0.06),
                    _policy(min_token_ms=1.0))
    assert v.passed == passes, v.render()
    assert v.figures["verdict_gated"].value is False and v.figures["control_token_ms"].value == 0.06


@pytest.mark.parametrize("extra, match", [
    ({"max_repeats": 3}, r"policy\.winrule\.max_repeats"),
    ({"waive": {"gpu_clock": "none"}}, r"policy\.winrule\.waive\.gpu_clock: the guard checks no reading"),
    ({"waive": {"thermal_max_c": " "}}, r"policy\.winrule\.waive\.thermal_max_c: a waiver needs the reason"),
    ({"sampled": {"steal": 0.1}}, r"policy\.winrule\.sampled\.steal: not a sampled figure"),
    ({"sampled": {"steal_fraction": -1}}, r"policy\.winrule\.sampled\.steal_fraction"),
    ({"min_token_ms": -1}, r"policy\.winrule\.min_token_ms: must be >= 0"),
])
def test_the_gate_policy_refuses_bad_values_by_name(extra, match):
    from harness.errors import HarnessError

    with pytest.raises(HarnessError, match=match):
        _policy(**extra)


def test_the_gate_policy_defaults_bound_the_sampled_machine():
    p = _policy(max_repeats=10, step=5, waive={"thermal_max_c": "VM"})
    assert p.sampled == DriftPolicy.default().sampled and p.max_repeats == 10 and p.waive == {"thermal_max_c": "VM"}
