"""Which streaming cases may run: held-out cases only against a release-candidate record pinned by SHA-256.

The held-out cases (voices the model never trained on) are the final evaluation of one release candidate.
Run them while a model is still being changed and they become one more dev set, so they are refused unless
the campaign's ``[policy.streaming]`` names a release-candidate record (``release_candidate_record``, a JSON
object: what the candidate is, whatever its owner records) together with the record's SHA-256
(``release_candidate_record_sha256``), *and* pytest is given ``--streaming-heldout``.  The default campaign
pins no record, so it runs the dev cases only and its report says so.

The record is checked when the campaign loads (a wrong SHA-256 or a record that is not a non-empty JSON
object stops the campaign, naming file, field and value) and again just before a held-out case runs (a
record changed since the load is refused).  Its contents are not interpreted: the record is an identity,
its canonical JSON's SHA-256 the identity's name whatever the file's whitespace.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from harness import fields, jsonfile
from harness.errors import ArtifactError, ReceiptError
from harness.fields import Where

RECORD = "release_candidate_record"
RECORD_SHA = "release_candidate_record_sha256"
KEYS = (RECORD, RECORD_SHA)
FLAG = "--streaming-heldout"


@dataclass(frozen=True)
class ReleaseCandidate:
    """A verified release-candidate record: its file, the pinned SHA-256 of its bytes, and the SHA-256 of
    its canonical JSON (sorted keys, no whitespace), which names the record whatever its formatting."""

    path: str
    sha256: str
    canonical_sha256: str

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "sha256": self.sha256, "canonical_sha256": self.canonical_sha256}


class RecordProblem(Exception):
    """Why a record's bytes are refused; ``field`` is the policy key at fault."""

    def __init__(self, field: str, problem: str):
        super().__init__(problem)
        self.field = field
        self.problem = problem


def examine(data: bytes, path: str, pinned_sha256: str) -> ReleaseCandidate:
    """The record's identity from its bytes, or :class:`RecordProblem`: a SHA-256 other than the pinned
    one, or bytes that are not a non-empty JSON object (not UTF-8, not JSON, NaN literals, a list...)."""
    actual = hashlib.sha256(data).hexdigest()
    if actual != pinned_sha256:
        raise RecordProblem(RECORD_SHA, f"{path} has SHA-256 {actual}, the policy pins {pinned_sha256!r}")
    try:
        record = jsonfile.loads(data, path)
    except ReceiptError as e:
        raise RecordProblem(RECORD, f"{e} (a release-candidate record is a non-empty JSON object)") from None
    if not isinstance(record, dict) or not record:
        raise RecordProblem(RECORD, f"{path}: expected a non-empty JSON object, got {_shape(record)}")
    canonical = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return ReleaseCandidate(path, pinned_sha256, hashlib.sha256(canonical.encode("utf-8")).hexdigest())


def _shape(value: Any) -> str:
    if isinstance(value, dict):
        return "an empty object {}"
    return f"a JSON {type(value).__name__} {json.dumps(value)[:60]}"


def _read(path: Path, where: Where) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise where.fail(f"cannot read {path}: {e.strerror or e}") from None


def parse(raw: dict, where: Where) -> ReleaseCandidate | None:
    """``[policy.streaming]``'s two release-candidate keys: both or neither; a relative path is relative to the
    campaign file.  The record is read and examined here, when the campaign loads."""
    path_value, sha_value = raw.get(RECORD), raw.get(RECORD_SHA)
    if path_value is None and sha_value is None:
        return None
    for key, other in ((RECORD, RECORD_SHA), (RECORD_SHA, RECORD)):
        if raw.get(key) is None:
            raise where.child(key).fail(f"missing: {other} = {raw[other]!r} is given, and a release-candidate "
                                        f"record is pinned by its path and its SHA-256 together")
    text = fields.text(where.child(RECORD), path_value)
    sha = fields.sha256(where.child(RECORD_SHA), sha_value)
    path = Path(text)
    if not path.is_absolute():
        path = Path(where.path).parent / path
    path = path.resolve()
    try:
        return examine(_read(path, where.child(RECORD)), str(path), sha)
    except RecordProblem as p:
        raise where.child(p.field).fail(p.problem) from None


def reverify(candidate: ReleaseCandidate) -> ReleaseCandidate:
    """The record read again just before a held-out case runs: refused if it changed since the campaign loaded."""
    path = Path(candidate.path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ArtifactError(f"{path}: release-candidate record unreadable before the held-out case: "
                            f"{e.strerror or e}") from None
    try:
        again = examine(data, candidate.path, candidate.sha256)
    except RecordProblem as p:
        raise ArtifactError(f"release-candidate record changed since the campaign loaded: {p.problem}") from None
    if again != candidate:
        raise ArtifactError(f"{path}: release-candidate record changed since the campaign loaded "
                            f"(canonical SHA-256 {again.canonical_sha256}, loaded {candidate.canonical_sha256})")
    return again


@dataclass(frozen=True)
class CaseDecision:
    """Whether one streaming case runs: ``run``, ``skip`` (not asked for: the reason goes in the receipt) or
    ``refuse`` (asked for without what it needs: an error)."""

    action: Literal["run", "skip", "refuse"]
    reason: str


def decide_case(case: str, role: str, final_evaluation: bool, candidate: ReleaseCandidate | None) -> CaseDecision:
    """Pure: dev cases always run (screening); a held-out case runs only with ``--streaming-heldout`` *and* a
    pinned release-candidate record."""
    if role != "heldout":
        return CaseDecision("run", f"dev case {case}: screening, a voice the model trained on")
    if candidate is None and final_evaluation:
        return CaseDecision("refuse", f"held-out case {case} refused: {FLAG} was given but [policy.streaming] "
                                      f"{RECORD} is not set; held-out cases run only against a release-candidate "
                                      f"record pinned by {RECORD} and {RECORD_SHA}")
    if candidate is None:
        return CaseDecision("skip", f"held-out case {case} not run: dev cases only, no release-candidate record "
                                    f"pinned ([policy.streaming] {RECORD} and {RECORD_SHA} are not set)")
    if not final_evaluation:
        return CaseDecision("skip", f"held-out case {case} not run: release candidate {candidate.path} is pinned "
                                    f"but {FLAG} was not given (the final evaluation is asked for explicitly)")
    return CaseDecision("run", f"held-out case {case}: final evaluation of release candidate {candidate.path} "
                               f"(SHA-256 {candidate.sha256})")
