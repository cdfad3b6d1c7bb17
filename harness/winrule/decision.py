"""The decision record of an A/B/A window: every series, every verdict, and the reason for any override."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .archive import Spread
from .drift import DriftPolicy, DriftReport
from .registration import Registration
from .statistics import LOSS, STATISTIC, TIE, WIN, PairedResult

INCONCLUSIVE = "INCONCLUSIVE"
INVALID = "INVALID"
VERDICTS = (WIN, LOSS, TIE, INCONCLUSIVE, INVALID)
SCHEMA_VERSION = 2


def _json(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


@dataclass(frozen=True)
class Series:
    """One metric in one cell: the three starts' values per repeat, the paired control, and its verdict.

    ``control`` is the per-repeat mean of the two control starts (linear drift
    across the window cancels in it exactly).  ``off_off_spread`` is the last
    control's mean over the first's, minus one.  ``result`` is ``None`` when
    the evidence was partial and no verdict was computed.
    """

    cell: str
    metric: str
    role: str
    unit: str
    higher_is_better: bool
    required_effect: float
    control_first: tuple[float, ...]
    candidate: tuple[float, ...]
    control_last: tuple[float, ...]
    control: tuple[float, ...]
    off_off_spread: float | None
    result: PairedResult | None

    @property
    def verdict(self) -> str | None:
        return None if self.result is None else self.result.verdict

    def as_dict(self) -> dict[str, Any]:
        return {
            "cell": self.cell, "metric": self.metric, "role": self.role, "unit": self.unit,
            "higher_is_better": self.higher_is_better, "required_effect_fraction": self.required_effect,
            "control_first": [_json(v) for v in self.control_first],
            "candidate": [_json(v) for v in self.candidate],
            "control_last": [_json(v) for v in self.control_last],
            "control": [_json(v) for v in self.control],
            "off_off_spread_fraction": _json(self.off_off_spread),
            "verdict": self.verdict,
            "statistic": None if self.result is None else self.result.as_dict(),
        }


@dataclass(frozen=True)
class StartSummary:
    """Who the three starts were, for the record (their values live in the series)."""

    label: str
    role: str
    config: str
    registration: str
    commit: str | None
    complete: bool

    samples: tuple[tuple[str, Any], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"label": self.label, "role": self.role, "config": self.config, "registration": self.registration,
                "commit": self.commit, "complete": self.complete, "sampled_during_start": dict(self.samples)}


@dataclass(frozen=True)
class Behavior:
    """The behavior gate's verdict for a numerics-changing candidate, attached to its window.

    ``subject`` names what was evaluated (the candidate's graph SHA-256); the
    rule accepts differing greedy ids only when it is the candidate's graph
    and ``passed`` is true.
    """

    subject: str
    passed: bool
    receipt: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"subject": self.subject, "passed": self.passed, "receipt": self.receipt}

    @classmethod
    def from_dict(cls, data: Any) -> "Behavior":
        if not isinstance(data, dict) or not isinstance(data.get("subject"), str) \
                or not isinstance(data.get("passed"), bool):
            raise ValueError(f"a behavior verdict must be an object with a subject and passed, got {data!r}")
        return cls(data["subject"], data["passed"], str(data.get("receipt") or ""))


@dataclass(frozen=True)
class Look:
    """One look of the stopping rule: the first ``repeats`` repeats decided at ``alpha``."""

    repeats: int
    alpha: float
    verdict: str

    def as_dict(self) -> dict[str, Any]:
        return {"repeats": self.repeats, "alpha": self.alpha, "verdict": self.verdict}


@dataclass(frozen=True)
class Decision:
    """The win rule's decision for one window, decided once and rendered to JSON, Markdown and the terminal.

    ``verdict`` is final.  ``verdict_before_override`` is what the rule said
    from complete evidence before an override made it INCONCLUSIVE (``None``
    when the evidence was partial: no verdict is ever computed from partial
    data).  ``reasons`` are the override reasons, non-empty exactly when the
    verdict is INCONCLUSIVE or INVALID.  INVALID means the correctness
    prerequisite failed: the greedy ids differ between the controls, or the
    candidate's differ from the controls' without a passing behavior verdict
    for a registered numerics-changing candidate.  ``blocked_by`` names the
    guard losses that turned a primary WIN into a TIE.  ``alternatives`` says
    what the window verdict would have been with each other metric as the
    primary.  ``looks`` is the stopping rule's path (one entry per decided
    look); ``wants_more`` says a lane should run ``step`` more repeats.
    ``outputs`` records the correctness comparison (identical, or tolerated
    under the attached ``behavior``).
    """

    registration: Registration
    verdict: str
    verdict_before_override: str | None
    reasons: tuple[str, ...]
    blocked_by: tuple[str, ...]
    series: tuple[Series, ...]
    alternatives: dict[str, str | None]
    starts: tuple[StartSummary, ...]
    drift: DriftReport | None
    drift_policy: DriftPolicy
    archive_spreads: tuple[Spread, ...] = field(default=())
    bad_evidence: tuple[str, ...] = field(default=())   # reported metrics' impossible values, named, never voiding
    looks: tuple[Look, ...] = field(default=())
    wants_more: bool = False
    outputs: str = "not compared"
    behavior: Behavior | None = None

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"decision: verdict must be one of {VERDICTS}, got {self.verdict!r}")
        if (self.verdict in (INCONCLUSIVE, INVALID)) != bool(self.reasons):
            raise ValueError("decision: reasons are required for, and only for, an INCONCLUSIVE or INVALID verdict")

    def series_of(self, cell: str, metric: str) -> Series:
        for s in self.series:
            if s.cell == cell and s.metric == metric:
                return s
        raise KeyError((cell, metric))

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION, "statistic": STATISTIC,
            "registration": self.registration.as_dict(),
            "verdict": self.verdict, "verdict_before_override": self.verdict_before_override,
            "reasons": list(self.reasons), "blocked_by": list(self.blocked_by),
            "series": [s.as_dict() for s in self.series],
            "alternatives": dict(sorted(self.alternatives.items())),
            "starts": [s.as_dict() for s in self.starts],
            "drift": None if self.drift is None else self.drift.as_dict(),
            "drift_policy": self.drift_policy.as_dict(),
            "archive_spreads": [s.as_dict() for s in self.archive_spreads],
            "bad_evidence": list(self.bad_evidence),
            "looks": [x.as_dict() for x in self.looks], "wants_more": self.wants_more,
            "outputs": self.outputs, "behavior": None if self.behavior is None else self.behavior.as_dict(),
        }

    def render(self) -> str:
        """A few terminal lines: the verdict, why, and each decision series' verdict."""
        head = self.verdict
        if self.verdict in (INCONCLUSIVE, INVALID) and self.verdict_before_override is not None:
            head += f" (the rule said {self.verdict_before_override} before the override)"
        lines = [f"{self.registration.key}: {head}"]
        lines += [f"  - {r}" for r in self.reasons]
        lines += [f"  - blocked by guard: {b}" for b in self.blocked_by]
        lines += [f"  - {b}" for b in self.bad_evidence]
        if self.drift is not None:
            lines += [f"  - waived: {k} ({why})" for k, why in self.drift.waived]
        if len(self.looks) > 1:
            lines.append("  looks: " + ", ".join(f"{x.repeats} repeats -> {x.verdict}" for x in self.looks))
        for s in self.series:
            if s.role == "reported" or s.result is None:
                continue
            change = ", ".join(f"{0.0 if abs(g) < 5e-5 else math.expm1(g):+.2%}" for g in s.result.gains)
            lines.append(f"  {s.cell} {s.metric} ({s.role}): {s.verdict} [{change}]")
        return "\n".join(lines)
