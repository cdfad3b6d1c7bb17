"""Checks of a window's start records that decide whether a verdict may be computed at all, or must be overridden."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from operator import attrgetter

from .evidence import ORDER, Start
from .registration import Registration


def _repeated(values: Sequence) -> list:
    """The values that occur more than once, each named once (found without counting when all are distinct)."""
    if len(set(values)) == len(values):
        return []
    return [v for v, n in Counter(values).items() if n > 1]


def evidence_problems(starts: Sequence[Start], registration: Registration) -> list[str]:
    """Reasons the evidence is partial or not of this registration; any reason means no verdict is computed.

    Covers: a missing or extra start, starts out of A/B/A order, a start of
    another registration, a start the lane marked incomplete, a missing or
    unregistered cell or metric, a repeat count that is not one of the
    registration's looks or differs between series, and a non-finite or
    non-positive value (the gains are log ratios).
    """
    reasons: list[str] = []
    if len(starts) != len(ORDER):
        reasons.append(f"missing or extra starts: an A/B/A window needs 3 starts, got {len(starts)} "
                       f"({[s.label for s in starts]})")
    roles = tuple(s.role for s in starts)
    if len(starts) == len(ORDER) and roles != ORDER:
        reasons.append(f"starts out of order: roles {list(roles)}, expected {list(ORDER)}")
    labels = [s.label for s in starts]
    repeated = sorted(label for label, n in Counter(labels).items() if n > 1)
    if repeated:
        reasons.append(f"start labels repeat: {repeated}")
    controls = [s for s in starts if s.role == "control"]
    if len({s.config for s in controls}) > 1:
        reasons.append(f"the control starts ran different configs: {[(s.label, s.config) for s in controls]}")
    registered = set(registration.cells)
    every_metric = registration.metrics
    metrics = {m.name for m in every_metric}
    roles = {m.name: registration.role(m.name) for m in every_metric}
    looks = registration.looks
    for start in starts:
        where = f"start {start.label!r}"
        if start.registration != registration.key:
            reasons.append(f"{where} was recorded under registration {start.registration!r}, "
                           f"not {registration.key!r}")
        if not start.complete:
            reasons.append(f"{where} is incomplete: {start.incomplete_reason or 'no reason recorded'}")
        for cell in sorted(set(start.values) - registered):
            reasons.append(f"{where} has unregistered cell {cell!r}")
        for cell in registration.cells:
            if cell not in start.values:
                reasons.append(f"{where} lacks cell {cell!r}")
                continue
            got = start.values[cell]
            for name in sorted(set(got) - metrics):
                reasons.append(f"{where} cell {cell!r} has unregistered metric {name!r}")
            for metric in every_metric:
                series = got.get(metric.name)
                if series is None:
                    reasons.append(f"{where} cell {cell!r} lacks metric {metric.name!r}")
                    continue
                if len(series) not in looks:
                    reasons.append(f"{where} cell {cell!r} metric {metric.name!r} has {len(series)} repeats, "
                                   f"registered {list(looks)}")
                if roles[metric.name] == "reported":
                    continue
                bad = [(i, v) for i, v in enumerate(series) if not (math.isfinite(v) and v > 0)]
                if bad:
                    reasons.append(f"{where} cell {cell!r} metric {metric.name!r} has non-finite or non-positive "
                                   f"values at repeats {[i for i, _ in bad]}: {[v for _, v in bad]}")
    counts = {len(s.values[c][m.name]) for s in starts for c in registration.cells
              if c in s.values for m in every_metric if m.name in s.values[c]}
    if len(counts) > 1:
        reasons.append(f"the starts' series have different repeat counts {sorted(counts)}: a window's starts run "
                       f"the same repeats")
    return reasons


def window_repeats(starts: Sequence[Start], registration: Registration) -> int:
    """The window's repeat count (the primary's series length in the first start's first cell; the
    registered count when there is none)."""
    for start in starts:
        series = start.series(registration.cells[0], registration.primary.name)
        if series:
            return len(series)
    return registration.repeats


def reported_problems(starts: Sequence[Start], registration: Registration) -> list[str]:
    """Bad values of the reported metrics, named: they never void a window (a reported metric decides
    nothing), but a zero where zero is impossible (CPU per wall second of a process that ran) is bad
    evidence the record must say, not a value silently left out."""
    out = []
    for start in starts:
        for cell in registration.cells:
            for metric in registration.reported:
                series = start.values.get(cell, {}).get(metric.name) or ()
                bad = [(i, v) for i, v in enumerate(series) if not (math.isfinite(v) and v > 0)]
                if bad:
                    out.append(f"start {start.label!r} cell {cell!r} reported metric {metric.name!r}: bad evidence "
                               f"(non-finite or non-positive, impossible for a measured run) at repeats "
                               f"{[i for i, _ in bad]}: {[v for _, v in bad]}; this metric is not decided")
    return out


def input_problems(starts: Sequence[Start], registration: Registration) -> list[str]:
    """Reasons the three starts were not fed matched inputs, or reused what must be fresh.

    Matched (equal at the same cell and wave in every start, which also fixes
    their order): prompt hash, family and, under ``seeds="matched"``, seed.
    Frozen: every wave of a cell has its own prompt (no prompt repeats within
    a cell of a start), and under a registered schedule
    (``registration.prompts``) wave w's prompt hash is the registered one.
    Fresh: every cache salt, in every wave of every start; under
    ``seeds="fresh"`` every seed too; under ``seeds="matched"`` the waves of
    one cell in one start need distinct seeds; under ``seeds="greedy"`` no
    wave records a seed.  A field that is ``None`` must be ``None`` everywhere.
    """
    reasons: list[str] = []
    repeats = window_repeats(starts, registration)
    expected = repeats * registration.waves_per_repeat
    for start in starts:
        for cell in registration.cells:
            waves = start.inputs.get(cell)
            if waves is None:
                reasons.append(f"start {start.label!r} records no wave inputs for cell {cell!r}")
            elif len(waves) != expected:
                reasons.append(f"start {start.label!r} cell {cell!r} records {len(waves)} waves, "
                               f"expected {expected} ({repeats} repeats x "
                               f"{registration.waves_per_repeat} waves)")
    if reasons or not starts:
        return reasons
    for start in starts:
        for cell in registration.cells:
            shas = [w.prompt_sha256 for w in start.inputs[cell]]
            repeated = sorted({h[:12] for h in _repeated(shas)})
            if repeated:
                reasons.append(f"start {start.label!r} cell {cell!r}: every wave needs a distinct frozen prompt; "
                               f"prompts {repeated} repeat")
            if registration.prompts is not None:
                for wave, (got, want) in enumerate(zip(shas, registration.prompts[cell])):
                    if got != want:
                        reasons.append(f"start {start.label!r} cell {cell!r} wave {wave}: prompt {got[:12]} is not "
                                       f"the registered schedule's {want[:12]}")
                        break
            if registration.seeds == "greedy":
                seeded = [wave for wave, w in enumerate(start.inputs[cell]) if w.seed is not None]
                if seeded:
                    reasons.append(f"start {start.label!r} cell {cell!r}: seeds recorded at waves {seeded[:5]} under "
                                   f"a greedy registration")
    fields = ("prompt_sha256", "family") + (("seed",) if registration.seeds == "matched" else ())
    matched = attrgetter(*fields)
    for cell in registration.cells:
        reference = starts[0]
        wanted = list(map(matched, reference.inputs[cell]))
        for start in starts[1:]:
            if list(map(matched, start.inputs[cell])) == wanted:   # the usual case: nothing to name
                continue
            for wave, (a, b) in enumerate(zip(reference.inputs[cell], start.inputs[cell])):
                for name in fields:
                    if getattr(a, name) != getattr(b, name):
                        reasons.append(f"matched inputs differ: cell {cell!r} wave {wave} {name} is "
                                       f"{getattr(a, name)!r} in {reference.label!r} but {getattr(b, name)!r} "
                                       f"in {start.label!r}")
    waves = [w for s in starts for cell in registration.cells for w in s.inputs[cell]]
    for name in ("salt", "seed"):
        recorded = list(map(attrgetter(name), waves))
        given = [v for v in recorded if v is not None]
        if given and len(given) != len(recorded):
            missing = [(s.label, cell, wave) for s in starts for cell in registration.cells
                       for wave, w in enumerate(s.inputs[cell]) if getattr(w, name) is None][:5]
            reasons.append(f"{name} recorded for some waves but not others (first missing: {missing})")
            continue
        if name == "seed" and registration.seeds == "greedy":
            continue
        if name == "salt" or registration.seeds == "fresh":
            groups = {"all starts": given}
        else:
            groups = {f"start {s.label!r} cell {cell!r}": [w.seed for w in s.inputs[cell] if w.seed is not None]
                      for s in starts for cell in registration.cells}
        for where, values in groups.items():
            repeated = sorted(str(v) for v in _repeated(values))
            if repeated:
                reasons.append(f"{name}s repeat where they must be fresh ({where}): {repeated[:5]}")
    return reasons


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def output_problems(starts: Sequence[Start], registration: Registration) -> tuple[list[str], list[str]]:
    """The correctness prerequisite: ``(control_reasons, candidate_reasons)``.

    Every start must have kept its greedy ids for every wave of every cell.
    The two control starts must agree wave for wave (``control_reasons``: a
    control that does not repeat itself makes any comparison meaningless), and
    the candidate must agree with the first control (``candidate_reasons``:
    a faster candidate that computes something else is not a win).  Each
    reason names the cell, the wave and the first differing token position.
    """
    control_reasons: list[str] = []
    candidate_reasons: list[str] = []
    for start in starts:
        for cell in registration.cells:
            waves = start.outputs.get(cell)
            expected = len(start.inputs.get(cell, ()))
            if not waves or len(waves) != expected:
                (candidate_reasons if start.role == "candidate" else control_reasons).append(
                    f"start {start.label!r} cell {cell!r} kept {len(waves or ())} waves' greedy ids, expected "
                    f"{expected}: the outputs cannot be compared")
    if control_reasons or candidate_reasons or len(starts) != 3:
        return control_reasons, candidate_reasons
    first, middle, last = starts

    def compare(a: Start, b: Start, out: list[str], what: str) -> None:
        for cell in registration.cells:
            for wave, (x, y) in enumerate(zip(a.outputs[cell], b.outputs[cell])):
                if x == y:   # the common case, without a token-by-token walk
                    continue
                at = _first_difference(x, y)
                if at is not None:
                    shown = (x[at] if at < len(x) else "end", y[at] if at < len(y) else "end")
                    out.append(f"{what}: greedy ids differ in cell {cell!r} wave {wave} at token {at} "
                               f"({a.label!r} {shown[0]} vs {b.label!r} {shown[1]})")
                    break

    compare(first, last, control_reasons, "the control starts do not repeat themselves")
    compare(first, middle, candidate_reasons, "the candidate computes something else")
    return control_reasons, candidate_reasons
