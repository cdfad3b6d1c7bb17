"""Receipts: one JSON file per gate test, validated against a versioned schema and written atomically."""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
import time
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

from . import atomic, receipt_check
from .errors import ReceiptError
from .hashing import file_identity
from .rundir import RunDir
from .verdict import OUTCOMES, Measurement, Verdict

SCHEMA_VERSION = 2              # what this harness writes
READABLE_VERSIONS = (1, 2)      # what it reads: version 1 run directories stay reportable
SCHEMA_DIR = Path(__file__).with_name("schema")
SCHEMA_PATH = SCHEMA_DIR / f"receipt-v{SCHEMA_VERSION}.json"
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
# The pinned roles that name a graph: re-hashed when the test ends (:meth:`Receipt.recheck_graphs`).
GRAPH_ROLES = ("graph", "graph_data", "reference_graph")


@lru_cache(maxsize=4)
def schema(version: int = SCHEMA_VERSION) -> dict[str, Any]:
    return json.loads((SCHEMA_DIR / f"receipt-v{version}.json").read_text())


def validate(data: Any, source: str = "<receipt>") -> dict[str, Any]:
    """Validate a receipt against the schema, then for what it means (:func:`harness.receipt_check.problems`);
    the error names the source and the bad field (every one the semantic check found)."""
    import jsonschema
    from jsonschema.exceptions import best_match

    if not isinstance(data, dict):
        raise ReceiptError(f"{source}: a receipt is a JSON object, got {type(data).__name__}")
    version = data.get("schema_version")
    if isinstance(version, bool) or version not in READABLE_VERSIONS:   # true == 1 in Python, not in JSON
        raise ReceiptError(f"{source}: unknown receipt schema_version {version!r} (this harness reads "
                           f"{', '.join(map(str, READABLE_VERSIONS))})")
    infinite = receipt_check.infinite(data)   # first: the schema takes 1e999 (infinity) for a number
    if infinite:
        raise ReceiptError(f"{source}: invalid receipt at {receipt_check.describe(infinite)}")
    validator = jsonschema.Draft202012Validator(schema(version))
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:   # the first by path; inside a typed block (null or an object) the field at fault, not the block
        first = best_match(errors[:1])
        where = "/".join(str(p) for p in first.absolute_path) or "(top level)"
        raise ReceiptError(f"{source}: invalid receipt at {where}: {first.message}")
    if data["verdict"]["outcome"] == "pass" and data["verdict"]["reasons"]:
        raise ReceiptError(f"{source}: a passing receipt cannot carry failure reasons")
    found = receipt_check.problems(data)   # what the schema cannot say: finiteness, ranges, counts, consistency
    if found:
        raise ReceiptError(f"{source}: invalid receipt at {receipt_check.describe(found)}")
    return data


def load(path: Path | str) -> dict[str, Any]:
    """A receipt file, strictly read (UTF-8, no non-finite numbers) and validated; errors name the file."""
    from .jsonfile import load as load_json

    return validate(load_json(path, "receipt"), str(path))


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def _json_safe(value: Any, where: str) -> Any:
    try:
        return json.loads(json.dumps(value, allow_nan=False, sort_keys=True))
    except (TypeError, ValueError) as exc:
        raise ReceiptError(f"receipt field {where}: not JSON-safe ({exc})") from exc


