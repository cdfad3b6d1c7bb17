"""The OFF/ON/OFF (A/B/A) win rule: three start records and a registration in, one Decision out.

The rule
--------
A window is a control start, a candidate start and a control start again,
each running the registration's matched waves.  Repeats are paired:
``control_r = (first_r + last_r) / 2`` and ``candidate_r = middle_r``, so a
drift that is linear in time cancels exactly.  Each (cell, metric) series gets
WIN / LOSS / TIE from :func:`harness.winrule.statistics.paired_verdict`.  The
window is

* **WIN** when the primary metric wins in every decision cell and no guard
  loses in any cell;
* **LOSS** when the primary loses in any cell;
* **TIE** otherwise; a primary WIN blocked by a guard LOSS is a TIE with the
  guard named in ``blocked_by``.

**INVALID** comes first: the correctness prerequisite.  Every start keeps
the greedy ids of every wave; when the two controls' ids differ, or the
candidate's differ from the controls' (a faster graph that computes something
else), the window is INVALID with the cell, wave and first differing token
named (:func:`harness.winrule.checks.output_problems`), unless the
registration declares the candidate numerics-changing and the behavior gate's
passing verdict for it is attached (:class:`harness.winrule.decision.Behavior`).

**INCONCLUSIVE** overrides the verdict, with every reason, when the evidence
is partial or not of this registration (see
:func:`harness.winrule.checks.evidence_problems`; no verdict is computed at
all then), when the matched inputs differ, a wave's prompt repeats or is not
the registered schedule's, or salts or seeds repeat
(:func:`harness.winrule.checks.input_problems`), when the machine drifted
between starts, a reading the drift policy names was not recorded and not
waived (the guard fails closed), or the machine sampled *during* a start
crossed a bound (:func:`harness.winrule.drift.check_drift`), when the OFF/OFF
spread of the primary exceeds the registered ceiling ``max_off_off``, or when
that spread could explain the effect (:func:`drift_could_explain`: a monotone
drift biases the pairing by at most half the OFF/OFF spread; a -20 % effect
against a +4 % spread stands, a +5 % effect against a +20 % spread does not).

**Adaptive repeats** (Pinpoint's "UNKNOWN -> more runs"): the registration's
looks are ``repeats, repeats + step, ... <= max_repeats``.  The window is
decided at each look on the first n repeats at ``alpha / len(looks)``
(Bonferroni over the registered looks); the first WIN or LOSS stops it; a TIE
with no override asks the lane for ``step`` more repeats in the same three
starts (``Decision.wants_more``); a window with repeats past its stopping look
is INCONCLUSIVE (optional stopping).

The record also says what each other metric would have decided as the
primary (with the remaining guards, before any override), so that a choice of
primary can be audited without being made after the fact.

Measured error rates (suites/harness/test_winrule_simulation.py)
--------------------------------------------------------------
:func:`harness.winrule.simulate.grid` runs this rule end to end, stopping rule
included, on 1000 simulated windows per condition (``random.Random(20261204)``):
2 decision cells, 2 waves per repeat, required effect 2 %, alpha 0.05, a
primary, a guard (5 %) and a reported metric.  Null conditions: noise CV 0.5,
1 and 2 %, each with a linear drift of 0, 1 and 3 % per start (plus a
random walk of SD 0.3 % per start and 0.1 % per repeat), and an untrended
random walk of SD 1 % per start (drift the pairing cannot cancel).  Power
conditions: a true +5 % with CV 0.5 and 1 % and the same linear drifts.

=========================  ==================  =============================
registration               worst false WIN     worst power at +5 %
=========================  ==================  =============================
3 repeats, adaptive to 6   0.3 % (CV 0.5 %,    97.4 % (CV 1 %, 3 %/start;
                           random walk 1 %)    2.6 % INCONCLUSIVE, 0 TIE)
5 repeats, adaptive to 10  0.4 % (CV 1 %,      98.6 % (CV 1 %, 3 %/start;
(the default campaign)     random walk 1 %)    1.4 % INCONCLUSIVE, 0 TIE)
=========================  ==================  =============================

Every null condition stays below the 5 % bound with its exact 95 % upper
bound too (the test asserts both); every linear-drift null gives 0 false WINs.
Adaptive repeats raise power at 3 %/start drift from 94.4 % (3 repeats fixed)
to 97.9 % (3 -> 6) at a mean of 3.5 repeats.  The trade-off chosen: the
drift check voids a verdict only when half the OFF/OFF spread reaches the
effect, so 3 %/start drift (6 % OFF/OFF) costs 1.4-2.6 % of true WINs as
INCONCLUSIVE instead of the 26.7 % the previous rule lost to a 0.5 %/start
trend (it voided any window whose OFF/OFF spread exceeded the required
effect; its power was 68.6 %).  A -5 % regression is found as a LOSS in 99.0 %
of windows (5 -> 10), never as a WIN.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from ..errors import EvidenceError
from .archive import ArchiveRow, Definition, Spread, context_of, day_to_day_spread, machine_id
from .checks import evidence_problems, input_problems, output_problems, reported_problems, window_repeats
from .decision import INCONCLUSIVE, INVALID, Behavior, Decision, Look, Series, StartSummary
from .drift import DriftPolicy, DriftReport, check_drift
from .evidence import CONTROL, Start
from .registration import Metric, Registration
from .statistics import LOSS, TIE, WIN, paired_verdict


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def _paired_control(first: Sequence[float], last: Sequence[float]) -> tuple[float, ...]:
    if len(first) != len(last):
        return ()
    return tuple([(a + b) / 2 for a, b in zip(first, last)])


def _sound(*series: Sequence[float]) -> bool:
    """Every value finite and positive (a log ratio can be taken)."""
    for values in series:
        for v in values:
            if not (math.isfinite(v) and v > 0):
                return False
    return True


def off_off_spread(first: Sequence[float], last: Sequence[float]) -> float | None:
    """The last control start's mean over the first's, minus one (``None`` when not computable)."""
    if not first or not last or not _sound(first, last):
        return None
    return _mean(last) / _mean(first) - 1


def _series(registration: Registration, cell: str, metric: Metric, starts: Sequence[Start],
            decide_it: bool, repeats: int | None = None, alpha: float | None = None) -> Series:
    first, middle, last = ((s.series(cell, metric.name) or ())[:repeats] for s in starts)
    control = _paired_control(first, last)
    effect = registration.effect(metric)
    role = registration.role(metric.name)
    result = None
    if role == "reported":   # decided only on sound values (never voids the window)
        decide_it = decide_it and _sound(first, middle, last)
    if decide_it:
        result = paired_verdict(control, middle, higher_is_better=metric.higher_is_better,
                                required_effect=effect, alpha=registration.alpha if alpha is None else alpha)
    return Series(cell, metric.name, role, metric.unit, metric.higher_is_better, effect,
                  tuple(first), tuple(middle), tuple(last), control, off_off_spread(first, last), result)


def drift_could_explain(series: Series) -> str | None:
    """Why a decided primary series' effect could be the machine's drift rather than the candidate's, or None.

    The pairing cancels drift that is linear in time exactly.  What it cannot
    cancel is drift that bends between the starts; if that drift is monotone
    (the machine only warms, or only cools, over the window), the middle start
    lies between the two controls, so the bias it puts on the paired gain is
    at most half the OFF/OFF spread ``|ln(last / first)| / 2``.  When that
    bound reaches the observed mean gain, the drift could explain the whole
    effect and the verdict is not trusted; when it is smaller (an effect of
    -20 % against an OFF/OFF spread of +4 %), the effect stands.  This only
    ever turns WIN or LOSS into INCONCLUSIVE, so it cannot add false WINs.
    """
    if series.result is None or series.result.verdict not in (WIN, LOSS) or series.off_off_spread is None:
        return None
    bias = abs(math.log1p(series.off_off_spread)) / 2
    effect = abs(series.result.mean_gain)
    if bias < effect:
        return None
    return (f"drift could explain the effect: {series.metric!r} in cell {series.cell!r} moved "
            f"{series.off_off_spread:+.2%} between the controls (a monotone drift biases the pairing by up to "
            f"{math.expm1(bias):.2%}), against a mean effect of {math.expm1(series.result.mean_gain):+.2%}")


def window_verdict(series: Sequence[Series], primary: str, guards: Iterable[str],
                   cells: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """The window verdict from decided series, with ``primary`` deciding and ``guards`` able only to veto.

    Returns ``(verdict, blocked_by)``; ``blocked_by`` names each guard LOSS
    that stopped a WIN.
    """
    by_key = {(s.cell, s.metric): s for s in series}
    verdicts = [by_key[(cell, primary)].verdict for cell in cells]
    if any(v is None for v in verdicts):
        raise EvidenceError(f"window_verdict: metric {primary!r} lacks a decided series in some cell")
    if LOSS in verdicts:
        return LOSS, ()
    if not all(v == WIN for v in verdicts):
        return TIE, ()
    blocked = tuple(f"{g} LOSS in cell {cell!r}" for cell in cells for g in guards
                    if by_key[(cell, g)].verdict == LOSS)
    return (TIE, blocked) if blocked else (WIN, ())


def _archive_spreads(registration: Registration, starts: Sequence[Start], archive: Sequence[ArchiveRow],
                     policy: DriftPolicy) -> tuple[Spread, ...]:
    control = next((s for s in starts if s.role == CONTROL and s.registration == registration.key), None)
    if control is None or not archive:
        return ()
    machine = machine_id(control.fingerprint, policy.equal)
    out = []
    for cell in registration.cells:
        for metric in (registration.primary, *registration.guards):
            definition = Definition(registration.key, cell, metric.name, control.config,
                                    control.commit or "unknown", machine, *context_of(control.fingerprint))
            out.append(day_to_day_spread(archive, definition, registration.effect(metric)))
    return tuple(out)


def _behavior_problem(behavior: Behavior | None, candidate: Start) -> str | None:
    if behavior is None:
        return ("the registration declares the candidate numerics-changing, but no behavior verdict for it is "
                "attached")
    if not isinstance(behavior, Behavior):
        raise EvidenceError(f"decide: behavior must be a Behavior, got {type(behavior).__name__}")
    if behavior.subject not in candidate.config:
        return (f"the attached behavior verdict is for {behavior.subject!r}, not the candidate "
                f"({candidate.config!r})")
    if not behavior.passed:
        return f"the attached behavior verdict for {behavior.subject!r} did not pass"
    return None


def _overrides(starts: Sequence[Start], registration: Registration, drift: DriftReport | None, looks: Sequence[Look],
               repeats: int, series: Sequence[Series]) -> list[str]:
    """Why a complete window's statistical verdict cannot stand (it becomes INCONCLUSIVE): input problems,
    drift, repeats past the stopping rule, an OFF/OFF spread beyond the registered ceiling, drift that could
    explain a primary result."""
    overrides = list(input_problems(starts, registration))
    overrides += drift.reasons if drift else ()
    if looks[-1].repeats < repeats:
        overrides.append(f"the starts ran {repeats} repeats, but the stopping rule decided at {looks[-1].repeats} "
                         f"({looks[-1].verdict}): repeats past the stop would be optional stopping")
    for x in series:
        if (x.role == "primary" and x.off_off_spread is not None
                and abs(math.log1p(x.off_off_spread)) > math.log1p(registration.max_off_off)):
            apart = math.expm1(abs(math.log1p(x.off_off_spread)))
            overrides.append(f"OFF/OFF spread of {x.metric!r} in cell {x.cell!r} is {x.off_off_spread:+.2%} (the two "
                             f"controls {apart:.2%} apart, the larger over the smaller), beyond the registered ceiling "
                             f"{registration.max_off_off:.0%}: the machine changed too much during the window to "
                             f"decide anything")
    overrides += [why for why in (drift_could_explain(x) for x in series
                                  if x.role == "primary" and x.cell in registration.cells) if why]
    return overrides


def _outputs(starts: Sequence[Start], registration: Registration, behavior: Behavior | None) -> tuple[list[str], str]:
    """The greedy outputs of the window: what makes it INVALID (a control's ids differing, or the candidate's
    unless the registration declares it numerics-changing and its behavior verdict passed), and the sentence
    the decision records about them."""
    control_bad, candidate_bad = output_problems(starts, registration)
    invalid = list(control_bad)
    outputs = "identical greedy ids in every wave of every start"
    if candidate_bad and not control_bad:
        if registration.numerics_changing:
            why = _behavior_problem(behavior, starts[1])
            if why is None:
                outputs = (f"the candidate's greedy ids differ ({candidate_bad[0]}); tolerated: the registration "
                           f"declares it numerics-changing and its behavior verdict ({behavior.subject}) passed")
            else:
                invalid += [*candidate_bad, why]
        else:
            invalid += candidate_bad
    return invalid, outputs


def decide(starts: Sequence[Start], registration: Registration, policy: DriftPolicy | None = None,
           archive: Sequence[ArchiveRow] = (), behavior: Behavior | None = None) -> Decision:
    """Decide one A/B/A window (see the module docstring); pure, no I/O.

    ``starts`` are the window's start records in run order (a campaign passes
    whatever it has: fewer than three is an INCONCLUSIVE with the reason, not
    an error).  ``archive`` is the control archive as read before this window
    (:func:`harness.winrule.archive.read`); its day-to-day spread for this
    window's definition is reported beside the required effect, never mixed
    with other definitions and never changing the verdict.  ``behavior`` is
    the behavior gate's verdict for a numerics-changing candidate.
    """
    if not isinstance(registration, Registration):
        raise EvidenceError(f"decide: registration must be a Registration, got {type(registration).__name__}")
    policy = DriftPolicy() if policy is None else policy
    if not isinstance(policy, DriftPolicy):
        raise EvidenceError(f"decide: policy must be a DriftPolicy, got {type(policy).__name__}")
    starts = tuple(starts)
    for i, start in enumerate(starts):
        if not isinstance(start, Start):
            raise EvidenceError(f"decide: starts[{i}] must be a Start, got {type(start).__name__}")
    archive = tuple(archive)
    summaries = tuple(StartSummary(s.label, s.role, s.config, s.registration, s.commit, s.complete,
                                   tuple(sorted(s.samples.items()))) for s in starts)
    problems = evidence_problems(starts, registration)
    complete = not problems
    repeats = window_repeats(starts, registration)
    drift = None
    if 2 <= len(starts) <= 3:
        drift = check_drift([s.fingerprint for s in starts], policy, [s.label for s in starts],
                            [s.samples for s in starts])
    spreads = _archive_spreads(registration, starts, archive, policy)
    bad = tuple(reported_problems(starts, registration))
    if not complete:
        series: tuple[Series, ...] = ()
        if len(starts) == 3:
            series = tuple(_series(registration, cell, metric, starts, False)
                           for cell in registration.cells for metric in registration.metrics
                           if all(cell in s.values for s in starts))
        reasons = tuple(problems) + (drift.reasons if drift else ())
        return Decision(registration, INCONCLUSIVE, None, reasons, (), series,
                        {m.name: None for m in registration.metrics[1:]}, summaries, drift, policy, spreads,
                        bad_evidence=bad)
    guards = [g.name for g in registration.guards]
    metrics = registration.metrics
    look_alpha = registration.look_alpha
    looks: list[Look] = []
    for n in (k for k in registration.looks if k <= repeats):
        series = tuple(_series(registration, cell, metric, starts, True, n, look_alpha)
                       for cell in registration.cells for metric in metrics)
        raw, blocked = window_verdict(series, registration.primary.name, guards, registration.cells)
        looks.append(Look(n, look_alpha, raw))
        if raw != TIE:
            break
    decided = {(x.cell, x.metric) for x in series if x.result is not None}
    alternatives = {m.name: window_verdict(series, m.name, [g for g in guards if g != m.name],
                                           registration.cells)[0]
                    if all((cell, m.name) in decided for cell in registration.cells) else None
                    for m in registration.metrics[1:]}
    overrides = _overrides(starts, registration, drift, looks, repeats, series)
    invalid, outputs = _outputs(starts, registration, behavior)
    if invalid:
        outputs = "differ: " + "; ".join(invalid)
        verdict = INVALID
        reasons = tuple(invalid) + tuple(overrides)
    else:
        verdict = INCONCLUSIVE if overrides else raw
        reasons = tuple(overrides)
    wants_more = verdict == TIE and any(k > repeats for k in registration.looks)
    return Decision(registration, verdict, raw, reasons, blocked, series, alternatives, summaries, drift,
                    policy, spreads, bad_evidence=bad, looks=tuple(looks), wants_more=wants_more, outputs=outputs,
                    behavior=behavior)
