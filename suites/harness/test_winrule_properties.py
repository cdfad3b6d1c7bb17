"""Hypothesis properties of the A/B/A win rule: symmetry, scale-freedom, guard vetoes, overrides."""

from __future__ import annotations

import collections.abc
import dataclasses
import math

from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from harness.winrule import (
    INCONCLUSIVE, LOSS, TIE, WIN, Bound, DriftPolicy, Metric, Registration, Start, StartRecordError, WaveInput, decide,
    paired_verdict,
)

REG = Registration(
    "prop-abab", 1, ("short-decode", "long-decode"), repeats=3, waves_per_repeat=1,
    primary=Metric("decode_tokens_per_s", "tokens/s", True),
    guards=(Metric("prefill_ms", "ms", False), Metric("accepted_per_round", "tokens", True)),
    reported=(Metric("ttft_ms", "ms", False),), required_effect=0.02)
FP = {"cpu_model": "Test CPU", "logical_cpus": 2, "cpu_governor": "performance", "cpu_mhz": 3000.0,
      "loadavg_1m": 0.2}
POLICY = DriftPolicy(equal=("cpu_model", "logical_cpus", "cpu_governor"), bounds={"cpu_mhz": Bound(max_rel=0.05)},
                     max_loadavg=2.0)
MIRROR = {WIN: LOSS, LOSS: WIN, TIE: TIE}
FAST = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

positive = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False, allow_subnormal=False)
series = st.integers(min_value=2, max_value=8).flatmap(lambda n: st.tuples(
    st.lists(positive, min_size=n, max_size=n), st.lists(positive, min_size=n, max_size=n)))


def build(reg: Registration, values: list[dict[str, dict[str, list[float]]]]) -> list[Start]:
    """Three starts with matched, fresh inputs and identical fingerprints around the given values."""
    out = []
    for i, (role, vals) in enumerate(zip(("control", "candidate", "control"), values)):
        inputs = {cell: [WaveInput(f"sha-{cell}-{w}", f"fam-{w % 2}", 42 + w, f"salt-{i}-{cell}-{w}")
                         for w in range(reg.waves)] for cell in reg.cells}
        outputs = {cell: [[3, 5, w] for w in range(reg.waves)] for cell in reg.cells}
        out.append(Start(f"s{i + 1}", role, reg.key, "candidate" if role == "candidate" else "baseline", vals,
                         inputs, dict(FP), commit="c0ffee", outputs=outputs))
    return out


@st.composite
def windows(draw, primary_effect=st.floats(-0.15, 0.15), guard_effect=st.floats(-0.15, 0.15),
            noise=st.floats(-0.02, 0.02)):
    """A registration (2-5 repeats) and a window around it: true log effects plus bounded per-value noise.

    Effects are oriented: positive is an improvement, whatever the metric's direction.
    """
    reg = dataclasses.replace(REG, repeats=draw(st.integers(2, 5)))
    effects = {m.name: draw(primary_effect if m is reg.primary else guard_effect) * (1 if m.higher_is_better else -1)
               for m in (reg.primary, *reg.guards)}
    bases = {(cell, m.name): draw(st.floats(0.5, 5000.0)) for cell in reg.cells for m in reg.metrics}
    starts = []
    for i in range(3):
        vals = {}
        for cell in reg.cells:
            vals[cell] = {}
            for m in reg.metrics:
                shift = effects.get(m.name, 0.0) if i == 1 else 0.0
                vals[cell][m.name] = [bases[(cell, m.name)] * math.exp(shift + draw(noise))
                                      for _ in range(reg.repeats)]
        starts.append(vals)
    return reg, build(reg, starts)


def scaled(starts: list[Start], factor: float) -> list[Start]:
    return [dataclasses.replace(s, values={c: {m: [v * factor for v in xs] for m, xs in ms.items()}
                                           for c, ms in s.values.items()}) for s in starts]


def verdicts(decision) -> list:
    return [(s.cell, s.metric, s.verdict) for s in decision.series]


# --- identical series never WIN -----------------------------------------------------------------------------


@FAST
@given(series)
def test_identical_series_never_win(pair):
    control, _ = pair
    assert paired_verdict(control, control, higher_is_better=True, required_effect=0.02, alpha=0.05).verdict == TIE
    assert paired_verdict(control, control, higher_is_better=False, required_effect=0.02, alpha=0.05).verdict == TIE


@FAST
@given(windows())
def test_a_window_of_three_identical_starts_never_wins(case):
    reg, starts = case
    same = [dataclasses.replace(s, values=starts[0].values) for s in starts]
    d = decide(same, reg, POLICY)
    assert d.verdict == TIE and all(s.verdict == TIE for s in d.series)


@FAST
@given(windows())
def test_a_candidate_equal_to_its_paired_control_never_wins(case):
    reg, starts = case
    middle = {c: {m: [(a + b) / 2 for a, b in zip(starts[0].values[c][m], starts[2].values[c][m])]
                  for m in ms} for c, ms in starts[0].values.items()}
    d = decide([starts[0], dataclasses.replace(starts[1], values=middle), starts[2]], reg, POLICY)
    assert d.verdict != WIN and d.verdict_before_override == TIE


