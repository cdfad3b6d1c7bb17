"""Machine drift between the starts of a window, judged from their fingerprints by a drift policy."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..errors import EvidenceError


class DriftPolicyError(EvidenceError):
    """A drift policy is malformed."""


@dataclass(frozen=True)
class Bound:
    """How far a numeric fingerprint key may move across the starts: absolute and/or relative to the largest."""

    max_abs: float | None = None
    max_rel: float | None = None

    def __post_init__(self):
        for name in ("max_abs", "max_rel"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value) or value < 0):
                raise DriftPolicyError(f"bound: {name} must be a finite number >= 0 or None, got {value!r}")
        if self.max_abs is None and self.max_rel is None:
            raise DriftPolicyError("bound: give max_abs, max_rel or both")

    def as_dict(self) -> dict[str, Any]:
        return {"max_abs": self.max_abs, "max_rel_fraction": self.max_rel}


@dataclass(frozen=True)
class DriftPolicy:
    """Which fingerprint keys must be equal, which numeric ones may move by how much, and a load bound.

    ``max_loadavg`` bounds ``loadavg_key`` at every start (a busy machine times
    the candidate against a different machine, even if nothing drifted).
    ``None`` or ``NaN`` readings count as absent, as the fingerprint collectors
    write ``None`` for what the machine does not expose.

    The guard fails closed: every key the policy names (``equal``,
    ``bounds``, the load key, ``sampled``) must be recorded at every start, or
    the window is INCONCLUSIVE naming it, unless ``waived`` names the key with
    the reason the campaign accepts its absence (a VM exposes no thermal zone);
    each waiver is printed in the decision record.  ``sampled`` bounds the
    machine *during* each start (:mod:`harness.sampler`'s figures, such as
    ``steal_fraction``, ``foreign_cpu_share``, ``iowait_fraction``,
    ``run_queue_mean``, ``cpu_mhz_spread``): a start whose sampled figure is
    above its bound makes the window INCONCLUSIVE.
    """

    equal: tuple[str, ...] = ()
    bounds: Mapping[str, Bound] = field(default_factory=dict)
    loadavg_key: str = "loadavg_1m"
    max_loadavg: float | None = None
    sampled: Mapping[str, float] = field(default_factory=dict)
    waived: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "equal", tuple(self.equal))
        object.__setattr__(self, "bounds", dict(self.bounds))
        object.__setattr__(self, "sampled", dict(self.sampled))
        object.__setattr__(self, "waived", dict(self.waived))
        for key, limit in self.sampled.items():
            if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not math.isfinite(limit) or limit < 0:
                raise DriftPolicyError(f"drift policy: sampled[{key!r}] must be a finite number >= 0, got {limit!r}")
        for key, why in self.waived.items():
            if not isinstance(why, str) or not why.strip():
                raise DriftPolicyError(f"drift policy: waived[{key!r}] needs the reason the absence is accepted, "
                                       f"got {why!r}")
        named = {*self.equal, *self.bounds, *self.sampled, self.loadavg_key}
        stray = sorted(set(self.waived) - named)
        if stray:
            raise DriftPolicyError(f"drift policy: waived names readings the policy does not check: {stray}")
        for key in (*self.equal, *self.bounds, *self.sampled, self.loadavg_key):
            if not isinstance(key, str) or not key:
                raise DriftPolicyError(f"drift policy: keys must be non-empty strings, got {key!r}")
        both = set(self.equal) & set(self.bounds)
        if both:
            raise DriftPolicyError(f"drift policy: keys both equal and bounded: {sorted(both)}")
        for key, bound in self.bounds.items():
            if not isinstance(bound, Bound):
                raise DriftPolicyError(f"drift policy: bounds[{key!r}] must be a Bound, got {bound!r}")
        if self.max_loadavg is not None and (isinstance(self.max_loadavg, bool)
                                             or not isinstance(self.max_loadavg, (int, float)) or self.max_loadavg < 0):
            raise DriftPolicyError(f"drift policy: max_loadavg must be a number >= 0 or None, got {self.max_loadavg!r}")

    @classmethod
    def default(cls) -> "DriftPolicy":
        """A starting point for the keys :mod:`harness.fingerprint` collects; campaigns register their own."""
        return cls(
            equal=("cpu_model", "logical_cpus", "affinity_cpus", "cpu_governor", "memory_total_bytes",
                   "hostname", "omp_num_threads", "omp_wait_policy", "gatehouse_threads"),
            bounds={"cpu_mhz": Bound(max_rel=0.05), "thermal_max_c": Bound(max_abs=10.0)},
            loadavg_key="loadavg_1m", max_loadavg=None,
            sampled={"steal_fraction": 0.02, "iowait_fraction": 0.05, "foreign_cpu_share": 0.10,
                     "cpu_mhz_spread": 0.05})

    def as_dict(self) -> dict[str, Any]:
        return {"equal": list(self.equal), "bounds": {k: b.as_dict() for k, b in sorted(self.bounds.items())},
                "loadavg_key": self.loadavg_key, "max_loadavg": self.max_loadavg,
                "sampled": dict(sorted(self.sampled.items())), "waived": dict(sorted(self.waived.items()))}

    @classmethod
    def from_dict(cls, data: Any) -> "DriftPolicy":
        """Rebuild from :meth:`as_dict` output (a journal's header, a receipt's ``policy.drift``)."""
        if not isinstance(data, Mapping):
            raise DriftPolicyError(f"a drift policy must be an object, got {data!r}")
        try:
            bounds = {k: Bound(b.get("max_abs"), b.get("max_rel_fraction")) for k, b in (data.get("bounds") or {}).items()}
            return cls(equal=tuple(data.get("equal") or ()), bounds=bounds,
                       loadavg_key=data.get("loadavg_key", "loadavg_1m"), max_loadavg=data.get("max_loadavg"),
                       sampled=dict(data.get("sampled") or {}), waived=dict(data.get("waived") or {}))
        except (AttributeError, TypeError) as bad:
            raise DriftPolicyError(f"a drift policy is malformed: {bad}") from None


@dataclass(frozen=True)
class DriftReport:
    """Reasons the machine drifted (empty when it did not), and which keys were and were not checked."""

    reasons: tuple[str, ...]
    checked: tuple[str, ...]
    absent: tuple[str, ...]
    waived: tuple[tuple[str, str], ...] = ()
    sampled: tuple[tuple[str, tuple[Any, ...]], ...] = ()

    @property
    def drifted(self) -> bool:
        return bool(self.reasons)

    def as_dict(self) -> dict[str, Any]:
        return {"reasons": list(self.reasons), "checked_keys": list(self.checked), "absent_keys": list(self.absent),
                "waived": [{"reading": k, "reason": why} for k, why in self.waived],
                "sampled": {k: list(v) for k, v in self.sampled}}


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _unrecorded(key: str, kind: str, when: str, policy: DriftPolicy, absent: list[str], reasons: list[str]) -> None:
    """A reading the policy names that no start recorded: listed as absent, and a reason unless waived (the guard
    fails closed)."""
    absent.append(key)
    if key not in policy.waived:
        reasons.append(f"clock guard: {kind} {key!r} was not recorded {when}; the guard fails closed (a campaign "
                       f"may waive it by name with its reason)")


def check_drift(fingerprints: Sequence[Mapping[str, Any]], policy: DriftPolicy,
                labels: Sequence[str] | None = None,
                samples: Sequence[Mapping[str, Any]] | None = None) -> DriftReport:
    """Compare two or three start fingerprints under ``policy``; every difference is a named reason.

    A key read at some starts but not others is drift (the machine stopped, or
    started, exposing it); a key absent at every start is listed in
    ``absent`` and is a reason too (the guard fails closed) unless the policy
    waives it.  ``samples`` (one sampler summary per start, in the same order)
    are held to ``policy.sampled``: absent or above the bound is a reason.
    """
    if not 2 <= len(fingerprints) <= 3:
        raise EvidenceError(f"check_drift compares 2 or 3 fingerprints, got {len(fingerprints)}")
    labels = tuple(labels) if labels is not None else tuple(f"start {i + 1}" for i in range(len(fingerprints)))
    if len(labels) != len(fingerprints):
        raise EvidenceError(f"check_drift: {len(labels)} labels for {len(fingerprints)} fingerprints")
    reasons: list[str] = []
    checked: list[str] = []
    absent: list[str] = []
    keys = list(dict.fromkeys((*policy.equal, *policy.bounds)))
    if policy.max_loadavg is not None and policy.loadavg_key not in keys:
        keys.append(policy.loadavg_key)
    for key in keys:
        readings = [fp.get(key) for fp in fingerprints]
        present = [_present(v) for v in readings]
        if not any(present):
            _unrecorded(key, "fingerprint reading", "at any start", policy, absent, reasons)
            continue
        checked.append(key)
        shown = ", ".join(f"{label}={value!r}" for label, value in zip(labels, readings))
        if not all(present):
            reasons.append(f"machine drift: fingerprint key {key!r} is missing at some starts ({shown})")
            continue
        if key in policy.equal:
            if any(v != readings[0] or type(v) is not type(readings[0]) for v in readings[1:]):
                reasons.append(f"machine drift: {key!r} differs between starts ({shown})")
        if key in policy.bounds:
            if not all(_numeric(v) and math.isfinite(v) for v in readings):
                reasons.append(f"machine drift: {key!r} must be a finite number at every start ({shown})")
                continue
            bound = policy.bounds[key]
            spread = max(readings) - min(readings)
            scale = max(abs(v) for v in readings)
            if bound.max_abs is not None and spread > bound.max_abs:
                reasons.append(f"machine drift: {key!r} moved by {spread:g} (> {bound.max_abs:g}) ({shown})")
            if bound.max_rel is not None and scale > 0 and spread / scale > bound.max_rel:
                reasons.append(f"machine drift: {key!r} moved by {spread / scale:.2%} "
                               f"(> {bound.max_rel:.2%}) ({shown})")
        if key == policy.loadavg_key and policy.max_loadavg is not None:
            if not all(_numeric(v) and math.isfinite(v) for v in readings):
                reasons.append(f"machine load: {key!r} must be a finite number at every start ({shown})")
            elif max(readings) > policy.max_loadavg:
                reasons.append(f"machine load: {key!r} above {policy.max_loadavg:g} ({shown})")
    sampled: list[tuple[str, tuple[Any, ...]]] = []
    if policy.sampled:
        summaries = list(samples) if samples is not None else [{} for _ in fingerprints]
        if len(summaries) != len(fingerprints):
            raise EvidenceError(f"check_drift: {len(summaries)} sample summaries for {len(fingerprints)} starts")
        for key, limit in sorted(policy.sampled.items()):
            values = tuple(summary.get(key) for summary in summaries)
            sampled.append((key, values))
            shown = ", ".join(f"{label}={value!r}" for label, value in zip(labels, values))
            if not any(_present(v) for v in values):
                _unrecorded(key, "sampled reading", "during any start", policy, absent, reasons)
                continue
            checked.append(key)
            for label, value in zip(labels, values):
                if not _present(value):
                    reasons.append(f"clock guard: sampled reading {key!r} missing during start {label!r} ({shown})")
                elif not _numeric(value) or not math.isfinite(value):
                    reasons.append(f"clock guard: sampled reading {key!r} is not a finite number during start "
                                   f"{label!r} ({shown})")
                elif value > limit:
                    reasons.append(f"machine busy: sampled {key} = {value:g} during start {label!r} crossed its "
                                   f"bound {limit:g}")
    waived = tuple((k, policy.waived[k]) for k in absent if k in policy.waived)
    return DriftReport(tuple(reasons), tuple(checked), tuple(absent), waived, tuple(sampled))
