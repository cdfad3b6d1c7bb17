"""Start records: what one start of an A/B/A measurement measured, in a form any lane can produce."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ..errors import EvidenceError

CONTROL, CANDIDATE = "control", "candidate"
ROLES = (CONTROL, CANDIDATE)
# The order of an A/B/A window: control, candidate, control again.
ORDER = (CONTROL, CANDIDATE, CONTROL)
Scalar = str | int | float | bool | None


class StartRecordError(EvidenceError):
    """A start record is malformed (wrong types or shape), so it cannot even be judged."""


@dataclass(frozen=True)
class WaveInput:
    """What one request wave was fed: the identity of its inputs, never the inputs themselves.

    ``prompt_sha256``, ``family`` and (under a matched seed policy) ``seed`` must
    be identical at the same position in all three starts; ``salt`` (a cache
    salt, or its hash) must never repeat anywhere.  ``None`` means the lane has
    no such thing; it must then be ``None`` in every start.
    """

    prompt_sha256: str
    family: str
    seed: int | None = None
    salt: str | None = None

    def __post_init__(self):
        for name in ("prompt_sha256", "family"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise StartRecordError(f"wave input: {name} must be a non-empty string, got {value!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise StartRecordError(f"wave input: seed must be an integer or None, got {self.seed!r}")
        if self.salt is not None and (not isinstance(self.salt, str) or not self.salt):
            raise StartRecordError(f"wave input: salt must be a non-empty string or None, got {self.salt!r}")

    def as_dict(self) -> dict[str, Any]:
        return {"prompt_sha256": self.prompt_sha256, "family": self.family, "seed": self.seed, "salt": self.salt}

    @classmethod
    def from_dict(cls, data: Any) -> "WaveInput":
        if not isinstance(data, dict):
            raise StartRecordError(f"a wave input must be an object, got {data!r}")
        try:
            return cls(data["prompt_sha256"], data["family"], data.get("seed"), data.get("salt"))
        except KeyError as missing:
            raise StartRecordError(f"wave input lacks field {missing.args[0]!r}: {data!r}") from None


def _first_non_number(values: Sequence[Any]) -> int | None:
    """The index of the first value that is not a number, or ``None``.

    Non-finite values are numbers here: the rule judges them (INCONCLUSIVE with the reason), so that a
    lane that measured a NaN can still record the start; only a non-number is malformed.
    """
    for i, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return i
    return None


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _is_list(value: Any) -> bool:
    """A list, a tuple or any other sequence that is not a string."""
    if isinstance(value, (list, tuple)):   # the usual cases, without the abstract base class's slower check
        return True
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def _first_non_token_ids(waves: Sequence[Any]) -> int | None:
    """The index of the first wave whose greedy ids are not a list of ints, or ``None``."""
    for w, ids in enumerate(waves):
        if not _is_list(ids):
            return w
        for token in ids:
            if isinstance(token, bool) or not isinstance(token, int):
                return w
    return None


@dataclass(frozen=True)
class Start:
    """One start (one process launch) of a window, as a lane measured it.

    ``values[cell][metric]`` holds one value per repeat, in repeat order;
    ``inputs[cell]`` one :class:`WaveInput` per wave, in wave order (repeat r
    pools waves ``r * waves_per_repeat`` onwards); ``outputs[cell]`` the greedy
    token ids each wave generated, in the same order (the correctness
    prerequisite compares them across the starts; empty when the lane kept
    none, which the rule refuses).  ``samples`` is the flat summary of the
    machine sampled *during* the start (:func:`harness.sampler.summarize`:
    steal, iowait, foreign CPU, run queue, core clocks).  ``config`` names what ran
    (both control starts must name the same); ``fingerprint`` is the flat
    machine dict read at this start; ``complete`` is the lane's own word that
    the start ran to its end (``incomplete_reason`` says why not).

    The mappings are read-only views, so a start cannot change after it is
    recorded.  The record is only checked for shape here.  Whether its content can be
    decided on (complete, finite, matched) is the rule's judgement, reported as
    INCONCLUSIVE with reasons rather than raised.
    """

    label: str
    role: str
    registration: str
    config: str
    values: Mapping[str, Mapping[str, tuple[float, ...]]]
    inputs: Mapping[str, tuple[WaveInput, ...]] = field(default_factory=dict)
    fingerprint: Mapping[str, Scalar] = field(default_factory=dict)
    complete: bool = True
    incomplete_reason: str | None = None
    commit: str | None = None
    outputs: Mapping[str, tuple[tuple[int, ...], ...]] = field(default_factory=dict)
    samples: Mapping[str, Scalar] = field(default_factory=dict)

    def __post_init__(self):
        for name in ("label", "registration", "config"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise StartRecordError(f"start: {name} must be a non-empty string, got {value!r}")
        if self.role not in ROLES:
            raise StartRecordError(f"start {self.label!r}: role must be one of {ROLES}, got {self.role!r}")
        if not isinstance(self.complete, bool):
            raise StartRecordError(f"start {self.label!r}: complete must be a bool, got {self.complete!r}")
        if not isinstance(self.values, Mapping):
            raise StartRecordError(f"start {self.label!r}: values must map cell -> metric -> values")
        values: dict[str, dict[str, tuple[float, ...]]] = {}
        for cell, metrics in self.values.items():
            if not isinstance(cell, str) or not isinstance(metrics, Mapping):
                raise StartRecordError(f"start {self.label!r}: values[{cell!r}] must map metric -> values")
            values[cell] = {}
            for metric, series in metrics.items():
                if not isinstance(metric, str) or not _is_list(series):
                    raise StartRecordError(
                        f"start {self.label!r}: values[{cell!r}][{metric!r}] must be a list of numbers, got {series!r}")
                numbers = tuple(series)
                bad = _first_non_number(numbers)
                if bad is not None:
                    raise StartRecordError(f"start {self.label!r}: values[{cell!r}][{metric!r}][{bad}] must be a "
                                           f"number, got {numbers[bad]!r}")
                values[cell][metric] = tuple(map(float, numbers))
        object.__setattr__(self, "values", MappingProxyType({c: MappingProxyType(m) for c, m in values.items()}))
        if not isinstance(self.inputs, Mapping):
            raise StartRecordError(f"start {self.label!r}: inputs must map cell -> wave inputs")
        inputs: dict[str, tuple[WaveInput, ...]] = {}
        for cell, waves in self.inputs.items():
            if not isinstance(cell, str) or not _is_list(waves):
                raise StartRecordError(f"start {self.label!r}: inputs[{cell!r}] must be a list of wave inputs")
            inputs[cell] = tuple([w if isinstance(w, WaveInput) else WaveInput.from_dict(w) for w in waves])
        object.__setattr__(self, "inputs", MappingProxyType(inputs))
        if not isinstance(self.fingerprint, Mapping):
            raise StartRecordError(f"start {self.label!r}: fingerprint must be a flat mapping of scalars")
        for key, value in self.fingerprint.items():
            if not isinstance(key, str) or not _is_scalar(value):
                raise StartRecordError(f"start {self.label!r}: fingerprint[{key!r}] must be a scalar, got {value!r}")
        object.__setattr__(self, "fingerprint", MappingProxyType(dict(self.fingerprint)))
        if not isinstance(self.outputs, Mapping):
            raise StartRecordError(f"start {self.label!r}: outputs must map cell -> per-wave token ids")
        outputs: dict[str, tuple[tuple[int, ...], ...]] = {}
        for cell, waves in self.outputs.items():
            if not isinstance(cell, str) or not _is_list(waves):
                raise StartRecordError(f"start {self.label!r}: outputs[{cell!r}] must be a list of token id lists")
            bad = _first_non_token_ids(waves)
            if bad is not None:
                raise StartRecordError(f"start {self.label!r}: outputs[{cell!r}][{bad}] must be a list of token ids")
            outputs[cell] = tuple(map(tuple, waves))
        object.__setattr__(self, "outputs", MappingProxyType(outputs))
        if not isinstance(self.samples, Mapping):
            raise StartRecordError(f"start {self.label!r}: samples must be a flat mapping of scalars")
        for key, value in self.samples.items():
            if not isinstance(key, str) or not _is_scalar(value):
                raise StartRecordError(f"start {self.label!r}: samples[{key!r}] must be a scalar, got {value!r}")
        object.__setattr__(self, "samples", MappingProxyType(dict(self.samples)))
        for name in ("incomplete_reason", "commit"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise StartRecordError(f"start {self.label!r}: {name} must be a string or None, got {value!r}")

    def series(self, cell: str, metric: str) -> tuple[float, ...] | None:
        return self.values.get(cell, {}).get(metric)

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe (non-finite values become ``null``; :meth:`from_dict` reads them back as NaN)."""
        return {
            "label": self.label, "role": self.role, "registration": self.registration, "config": self.config,
            "complete": self.complete, "incomplete_reason": self.incomplete_reason, "commit": self.commit,
            "values": {c: {m: [v if math.isfinite(v) else None for v in s] for m, s in sorted(ms.items())}
                       for c, ms in sorted(self.values.items())},
            "inputs": {c: [w.as_dict() for w in ws] for c, ws in sorted(self.inputs.items())},
            "fingerprint": dict(sorted(self.fingerprint.items())),
            "outputs": {c: [list(ids) for ids in ws] for c, ws in sorted(self.outputs.items())},
            "samples": dict(sorted(self.samples.items())),
        }

    @classmethod
    def from_dict(cls, data: Any) -> "Start":
        if not isinstance(data, dict):
            raise StartRecordError(f"a start record must be an object, got {type(data).__name__}")
        try:
            values = {c: {m: [math.nan if v is None else v for v in s] for m, s in ms.items()}
                      for c, ms in data["values"].items()}
            return cls(label=data["label"], role=data["role"], registration=data["registration"],
                       config=data["config"], values=values, inputs=data.get("inputs", {}),
                       fingerprint=data.get("fingerprint", {}), complete=data.get("complete", False),
                       incomplete_reason=data.get("incomplete_reason"), commit=data.get("commit"),
                       outputs=data.get("outputs", {}), samples=data.get("samples", {}))
        except KeyError as missing:
            raise StartRecordError(f"start record {data.get('label')!r} lacks field {missing.args[0]!r}") from None
        except (AttributeError, TypeError) as bad:
            raise StartRecordError(f"start record {data.get('label')!r} is malformed: {bad}") from None
