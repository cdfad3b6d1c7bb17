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
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from .. import fields
from ..fields import Where
from .. import fmt
from ..verdict import Measurement, Verdict
from ..sampler import FIGURES as SAMPLED
from ..winrule.decision import INCONCLUSIVE, INVALID
from ..winrule.drift import DriftPolicy
from ..winrule.statistics import LOSS, TIE, WIN
from .spec import GateSpec, Policy

if TYPE_CHECKING:
    from ..view import ReceiptView

_SCALAR = (int, float, str, bool)


@dataclass(frozen=True)
class WinrulePolicy(Policy):
    """``[policy.winrule]``: the registration, control and candidate, and the expected verdict per model.

    A campaign without the table declares no window (the gate's tests skip and say so).
    """

    declared: bool = False
    name: str = ""
    version: int = 1
    cells: tuple[str, ...] = ("short", "long")
    repeats: int = 5
    waves_per_repeat: int = 2
    required_effect: float = 0.02
    guard_effect: float | None = None
    alpha: float = 0.05
    max_loadavg: float | None = None
    max_repeats: int | None = None
    step: int | None = None
    max_off_off: float = 0.15
    sampled: dict[str, float] = field(default_factory=lambda: dict(DriftPolicy.default().sampled))
    waive: dict[str, str] = field(default_factory=dict)
    control: dict[str, Any] = field(default_factory=dict)
    candidate: dict[str, Any] = field(default_factory=dict)
    expected: dict[str, str] = field(default_factory=dict)
    explain: str = ""
    min_token_ms: float = 1.0

    @classmethod
    def parse(cls, raw, where: Where) -> "WinrulePolicy":
        if raw is None:
            return cls()
        keys = ("name", "version", "cells", "repeats", "waves_per_repeat", "required_effect", "guard_effect", "alpha",
                "max_loadavg", "max_repeats", "step", "max_off_off", "sampled", "waive", "control", "candidate",
                "expected", "explain", "min_token_ms")
        fields.table(where, raw, keys, required=("name", "version", "cells", "repeats", "waves_per_repeat",
                                                 "required_effect", "control", "candidate", "expected", "explain"))
        w = where.child
        configs = {}
        for side in ("control", "candidate"):
            t = fields.table(w(side), raw[side], required=("threads",))
            for k, v in t.items():
                if not isinstance(v, _SCALAR):
                    raise w(side).child(k).fail(f"expected a number, string or boolean, got {v!r}")
            fields.integer(w(side).child("threads"), t["threads"], minimum=1)
            configs[side] = dict(t)
        expected = {}
        for model, verdict in fields.table(w("expected"), raw["expected"]).items():
            expected[model] = fields.text(w("expected").child(model), verdict, (WIN, LOSS, TIE))
        alpha = fields.number(w("alpha"), raw.get("alpha", 0.05), 0.0, 1.0)
        repeats = fields.integer(w("repeats"), raw["repeats"], minimum=2)
        sampled = dict(DriftPolicy.default().sampled)
        if "sampled" in raw:
            sampled = {}
            for key, bound in fields.table(w("sampled"), raw["sampled"]).items():
                if key not in SAMPLED:
                    raise w("sampled").child(key).fail(f"not a sampled figure; expected one of {list(SAMPLED)}")
                sampled[key] = fields.number(w("sampled").child(key), bound, 0.0)
        known = {*DriftPolicy.default().equal, *DriftPolicy.default().bounds, "loadavg_1m", *sampled}
        waive = {}
        for key, why in fields.table(w("waive"), raw.get("waive", {})).items():
            if key not in known:
                raise w("waive").child(key).fail(f"the guard checks no reading {key!r}; it checks {sorted(known)}")
            waive[key] = fields.text(w("waive").child(key), why)
            if not waive[key].strip():
                raise w("waive").child(key).fail("a waiver needs the reason the reading's absence is accepted")
        return cls(
            declared=True, name=fields.text(w("name"), raw["name"]),
            version=fields.integer(w("version"), raw["version"], minimum=1),
            cells=fields.strings(w("cells"), raw["cells"]),
            repeats=repeats,
            max_repeats=fields.integer(w("max_repeats"), raw["max_repeats"], minimum=repeats)
            if "max_repeats" in raw else None,
            step=fields.integer(w("step"), raw["step"], minimum=1) if "step" in raw else None,
            max_off_off=fields.number(w("max_off_off"), raw.get("max_off_off", 0.15), 0.0, 1.0),
            sampled=sampled, waive=waive,
            waves_per_repeat=fields.integer(w("waves_per_repeat"), raw["waves_per_repeat"], minimum=1),
            required_effect=fields.number(w("required_effect"), raw["required_effect"], 0.0, 1.0),
            guard_effect=fields.number(w("guard_effect"), raw["guard_effect"], 0.0) if "guard_effect" in raw else None,
            alpha=alpha,
            max_loadavg=fields.number(w("max_loadavg"), raw["max_loadavg"]) if "max_loadavg" in raw else None,
            control=configs["control"], candidate=configs["candidate"], expected=expected,
            explain=fields.text(w("explain"), raw["explain"]),
            min_token_ms=fields.number(w("min_token_ms"), raw.get("min_token_ms", cls.min_token_ms), 0.0))


