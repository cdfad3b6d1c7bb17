"""The OFF/ON/OFF win rule's gate: a real A/B/A window whose direction is declared, and an A/A window.

The statistics live in :mod:`harness.winrule` (decided there, archived, charted); this gate only
judges the decision: the A/A window (candidate identical to the control) must never be a WIN nor
INVALID, and the real window fails when it says the opposite of what the campaign declared, or is
INVALID; a TIE (the declared effect not shown at the registered power) or an INCONCLUSIVE (a guard fired)
passes with its verdict in the receipt and the report, where the rate of expected verdicts is read
over many windows (one window is not a measurement of power).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from .. import fields, fmt
from ..fields import Where, knob
from ..verdict import Measurement, Verdict
from ..sampler import FIGURES as SAMPLED
from ..winrule.decision import INCONCLUSIVE, INVALID
from ..winrule.recheck import Recheck, recheck_folder
from ..winrule.drift import DriftPolicy
from ..winrule.statistics import LOSS, TIE, WIN
from .spec import Evidence, Figure, GateSpec, Policy

if TYPE_CHECKING:
    from ..view import ReceiptView

_SCALAR = (int, float, str, bool)


def _config(where: Where, value: Any) -> dict[str, Any]:
    """A control or candidate table: probe settings (numbers, strings, booleans), ``threads`` required."""
    t = fields.table(where, value, required=("threads",))
    for k, v in t.items():
        if not isinstance(v, _SCALAR):
            raise where.child(k).fail(f"expected a number, string or boolean, got {v!r}")
    fields.integer(where.child("threads"), t["threads"], minimum=1)
    return dict(t)


@dataclass(frozen=True)
class WinrulePolicy(Policy):
    """``[policy.winrule]``: the registration, control and candidate, and the expected verdict per model.

    A campaign without the table declares no window (the gate's tests skip and say so).
    """

    declared: bool = knob(False, internal=True)     # set when the campaign has the table
    name: str = knob("", required=True)
    version: int = knob(1, lo=1, required=True)
    cells: tuple[str, ...] = knob(("short", "long"), required=True, refers="cell")
    repeats: int = knob(5, lo=2, required=True)
    waves_per_repeat: int = knob(2, lo=1, required=True)
    required_effect: float = knob(0.02, hi=1.0, required=True)
    guard_effect: float | None = None
    alpha: float = knob(0.05, hi=1.0)
    max_loadavg: float | None = None
    max_repeats: int | None = None                  # at least ``repeats`` (checked in finish)
    step: int | None = knob(None, lo=1)
    max_off_off: float = knob(0.15, hi=1.0)
    sampled: dict[str, float] = knob(default_factory=lambda: dict(DriftPolicy.default().sampled),
                                     keys=lambda k: k in SAMPLED, keys_doc=f"not a sampled figure; expected one of {list(SAMPLED)}")
    waive: dict[str, str] = field(default_factory=dict)
    control: dict[str, Any] = knob(default_factory=dict, required=True, read=_config)
    candidate: dict[str, Any] = knob(default_factory=dict, required=True, read=_config)
    expected: dict[str, str] = knob(default_factory=dict, required=True, choices=(WIN, LOSS, TIE), refers="model")
    explain: str = knob("", required=True)
    min_token_ms: float = 1.0
    # the most seconds one window may take, estimated before it starts (harness/winrule/budget.py); None: no budget
    max_window_seconds: float | None = knob(None, lo=1.0)

    @classmethod
    def finish(cls, values: dict[str, Any], where: Where) -> dict[str, Any]:
        repeats = values["repeats"]
        if values.get("max_repeats") is not None and values["max_repeats"] < repeats:
            raise where.child("max_repeats").fail(f"must be >= {repeats}, got {values['max_repeats']}")
        sampled = values.get("sampled", dict(DriftPolicy.default().sampled))
        known = {*DriftPolicy.default().equal, *DriftPolicy.default().bounds, "loadavg_1m", *sampled}
        for key, why in values.get("waive", {}).items():
            if key not in known:
                raise where.child("waive").child(key).fail(f"the guard checks no reading {key!r}; it checks {sorted(known)}")
            if not why.strip():
                raise where.child("waive").child(key).fail("a waiver needs the reason the reading's absence is accepted")
        return {**values, "declared": True}


@dataclass(frozen=True)
class WindowEvidence(Evidence):
    """A probe window's decision (:mod:`harness.winrule.probe_window`), as the win-rule and overlay-cost gates
    judge it."""

    verdict: str                                   # the rule's decision (WIN, LOSS, TIE, INCONCLUSIVE, INVALID)
    control_token_ms: float | None                 # the controls' time per decoded token (None: none measured)
    reasons: tuple[str, ...] = ()
    figures: Mapping[str, Any] = field(default_factory=dict)
    window: str = "real"                           # "real" or "aa" (the candidate is the control)
    expected: str = ""                             # what the campaign declared for a real window


def decide(evidence: WindowEvidence, policy: WinrulePolicy) -> Verdict:
    """INVALID fails on any model.  The verdict itself (an A/A WIN, a real window against its expectation) is
    held only when a control decode step takes at least ``min_token_ms``: below it the candidate process's own
    speed decides the window (the CI model, 0.06 ms a step: a real window read WIN, LOSS and TIE on one commit;
    an overlay window a LOSS of -21 to -45 % that three windows after it did not repeat)."""
    reasons, figures = [], dict(evidence.figures)
    verdict, expected, window = evidence.verdict, evidence.expected, evidence.window
    gated = timing_floor(evidence.control_token_ms, policy.min_token_ms, figures)
    if window == "aa" and verdict == WIN and gated:
        reasons.append("the A/A window (candidate identical to control) was decided WIN: the rule is not safe here")
    if window == "aa" and verdict == INVALID:
        reasons.append("the A/A window is INVALID: the same configuration gave different greedy ids between starts")
    if window == "real" and verdict == INVALID:
        reasons.append("the window is INVALID: " + "; ".join(evidence.reasons))
    if window == "real" and verdict not in (expected, INCONCLUSIVE, TIE, INVALID) and gated:
        reasons.append(f"the candidate was expected to be a {expected} ({policy.explain}); the rule said {verdict}")
    return Verdict.from_checks(reasons, figures)


# what a window's verdict carries (probe_window.ratio_figures, and timing_floor's two)
WINDOW_FIGURES = (Figure("control_token_ms", "ms"), Figure("verdict_gated", "bool"))


def _during(w: Mapping[str, Any]) -> str:
    """The worst steal and foreign CPU share sampled during the window's starts."""
    starts = w.get("sampled") or {}
    if not starts:
        return "—"
    def worst(key):
        values = [s.get(key) for s in starts.values()]
        return None if not values or None in values else max(values)
    steal, foreign = worst("steal_fraction"), worst("foreign_cpu_share")
    return (f"steal {fmt.pct(steal) if steal is not None else 'n/a'}, "
            f"foreign CPU {fmt.pct(foreign) if foreign is not None else 'n/a'}")


def timing_floor(token_ms: float | None, min_token_ms: float, figures: dict[str, Any]) -> bool:
    """Whether a probe window's verdict is held: a control decode step (``token_ms``) of at least
    ``min_token_ms``.  Records both in ``figures`` (``control_token_ms``, ``verdict_gated``), for the report.
    The win-rule gate and the overlay cost gate share it."""
    gated = token_ms is not None and token_ms >= min_token_ms
    figures["control_token_ms"] = Measurement(token_ms, "ms")
    figures["verdict_gated"] = Measurement(gated, "bool")
    return gated


def not_gated(v: ReceiptView) -> str:
    """``, not gated: a control step takes 55.8 µs`` for a window whose verdict was recorded but not held, else ''."""
    if v.value("verdict_gated") is False:
        return f", not gated: a control step takes {fmt.figure(v.value('control_token_ms'), 'ms')}"
    return ""


def _gate_cell(v: ReceiptView) -> str:
    """The receipt's outcome, and when the window's verdict was not held (a decode step under min_token_ms) why."""
    note = not_gated(v)
    return f"{v.outcome} (verdict{note})" if note else v.outcome


def recheck(v: ReceiptView) -> Recheck:
    """The window's verdict recomputed from its recorded starts (:mod:`harness.winrule.recheck`), compared with its
    ``decision.json`` and its receipt; not recomputed when the view was not read from a run directory."""
    if v.run_dir is None:
        return Recheck(None, "", problem="the receipt was not read from a run directory")
    return recheck_folder(Path(v.run_dir) / v.evidence, v.parameters, v.policy, v.winrule.get("verdict"))


def _recomputed(r: Recheck) -> str:
    if r.verdict is None:
        return "not recomputed"
    return f"{r.verdict}, agrees" if r.agrees else f"**{r.verdict}: disagrees**"


def _recheck_lines(windows: Sequence[ReceiptView], checks: Sequence[Recheck]) -> list[str]:
    """How many windows the recorded starts confirm (only those count as evidence), then each that is not
    counted with every disagreement, and any torn journal line."""
    agree = sum(r.agrees for r in checks)
    lines = ["", f"Each window's verdict recomputed from its recorded starts (its journal `starts.jsonl`, or "
                 f"`starts.json` for a window recorded before the journal; the rule applied again): {fmt.figure(agree)} of {fmt.figure(len(windows))} agree with their `decision.json` "
                 f"and receipt, and only those count as evidence."]
    bad = [(v, r) for v, r in zip(windows, checks) if not r.agrees]
    if bad:
        lines += ["", "Not counted as evidence (the recorded starts do not confirm the window's own record):", ""]
        lines += [f"- {v.model} {v.dtype} window {v.winrule['window']} (`{v.evidence}`): "
                  + "; ".join(r.disagreements or (r.problem or "not recomputed",)) for v, r in bad]
    torn = [f"- {r.torn}" for r in checks if r.torn]
    if torn:
        lines += ["", "Torn journal lines (a window stopped while writing; ignored):", "", *torn]
    return lines


def section(views: Sequence[ReceiptView]) -> list[fmt.Section]:
    """Each window's decision, linked to its record and per-repeat chart in the receipt's evidence; a
    receipt with no decision (a campaign that declares no window) is listed below the table."""
    from ..winrule.simulate import MEASURED

    windows = [v for v in views if v.winrule]
    rest = [v for v in views if v.gate == SPEC.name and not v.winrule]
    if not windows and not rest:
        return []
    blocks: list[str | fmt.Table] = []
    cells = []
    checks = [recheck(v) for v in windows]
    for v, r in zip(windows, checks):
        w = v.winrule
        waived = "; ".join(f"{k} ({why})" for k, why in (w.get("waived") or {}).items()) or "—"
        cells.append([v.model, v.dtype, w["window"], f"**{w['verdict']}**", _recomputed(r),
                      w["verdict_before_override"] or "—",
                      w["expected"], _gate_cell(v), " → ".join(str(n) for n in w.get("looks") or []) or "—",
                      w.get("outputs") or "—", _during(w), waived, "; ".join(w["reasons"]) or "—",
                      f"[{w['markdown']}]({v.evidence}/{w['markdown']}), [chart]({v.evidence}/{w['chart']})"])
    if windows:
        blocks.append(fmt.table_of(["model", "dtype", "window", "verdict", "recomputed", "before override", "expected",
                                    "gate", "repeats", "outputs", "machine during starts", "waived", "reasons",
                                    "record"], "llllllllllllll", cells))
        blocks += _recheck_lines(windows, checks)
        blocks += ["", "The rule's error rates, simulated through its stopping rule (harness/winrule/rule.py, checked by "
                  "suites/harness/test_winrule_simulation.py): " + "; ".join(
                      f"{name}: worst false WIN {fmt.pct(fw)} over the null conditions, worst power {fmt.pct(pw)} at a "
                      f"true +5 %" for name, (fw, pw) in MEASURED.items()) + "."]
    if rest:
        blocks += ["", *fmt.receipt_lines(rest)]
    return [fmt.Section("OFF/ON/OFF win rule decisions", tuple(blocks))]


SPEC = GateSpec(name="winrule", level="run", applies_to=("q4",), policy=WinrulePolicy, evidence=WindowEvidence,
                decide=decide, section=section, figures=WINDOW_FIGURES,
                describe="OFF/ON/OFF (A/B/A) on the native probe: a declared change's verdict, and an A/A window never WIN")