class Receipt:
    """What one gate test records; the plugin fills provenance and the outcome and writes it.

    Gate tests call :meth:`set`, :meth:`pin`, :meth:`measure`, :meth:`decide` and
    :meth:`note`, and a timing test times inside :meth:`sampling`; they never write the file themselves.
    The plugin calls :meth:`recheck_graphs` when the test body ends.
    """

    def __init__(self, nodeid: str, gate: str, variant: dict[str, Any], evidence_dir: Path):
        self.nodeid = nodeid
        self.gate = gate
        self.variant = dict(variant)
        self.parameters: dict[str, Any] = {}
        self.policy: dict[str, Any] = {}
        self.seeds: dict[str, Any] = {}
        self.extra: dict[str, Any] = {}
        self.measurements: dict[str, dict[str, Any]] = {}
        self.artifacts: list[dict[str, Any]] = []
        self.verdict: Verdict | None = None
        self.evidence_dir = evidence_dir
        self.started_at = now_iso()
        self._t0 = time.monotonic()
        self.exclusive = False
        self.lock_wait_s: float | None = None
        self.level = "variant"
        self.lane: dict[str, Any] | None = None
        self.behavior: dict[str, Any] | None = None
        self.winrule: dict[str, Any] | None = None
        self.machine_during: dict[str, Any] | None = None
        self.graph_recheck: dict[str, Any] | None = None
        self.calibration: list[dict[str, Any]] | None = None
        self.ort_session: dict[str, Any] | None = None

    # -- what a gate test records -------------------------------------------------
    def set(self, *, variant: dict | None = None, parameters: dict | None = None,
            policy: dict | None = None, seeds: dict | None = None) -> None:
        """Record what the test ran with; the gate is the test's marker and never changes at run time."""
        if variant is not None:
            self.variant.update(_json_safe(variant, "variant"))
        if parameters is not None:
            self.parameters.update(_json_safe(parameters, "parameters"))
        if policy is not None:
            self.policy.update(_json_safe(policy, "policy"))
        if seeds is not None:
            self.seeds.update(_json_safe(seeds, "seeds"))

    def pin(self, path: Path | str, role: str) -> dict[str, Any]:
        """Pin the SHA-256 and size of an artifact this test measured."""
        identity = {"role": role, **file_identity(path)}
        self.artifacts = [a for a in self.artifacts if not (a["role"] == role and a["path"] == identity["path"])]
        self.artifacts.append(identity)
        return identity

    def pin_identity(self, role: str, path: str, sha256: str, size: int) -> None:
        """Pin an artifact whose hash the store has already verified (avoids hashing twice)."""
        self.artifacts = [a for a in self.artifacts if not (a["role"] == role and a["path"] == path)]
        self.artifacts.append({"role": role, "path": path, "sha256": sha256, "bytes": size})

    def measure(self, name: str, value: Any, unit: str, count: int | None = None) -> None:
        if not _NAME.match(name):
            raise ReceiptError(f"measurement name {name!r} must be snake_case")
        self.measurements[name] = Measurement(_finite_or_none(value), unit, count).as_dict()

    def decide(self, verdict: Verdict) -> Verdict:
        self.verdict = verdict
        for name, m in verdict.figures.items():
            self.measure(name, m.value, m.unit, m.count)
        return verdict

    def note(self, key: str, value: Any) -> None:
        """Free-form context for a reader (never read by the report: what it reads has a typed field)."""
        self.extra[key] = _json_safe(value, f"extra.{key}")

    # -- typed blocks (schema v2) ------------------------------------------------------
    def record_lane(self, name: str, cells: dict[str, dict[str, Any]], load: dict[str, Any] | None = None,
                    error: str | None = None, threads: int | None = None) -> None:
        """A throughput lane's per-cell summary, from the measuring loop's cell summaries.

        ``cells[name]`` holds the loop's summary (``decode_tok_s``, ``decode_tok_s_cv``,
        ``decode_tok_s_iqr``, ``prefill_ms_median``, ``prefill_ms_iqr``, ``repeats``, ``cpu_per_wall``,
        ``decode_tok_s_samples``) and optionally ``step`` and ``profile`` (the browser page's account of a
        decode step).  The per-repeat decode rates become ``decode_tokens_per_s_samples`` (what
        ``harness.compare`` ranks between two runs); a summary without them, or with a non-finite one,
        records none rather than a list that is not every repeat.
        """
        out = {}
        for cell, c in cells.items():
            entry = {"decode_tokens_per_s": c.get("decode_tok_s"), "decode_tokens_per_s_cv": c.get("decode_tok_s_cv"),
                     "decode_tokens_per_s_iqr": c.get("decode_tok_s_iqr"), "prefill_ms": c.get("prefill_ms_median"),
                     "prefill_ms_iqr": c.get("prefill_ms_iqr"), "repeats": int(c.get("repeats") or 0),
                     "cpu_per_wall": c.get("cpu_per_wall")}
            for key in ("step", "profile"):
                if c.get(key) is not None:
                    entry[key] = c[key]
            out[cell] = {k: _finite_or_none(v) if not isinstance(v, dict) else v for k, v in entry.items()}
            samples = _finite_samples(c.get("decode_tok_s_samples"))
            if samples is not None:
                out[cell]["decode_tokens_per_s_samples"] = samples
        load = load or {}
        if isinstance(load.get("session"), dict):   # the lane's runtime reported its session settings (the probe)
            self.record_session(load["session"])
        self.lane = _json_safe({"name": name, "load_ms": _finite_or_none(load.get("load_ms")),
                                "threads": threads if threads is not None else load.get("threads"),
                                "error": error, "cells": out}, "lane")

    @contextmanager
    def sampling(self, covers: str, interval_s: float = 0.5) -> Iterator[Any]:
        """``with receipt.sampling("what is timed"): <the timing>``: what the machine did meanwhile.

        A :class:`harness.sampler.Sampler` runs for the block's duration and its summary (steal, iowait,
        other processes' CPU share, run queue, clock; ``absent`` names what the machine does not expose)
        becomes the receipt's ``machine_during``, with ``covers`` saying what was timed.  It is recorded
        even when the timing raises.  One span per receipt: sample the whole timing in one block.
        """
        from .sampler import Sampler

        if self.machine_during is not None:
            raise ReceiptError(f"{self.nodeid}: machine_during is already recorded ({self.machine_during['covers']!r}); "
                               f"sample the whole timing in one block")
        sampler = Sampler(interval_s)
        try:
            with sampler:
                yield sampler
        finally:
            if sampler.summary is not None:
                self.record_machine_during(sampler.summary, covers)

    def record_machine_during(self, summary: dict[str, Any], covers: str) -> None:
        """A sampler summary (:func:`harness.sampler.summarize`) of the machine during this test's timing."""
        self.machine_during = _json_safe({**summary, "covers": covers}, "machine_during")

    def recheck_graphs(self, roles: tuple[str, ...] = GRAPH_ROLES) -> list[str]:
        """Re-hash every pinned graph (``roles``) now that the test has measured; the reasons naming each one
        whose SHA-256 is no longer the pinned one (empty when none changed), recorded as ``graph_recheck``.

        Each file is read once however many roles pin it; nothing is cached between tests: the point is to
        see the bytes the figures were measured on, so they are hashed again.
        """
        t0 = time.monotonic()
        now: dict[str, dict[str, Any] | None] = {}
        checked, changed = [], []
        for a in sorted(self.artifacts, key=lambda a: (a["role"], a["path"])):
            if a["role"] not in roles:
                continue
            if a["path"] not in now:
                try:
                    now[a["path"]] = file_identity(a["path"])
                except OSError:
                    now[a["path"]] = None
            after = now[a["path"]]
            checked.append({"role": a["role"], "path": a["path"]})
            if after is None or after["sha256"] != a["sha256"]:
                changed.append({"role": a["role"], "path": a["path"], "sha256_pinned": a["sha256"],
                                "sha256_after": after and after["sha256"], "bytes_pinned": a["bytes"],
                                "bytes_after": after and after["bytes"]})
        self.graph_recheck = {"roles": list(roles), "checked": checked, "changed": changed,
                              "duration_s": round(time.monotonic() - t0, 6)}
        return recheck_reasons(self.graph_recheck)

    def record_behavior(self, block: dict[str, Any]) -> None:
        self.behavior = _json_safe(block, "behavior")

    def record_calibration(self, conditions: list[dict[str, Any]]) -> None:
        """The behavior rule's measured conditions (:meth:`harness.behavior.calibration.Condition.as_dict`)."""
        self.calibration = _json_safe(conditions, "calibration")

    def record_winrule(self, block: dict[str, Any]) -> None:
        self.winrule = _json_safe(block, "winrule")

    def record_session(self, settings: dict[str, Any]) -> None:
        """The ONNX Runtime session settings the gate ran the graph with (:mod:`harness.ortsession`); a variant's
        gates must agree on them (a qualification blocker otherwise).  Recorded once: a second, different record
        in one test is an error (a test that ran two settings measured two things)."""
        safe = _json_safe(settings, "ort_session")
        if self.ort_session is not None and self.ort_session != safe:
            raise ReceiptError(f"{self.nodeid}: ort_session recorded twice with different settings: "
                               f"{self.ort_session} then {safe}")
        self.ort_session = safe

    # -- assembled by the plugin ---------------------------------------------------
    def to_dict(self, *, outcome: str, reasons: list[str], provenance: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
        if outcome not in OUTCOMES:
            raise ReceiptError(f"unknown outcome {outcome!r}")
        data = {
            "schema_version": SCHEMA_VERSION,
            "kind": "gatehouse.receipt",
            "nodeid": self.nodeid,
            "gate": self.gate,
            "level": self.level,
            "variant": self.variant,
            "parameters": self.parameters,
            "policy": self.policy,
            "seeds": self.seeds,
            "extra": self.extra,
            "lane": self.lane,
            "behavior": self.behavior,
            "winrule": self.winrule,
            "machine_during": self.machine_during,
            "graph_recheck": self.graph_recheck,
            **({"calibration": self.calibration} if self.calibration is not None else {}),
            **({"ort_session": self.ort_session} if self.ort_session is not None else {}),
            "verdict": {
                "outcome": outcome,
                "reasons": list(reasons),
                "decided": None if self.verdict is None else self.verdict.passed,
            },
            "measurements": self.measurements,
            "artifacts": sorted(self.artifacts, key=lambda a: (a["role"], a["path"])),
            "provenance": provenance,
            "timing": {
                "started_at": self.started_at,
                "finished_at": now_iso(),
                "duration_s": round(time.monotonic() - self._t0, 6),
                "exclusive": self.exclusive,
                "lock_wait_s": None if self.lock_wait_s is None else round(self.lock_wait_s, 6),
            },
            "run": run,
        }
        return _json_safe(data, "receipt")


def recheck_reasons(recheck: dict[str, Any] | None) -> list[str]:
    """Failure reasons from a ``graph_recheck`` block: each changed graph with its path and both hashes."""
    out = []
    for c in (recheck or {}).get("changed", []):
        if c["sha256_after"] is None:
            out.append(f"{c['role']} {c['path']} is gone after measuring (pinned SHA-256 {c['sha256_pinned']}): "
                       f"the figures describe no graph on disk")
        else:
            out.append(f"{c['role']} {c['path']} changed during the test: SHA-256 {c['sha256_pinned']} when pinned, "
                       f"{c['sha256_after']} after measuring ({c['bytes_pinned']} -> {c['bytes_after']} bytes); "
                       f"the figures do not describe one graph")
    return out


def _finite_samples(values: Any) -> list[float] | None:
    """Per-repeat figures as plain floats, or None when absent, empty, or any one is not a finite number."""
    if values is None or isinstance(values, (str, bytes, dict)):
        return None
    out = []
    for v in values:
        v = _finite_or_none(v)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return None
        out.append(float(v))
    return out or None


def _finite_or_none(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return _finite_or_none(value.item())
    return value


def write(run, data: dict[str, Any]) -> Path:
    """Validate, then atomically replace this node's receipt; the one it replaces is kept.

    ``run`` is the :class:`~harness.rundir.RunDir` (or a run's ``receipts/`` folder): it says where the
    receipt and the superseded copy go.
    """
    import os

    run = run if isinstance(run, RunDir) else RunDir.of_receipts(run)
    validate(data, f"receipt for {data.get('nodeid')}")
    path = run.receipt(data["nodeid"])
    if path.exists():
        target = run.superseded_copy(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        # A hard link keeps the old bytes under a new name before the rename replaces them.
        try:
            os.link(path, target)
        except OSError:
            atomic.write_bytes(target, path.read_bytes())
    atomic.write_json(path, data)
    return path