def decide(evidence: Mapping[str, Any], policy: WinrulePolicy) -> Verdict:
    """``evidence``: ``window`` ("real" or "aa"), ``verdict`` (the rule's decision), ``expected``, ``figures``
    and ``control_token_ms`` (the controls' time per decoded token, :func:`probe_window.control_token_ms`).

    INVALID fails on any model.  The verdict itself (an A/A WIN, a real window against its expectation) is
    held only when a control decode step takes at least ``min_token_ms``: below it the candidate process's own
    speed decides the window (the CI model, 0.06 ms a step: a real window read WIN, LOSS and TIE on one commit;
    an overlay window a LOSS of -21 to -45 % that three windows after it did not repeat)."""
    reasons, figures = [], dict(evidence.get("figures") or {})
    verdict, expected = evidence["verdict"], evidence["expected"]
    gated = timing_floor(evidence.get("control_token_ms"), policy.min_token_ms, figures)
    if evidence["window"] == "aa" and verdict == WIN and gated:
        reasons.append("the A/A window (candidate identical to control) was decided WIN: the rule is not safe here")
    if evidence["window"] == "aa" and verdict == INVALID:
        reasons.append("the A/A window is INVALID: the same configuration gave different greedy ids between starts")
    if evidence["window"] == "real" and verdict == INVALID:
        reasons.append("the window is INVALID: " + "; ".join(evidence.get("reasons", ())))
    if evidence["window"] == "real" and verdict not in (expected, INCONCLUSIVE, TIE, INVALID) and gated:
        reasons.append(f"the candidate was expected to be a {expected} ({policy.explain}); the rule said {verdict}")
    return Verdict.from_checks(reasons, figures)


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


def section(views: Sequence[ReceiptView]) -> list[str]:
    """Each window's decision, linked to its record and per-repeat chart in the receipt's evidence; a
    receipt with no decision (a campaign that declares no window) is listed below the table."""
    from ..winrule.simulate import MEASURED

    windows = [v for v in views if v.winrule]
    rest = [v for v in views if v.gate == SPEC.name and not v.winrule]
    if not windows and not rest:
        return []
    lines = ["## OFF/ON/OFF win rule decisions", ""]
    if windows:
        lines += fmt.table(["model", "dtype", "window", "verdict", "before override", "expected", "gate", "repeats",
                            "outputs", "machine during starts", "waived", "reasons", "record"], "lllllllllllll")
    for v in windows:
        w = v.winrule
        waived = "; ".join(f"{k} ({why})" for k, why in (w.get("waived") or {}).items()) or "—"
        lines.append(fmt.row([v.model, v.dtype, w["window"], f"**{w['verdict']}**", w["verdict_before_override"] or "—",
                              w["expected"], _gate_cell(v), " → ".join(str(n) for n in w.get("looks") or []) or "—",
                              w.get("outputs") or "—", _during(w), waived, "; ".join(w["reasons"]) or "—",
                              f"[{w['markdown']}]({v.evidence}/{w['markdown']}), [chart]({v.evidence}/{w['chart']})"]))
    if windows:
        lines += ["", "The rule's error rates, simulated through its stopping rule (harness/winrule/rule.py, checked by "
                  "suites/harness/test_winrule_simulation.py): " + "; ".join(
                      f"{name}: worst false WIN {fmt.pct(fw)} over the null conditions, worst power {fmt.pct(pw)} at a "
                      f"true +5 %" for name, (fw, pw) in MEASURED.items()) + "."]
    if rest:
        lines += ["", *fmt.receipt_lines(rest)]
    return lines


SPEC = GateSpec(name="winrule", level="run", applies_to=("q4",), policy=WinrulePolicy, decide=decide, section=section,
                describe="OFF/ON/OFF (A/B/A) on the native probe: a declared change's verdict, and an A/A window never WIN")