# --- swapping control and candidate --------------------------------------------------------------------------


@FAST
@given(series, st.booleans(), st.sampled_from([0.01, 0.02, 0.05]), st.sampled_from([0.01, 0.05, 0.1]))
def test_swapping_the_sides_mirrors_the_series_verdict_exactly(pair, higher, effect, alpha):
    a, b = pair
    forward = paired_verdict(a, b, higher_is_better=higher, required_effect=effect, alpha=alpha)
    backward = paired_verdict(b, a, higher_is_better=higher, required_effect=effect, alpha=alpha)
    assert backward.verdict == MIRROR[forward.verdict]
    assert backward.gains == tuple(-g for g in forward.gains)
    assert backward.lower_bound == -forward.upper_bound


@FAST
@given(windows(primary_effect=st.floats(-0.15, 0.15) | st.floats(0.04, 0.15)))
def test_swapping_control_and_candidate_turns_win_into_loss(case):
    reg, starts = case
    d = decide(starts, reg, POLICY)
    # The swapped window: the old candidate runs as both controls, the old paired control as the candidate,
    # so that the new pairs are exactly the old pairs reversed.
    old_control = {c: {m: [(a + b) / 2 for a, b in zip(starts[0].values[c][m], starts[2].values[c][m])]
                       for m in ms} for c, ms in starts[0].values.items()}
    swapped = [dataclasses.replace(starts[0], values=starts[1].values),
               dataclasses.replace(starts[1], values=old_control),
               dataclasses.replace(starts[2], values=starts[1].values)]
    e = decide(swapped, reg, POLICY)
    event(f"{d.verdict} -> {e.verdict}")
    for cell in reg.cells:
        before, after = d.series_of(cell, reg.primary.name), e.series_of(cell, reg.primary.name)
        assert after.verdict == MIRROR[before.verdict]
    if d.verdict == WIN:
        assert e.verdict == LOSS


# --- scale-freedom -----------------------------------------------------------------------------------------------


@FAST
@given(windows(), st.integers(-30, 30))
def test_scaling_by_a_power_of_two_changes_nothing_at_all(case, k):
    reg, starts = case
    d, e = decide(starts, reg, POLICY), decide(scaled(starts, 2.0 ** k), reg, POLICY)
    assert (e.verdict, e.verdict_before_override, e.reasons, e.blocked_by) == \
        (d.verdict, d.verdict_before_override, d.reasons, d.blocked_by)
    assert verdicts(e) == verdicts(d) and e.alternatives == d.alternatives
    assert [s.result.gains for s in e.series] == [s.result.gains for s in d.series]


def _margin(decision) -> float:
    """How far the decision is from any threshold it compares against (log units)."""
    out = [math.inf]
    for s in decision.series:
        r = s.result
        out += [abs(abs(g) - r.threshold) for g in r.gains] + [abs(r.lower_bound), abs(r.upper_bound)]
        if s.role == "primary":
            out.append(abs(abs(math.log1p(s.off_off_spread)) / 2 - abs(r.mean_gain)))
    return min(out)


@FAST
@given(windows(), st.floats(1e-3, 1e3))
def test_scaling_by_any_constant_changes_no_verdict(case, factor):
    reg, starts = case
    d = decide(starts, reg, POLICY)
    # Scaling is exact in real arithmetic; in floating point it moves a log ratio by ~1e-16, which could only
    # matter for a window sitting on a threshold.
    assume(_margin(d) > 1e-9)
    e = decide(scaled(starts, factor), reg, POLICY)
    assert (e.verdict, e.verdict_before_override, e.blocked_by) == (d.verdict, d.verdict_before_override, d.blocked_by)
    assert verdicts(e) == verdicts(d) and e.alternatives == d.alternatives


# --- guards veto --------------------------------------------------------------------------------------------------


@FAST
@given(windows())
def test_a_guard_loss_always_blocks_a_win(case):
    reg, starts = case
    d = decide(starts, reg, POLICY)
    guard_lost = any(s.role == "guard" and s.verdict == LOSS for s in d.series)
    event(f"guard lost: {guard_lost}, primary before override: {d.verdict_before_override}")
    if guard_lost:
        assert d.verdict != WIN and d.verdict_before_override != WIN
        if all(d.series_of(c, reg.primary.name).verdict == WIN for c in reg.cells):
            assert d.blocked_by and d.verdict_before_override == TIE


@FAST
@given(windows(primary_effect=st.floats(0.05, 0.2), guard_effect=st.floats(-0.2, -0.05),
               noise=st.floats(-0.004, 0.004)))
def test_a_primary_win_with_a_losing_guard_is_a_blocked_tie(case):
    reg, starts = case
    d = decide(starts, reg, POLICY)
    assert all(d.series_of(c, reg.primary.name).verdict == WIN for c in reg.cells)
    # Every guard got at least 5 % worse in every cell: each of those losses must be named as blocking.
    losses = [s for s in d.series if s.role == "guard" and s.verdict == LOSS]
    assert len(losses) == len(reg.guards) * len(reg.cells)
    assert d.verdict_before_override == TIE and len(d.blocked_by) == len(losses)


