"""The report's recomputation of a window's verdict: the rule applied again to the window's recorded starts, and
every way ``decision.json`` (or the receipt) disagrees with it.

The recorded starts are the window's journal (``starts.jsonl``, :mod:`harness.winrule.journal`: the header gives
the registration, the drift policy and any attached behavior verdict); a window recorded before the journal
existed is rechecked from ``starts.json`` with the receipt's ``parameters.registration`` and ``policy.drift``.
:func:`recheck` is pure (:func:`harness.winrule.rule.decide` on the starts, then :func:`disagreements`);
:func:`recheck_folder` reads the files.  The archive's day-to-day spread changes no verdict, so it is not read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from .. import jsonfile
from ..errors import HarnessError
from . import journal
from .decision import Behavior, Decision
from .drift import DriftPolicy
from .evidence import Start
from .registration import Registration
from .rule import decide

DECISION = "decision.json"
LEGACY = "starts.json"


@dataclass(frozen=True)
class Recheck:
    """What the recorded starts give (``verdict``; None when they could not be read: ``problem`` says why), where
    they came from, and every disagreement with ``decision.json`` and the receipt.  A window counts as evidence
    only when it ``agrees``."""

    verdict: str | None
    source: str
    disagreements: tuple[str, ...] = ()
    problem: str | None = None
    torn: str | None = None

    @property
    def agrees(self) -> bool:
        return self.verdict is not None and not self.disagreements


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))   # NaN is written null


def _same(a: Any, b: Any) -> bool:
    if _missing(a) or _missing(b):
        return _missing(a) and _missing(b)
    return isinstance(b, (int, float)) and not isinstance(b, bool) and math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)


def _series_problems(decision: Decision, recorded: Sequence[Any]) -> list[str]:
    by = {(s.get("cell"), s.get("metric")): s for s in recorded if isinstance(s, Mapping)}
    out = []
    for s in decision.series:
        theirs = by.pop((s.cell, s.metric), None)
        if theirs is None:
            out.append(f"{DECISION} has no series {s.metric!r} in cell {s.cell!r}")
            continue
        for name, mine in (("control_first", s.control_first), ("candidate", s.candidate),
                           ("control_last", s.control_last)):
            got = theirs.get(name)
            if not isinstance(got, list) or len(got) != len(mine):
                out.append(f"{DECISION}: {s.cell} {s.metric} {name} has {len(got) if isinstance(got, list) else got!r} "
                           f"values; the recorded starts have {len(mine)}")
                continue
            bad = next((i for i, (a, b) in enumerate(zip(mine, got)) if not _same(a, b)), None)
            if bad is not None:
                out.append(f"{DECISION}: {s.cell} {s.metric} {name} repeat {bad} is {got[bad]!r}; the recorded starts "
                           f"have {mine[bad]!r}")
    out += [f"{DECISION} has a series {m!r} in cell {c!r} that the recorded starts do not" for c, m in sorted(
        by, key=str)]
    return out


def disagreements(decision: Decision, recorded: Mapping[str, Any] | None, receipt_verdict: str | None) -> list[str]:
    """Every way ``recorded`` (decision.json's content; None when it could not be read) and the receipt's verdict
    differ from ``decision``, the rule's verdict recomputed from the recorded starts (pure)."""
    out = []
    if recorded is None:
        out.append(f"{DECISION} is missing or unreadable, so nothing the window wrote confirms its verdict")
    else:
        if recorded.get("verdict") != decision.verdict:
            out.append(f"{DECISION} says {recorded.get('verdict')!r}; the recorded starts give {decision.verdict}")
        if recorded.get("verdict_before_override") != decision.verdict_before_override:
            out.append(f"{DECISION} says {recorded.get('verdict_before_override')!r} before any override; the recorded "
                       f"starts give {decision.verdict_before_override!r}")
        looks = [x.get("repeats") if isinstance(x, Mapping) else x for x in recorded.get("looks") or []]
        if looks != [x.repeats for x in decision.looks]:
            out.append(f"{DECISION} decided at {looks} repeats; the recorded starts at {[x.repeats for x in decision.looks]}")
        out += _series_problems(decision, recorded.get("series") or [])
    if receipt_verdict is not None and receipt_verdict != decision.verdict:
        out.append(f"the receipt says {receipt_verdict!r}; the recorded starts give {decision.verdict}")
    return out


def recheck(starts: Sequence[Start], registration: Registration, drift: DriftPolicy, behavior: Behavior | None,
            recorded: Mapping[str, Any] | None, receipt_verdict: str | None, *, source: str,
            notes: Sequence[str] = (), torn: str | None = None) -> Recheck:
    """The rule on ``starts``, compared with the window's own record (pure); ``notes`` are disagreements found
    before deciding (the journal's registration differing from the receipt's)."""
    decision = decide(starts, registration, drift, (), behavior)
    return Recheck(decision.verdict, source, (*notes, *disagreements(decision, recorded, receipt_verdict)),
                   torn=torn)


def _recorded(folder: Path) -> Mapping[str, Any] | None:
    try:
        data = jsonfile.load(folder / DECISION, "win-rule decision record")
    except HarnessError:
        return None
    return data if isinstance(data, Mapping) else None


def _from_journal(path: Path, parameters: Mapping[str, Any], policy: Mapping[str, Any]):
    j = journal.read(path)
    if j.header is None:
        raise journal.JournalError(f"{path}: no window header")
    header = j.header
    registration = Registration.from_dict(header["identity"]["registration"])
    drift = DriftPolicy.from_dict(header["drift_policy"])
    behavior = Behavior.from_dict(header["behavior"]) if header.get("behavior") is not None else None
    notes = []
    if parameters.get("registration") not in (None, registration.as_dict()):
        notes.append("the journal's registration differs from the receipt's parameters.registration")
    if policy.get("drift") not in (None, drift.as_dict()):
        notes.append("the journal's drift policy differs from the receipt's policy.drift")
    return journal.starts_of(header, j.blocks), registration, drift, behavior, notes, j.torn


def _from_legacy(path: Path, parameters: Mapping[str, Any], policy: Mapping[str, Any], recorded):
    data = jsonfile.load(path, "win-rule start records")
    starts = [Start.from_dict(s) for s in data["starts"]]
    registration = Registration.from_dict(dict(parameters["registration"]))
    drift = DriftPolicy.from_dict(policy["drift"])
    behavior = (recorded or {}).get("behavior")   # recorded only there before the journal
    return starts, registration, drift, Behavior.from_dict(behavior) if behavior else None, [], None


def recheck_folder(folder: Path | str, parameters: Mapping[str, Any], policy: Mapping[str, Any],
                   receipt_verdict: str | None) -> Recheck:
    """Recheck the window whose evidence is ``folder`` (``parameters`` and ``policy``: its receipt's)."""
    folder = Path(folder)
    recorded = _recorded(folder)
    if (folder / journal.NAME).exists():
        source, path = journal.NAME, folder / journal.NAME
    elif (folder / LEGACY).exists():
        source, path = LEGACY, folder / LEGACY
    else:
        return Recheck(None, "", problem=f"no recorded starts ({journal.NAME} or {LEGACY}) in {folder}")
    try:
        starts, registration, drift, behavior, notes, torn = (
            _from_journal(path, parameters, policy) if source == journal.NAME
            else _from_legacy(path, parameters, policy, recorded))
        return recheck(starts, registration, drift, behavior, recorded, receipt_verdict, source=source, notes=notes,
                       torn=torn)
    except (HarnessError, KeyError, TypeError, ValueError, AttributeError) as exc:
        return Recheck(None, source, problem=f"{path}: the recorded starts cannot be read: {exc}")


__all__ = ["Recheck", "disagreements", "recheck", "recheck_folder"]
