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

**INCONCLUSIVE** overrides that verdict, with every reason, when the evidence
is partial or not of this registration (see
:func:`harness.winrule.checks.evidence_problems`; no verdict is computed at
all then), when the matched inputs differ or salts or seeds repeat
(:func:`harness.winrule.checks.input_problems`), when the machine drifted
between starts (:func:`harness.winrule.drift.check_drift`), or when the
OFF/OFF spread of the primary (last control's mean over the first's) exceeds
the required effect in any cell: the control moved more than the effect the
rule is asked to detect, so the pairing cannot be trusted.

The record also says what each other metric would have decided as the
primary (with the remaining guards, before any override), so that a choice of
primary can be audited without being made after the fact.

Measured error rates (suites/harness/test_winrule_simulation.py)
--------------------------------------------------------------
:mod:`harness.winrule.simulate` runs this rule end to end on 4000 simulated
windows per condition, ``random.Random(20261028)``: 2 decision cells, 3
repeats of 2 waves, required effect 2 %, alpha 0.05, a primary, a guard and a
reported metric; log-normal repeat noise with CV 1 % (independent per start,
cell, metric and repeat); drift shared by every metric of the machine: a
linear trend of 0.5 % per start, a random-walk step of SD 0.3 % between
starts, and a trend of 0.1 % per repeat within each start.

* **A/A with that drift: false-WIN rate 0.0 %** (0 of 4000; exact 95 %
  upper bound 0.075 %).  Documented bound, asserted by the test: below
  0.5 %.  Of the rest, 1 LOSS, 2931 TIE, 1068 INCONCLUSIVE.
* **True +5 % on the primary: power 68.6 %** (WIN in 2744 of 4000; 93.6 % of
  the 2932 windows not made INCONCLUSIVE).  Documented floor, asserted: at
  least 65 % (and at least 90 % of the conclusive windows).  The rest: 188
  TIE, 1068 INCONCLUSIVE, 0 LOSS.
* The 26.7 % INCONCLUSIVE is the OFF/OFF check at work: a 0.5 %/start trend
  moves the last control 1 % from the first, and with CV 1 % and 3 repeats
  the two means differ by more than 2 % about one time in seven per cell.
  Linear drift cancels in the pairing, but the registered rule still refuses
  a window whose control moved more than the effect; five repeats bring it
  to 18.6 %, a steadier machine to 2.9 % (no drift).
* Stress: an untrended random walk of SD 1 % per start (drift the pairing
  cannot cancel) gives 1 false WIN in 4000 (0.025 %), 14 false LOSS; the
  test holds it to the same 0.5 % bound.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from ..errors import EvidenceError
from .archive import ArchiveRow, Definition, Spread, day_to_day_spread, machine_id
from .checks import evidence_problems, input_problems, reported_problems
from .decision import INCONCLUSIVE, Decision, Series, StartSummary
from .drift import DriftPolicy, check_drift
from .evidence import CONTROL, Start
from .registration import Metric, Registration
from .statistics import LOSS, TIE, WIN, paired_verdict


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def _paired_control(first: Sequence[float], last: Sequence[float]) -> tuple[float, ...]:
    if len(first) != len(last):
        return ()
    return tuple((a + b) / 2 for a, b in zip(first, last))


def off_off_spread(first: Sequence[float], last: Sequence[float]) -> float | None:
    """The last control start's mean over the first's, minus one (``None`` when not computable)."""
    if not first or not last or not all(math.isfinite(v) and v > 0 for v in (*first, *last)):
        return None
    return _mean(last) / _mean(first) - 1


def _series(registration: Registration, cell: str, metric: Metric, starts: Sequence[Start],
            decide_it: bool) -> Series:
    first, middle, last = (s.series(cell, metric.name) or () for s in starts)
    control = _paired_control(first, last)
    effect = registration.effect(metric)
    result = None
    if registration.role(metric.name) == "reported":   # decided only on sound values (never voids the window)
        decide_it = decide_it and all(math.isfinite(v) and v > 0 for v in (*first, *middle, *last))
    if decide_it:
        result = paired_verdict(control, middle, higher_is_better=metric.higher_is_better,
                                required_effect=effect, alpha=registration.alpha)
    return Series(cell, metric.name, registration.role(metric.name), metric.unit, metric.higher_is_better, effect,
                  tuple(first), tuple(middle), tuple(last), control, off_off_spread(first, last), result)


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
                                    control.commit or "unknown", machine)
            out.append(day_to_day_spread(archive, definition, registration.effect(metric)))
    return tuple(out)


def decide(starts: Sequence[Start], registration: Registration, policy: DriftPolicy | None = None,
           archive: Sequence[ArchiveRow] = ()) -> Decision:
    """Decide one A/B/A window (see the module docstring); pure, no I/O.

    ``starts`` are the window's start records in run order (a campaign passes
    whatever it has: fewer than three is an INCONCLUSIVE with the reason, not
    an error).  ``archive`` is the control archive as read before this window
    (:func:`harness.winrule.archive.read`); its day-to-day spread for this
    window's definition is reported beside the required effect, never mixed
    with other definitions and never changing the verdict.
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
    summaries = tuple(StartSummary(s.label, s.role, s.config, s.registration, s.commit, s.complete) for s in starts)
    problems = evidence_problems(starts, registration)
    complete = not problems
    series: tuple[Series, ...] = ()
    if len(starts) == 3:
        series = tuple(_series(registration, cell, metric, starts, complete)
                       for cell in registration.cells for metric in registration.metrics
                       if complete or all(cell in s.values for s in starts))
    drift = None
    if 2 <= len(starts) <= 3:
        drift = check_drift([s.fingerprint for s in starts], policy, [s.label for s in starts])
    spreads = _archive_spreads(registration, starts, archive, policy)
    if not complete:
        reasons = tuple(problems) + (drift.reasons if drift else ())
        return Decision(registration, INCONCLUSIVE, None, reasons, (), series,
                        {m.name: None for m in registration.metrics[1:]}, summaries, drift, policy, spreads,
                        bad_evidence=tuple(reported_problems(starts, registration)))
    guards = [g.name for g in registration.guards]
    raw, blocked = window_verdict(series, registration.primary.name, guards, registration.cells)
    decided = {(x.cell, x.metric) for x in series if x.result is not None}
    alternatives = {m.name: window_verdict(series, m.name, [g for g in guards if g != m.name],
                                           registration.cells)[0]
                    if all((cell, m.name) in decided for cell in registration.cells) else None
                    for m in registration.metrics[1:]}
    overrides = list(input_problems(starts, registration))
    overrides += drift.reasons if drift else ()
    for s in series:
        if (s.role == "primary" and s.off_off_spread is not None
                and abs(math.log1p(s.off_off_spread)) > math.log1p(s.required_effect)):
            overrides.append(f"OFF/OFF spread of {s.metric!r} in cell {s.cell!r} is {s.off_off_spread:+.2%}, "
                             f"beyond the required effect {s.required_effect:.2%}")
    verdict = INCONCLUSIVE if overrides else raw
    return Decision(registration, verdict, raw, tuple(overrides), blocked, series, alternatives, summaries, drift,
                    policy, spreads, bad_evidence=tuple(reported_problems(starts, registration)))