# --- overrides -----------------------------------------------------------------------------------------------------


def _replace_input(s: Start, **change) -> Start:
    cell = next(iter(s.inputs))
    waves = list(s.inputs[cell])
    waves[-1] = dataclasses.replace(waves[-1], **change)
    return dataclasses.replace(s, inputs={**s.inputs, cell: waves})


PERTURBATIONS = {
    "missing start": lambda w: w[:2],
    "extra start": lambda w: [*w, dataclasses.replace(w[2], label="s4")],
    "incomplete start": lambda w: [w[0], dataclasses.replace(w[1], complete=False), w[2]],
    "other registration": lambda w: [w[0], w[1], dataclasses.replace(w[2], registration="prop-abab@9")],
    "prompt differs": lambda w: [w[0], _replace_input(w[1], prompt_sha256="different"), w[2]],
    "family differs": lambda w: [w[0], w[1], _replace_input(w[2], family="fam-x")],
    "seed differs": lambda w: [w[0], _replace_input(w[1], seed=1), w[2]],
    "salt repeats": lambda w: [w[0], _replace_input(w[1], salt=w[0].inputs["short-decode"][-1].salt), w[2]],
    "governor drift": lambda w: [w[0], w[1], dataclasses.replace(w[2], fingerprint={**FP, "cpu_governor": "ondemand"})],
    "frequency drift": lambda w: [w[0], dataclasses.replace(w[1], fingerprint={**FP, "cpu_mhz": 2400.0}), w[2]],
    "load": lambda w: [dataclasses.replace(w[0], fingerprint={**FP, "loadavg_1m": 9.0}), w[1], w[2]],
    "key vanished": lambda w: [w[0], dataclasses.replace(w[1], fingerprint={**FP, "cpu_model": None}), w[2]],
    "off/off spread": lambda w: [w[0], scaled([w[1]], 1.3)[0], scaled([w[2]], 1.8)[0]],
    "non-finite": lambda w: [w[0], scaled([w[1]], math.inf)[0], w[2]],
    "unequal repeats": lambda w: [w[0], dataclasses.replace(w[1], values={
        c: {m: xs[:-1] for m, xs in ms.items()} for c, ms in w[1].values.items()}), w[2]],
}


@FAST
@given(windows(primary_effect=st.floats(0.04, 0.15) | st.floats(-0.15, 0.15), guard_effect=st.floats(-0.01, 0.15),
               noise=st.floats(-0.005, 0.005)), st.sampled_from(sorted(PERTURBATIONS)))
def test_any_override_reason_yields_inconclusive(case, name):
    reg, starts = case
    event(f"unperturbed: {decide(starts, reg, POLICY).verdict}")
    d = decide(PERTURBATIONS[name](starts), reg, POLICY)
    assert d.verdict == INCONCLUSIVE and d.reasons


@FAST
@given(windows())
def test_reasons_exist_exactly_when_inconclusive(case):
    reg, starts = case
    d = decide(starts, reg, POLICY)
    assert bool(d.reasons) == (d.verdict == INCONCLUSIVE)
    if d.verdict != INCONCLUSIVE:
        assert d.verdict == d.verdict_before_override


# --- start records: refused at the first malformed value or token row, with its index -------------------------

junk = st.one_of(st.integers(-5, 5), st.booleans(), st.floats(allow_nan=False), st.text(max_size=2), st.none())
rows = st.one_of(st.lists(st.integers(0, 9), max_size=4), st.tuples(st.integers(0, 9)), st.lists(junk, max_size=3),
                 st.builds(range, st.integers(0, 4)), st.text(max_size=3), st.binary(max_size=3), st.integers())


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_token_row(ids) -> bool:
    return (isinstance(ids, collections.abc.Sequence) and not isinstance(ids, (str, bytes))
            and all(isinstance(t, int) and not isinstance(t, bool) for t in ids))


@FAST
@given(st.lists(junk, max_size=5), st.lists(rows, max_size=5))
def test_a_start_record_is_refused_at_its_first_malformed_value_or_token_row(series, waves):
    bad_value = next((i for i, v in enumerate(series) if not _is_number(v)), None)
    bad_row = next((w for w, ids in enumerate(waves) if not _is_token_row(ids)), None)
    try:
        s = Start("s1", "control", REG.key, "baseline", {"short-decode": {"decode_tokens_per_s": series}},
                  outputs={"short-decode": waves})
    except StartRecordError as refused:
        if bad_value is not None:
            assert str(refused) == (f"start 's1': values['short-decode']['decode_tokens_per_s'][{bad_value}] must be "
                                    f"a number, got {series[bad_value]!r}")
        else:
            assert str(refused) == f"start 's1': outputs['short-decode'][{bad_row}] must be a list of token ids"
    else:
        assert bad_value is None and bad_row is None
        assert s.values["short-decode"]["decode_tokens_per_s"] == tuple(float(v) for v in series)
        assert s.outputs["short-decode"] == tuple(tuple(ids) for ids in waves)
