"""The rolling-trim streaming protocol gate: the native engine fed at the real pace, every event checked.

Its limits are the suite tier's (``harness/streaming/profiles.toml``); a campaign's
``[policy.streaming]`` may tighten or loosen any of them, checked when the campaign loads.  It may also pin
a release-candidate record (``release_candidate_record`` and ``release_candidate_record_sha256``), without
which the held-out cases do not run (``harness/streaming/release.py``); the default campaign pins none.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from .. import fields, fmt
from ..fields import Where, knob, parse_fields
from ..streaming import release, scope
from ..verdict import Verdict
from .spec import Evidence, GateSpec, Policy

if TYPE_CHECKING:
    from ..view import ReceiptView

_LIMITS = ("max_rtf", "max_work_p95_token_periods", "max_feeder_lateness_p99_seconds", "max_rss_growth_kib", "max_wer")


@dataclass(frozen=True)
class StreamingPolicy(Policy):
    """Overrides of the suite tier's limits (None keeps the tier's), and the release candidate the held-out
    cases evaluate (None: they do not run)."""

    max_rtf: float | None = None
    max_work_p95_token_periods: float | None = None
    max_feeder_lateness_p99_seconds: float | None = None
    max_rss_growth_kib: int | None = knob(None, lo=0)
    max_wer: float | None = None
    # read from two campaign keys together (release.KEYS: the record's path and its SHA-256)
    release_candidate: release.ReleaseCandidate | None = knob(None, internal=True)

    @classmethod
    def parse(cls, raw, where: Where) -> "StreamingPolicy":
        if raw is None:
            return cls()
        fields.table(where, raw, _LIMITS + release.KEYS)
        limits = parse_fields(cls, {k: v for k, v in raw.items() if k not in release.KEYS}, where)
        return dataclasses.replace(limits, release_candidate=release.parse(raw, where))

    def over(self, tier_policy):
        """The tier's limits with this campaign's overrides."""
        changes = {k: getattr(self, k) for k in _LIMITS if getattr(self, k) is not None}
        return dataclasses.replace(tier_policy, **changes)


@dataclass(frozen=True)
class StreamingEvidence(Evidence):
    """One case fed to the engine at the real pace (``suites/test_streaming.py``)."""

    stream: Any          # the captured stream: harness.streaming.gate.Evidence
    profile: Any         # its streaming profile (harness.streaming.suite)
    identity: Any        # the model's identity
    table: Any           # the token table
    tier_policy: Any     # the suite tier's limits, before this campaign's overrides


def decide(evidence: StreamingEvidence, policy: StreamingPolicy) -> Verdict:
    from ..streaming import gate

    return gate.decide(evidence.stream, evidence.profile, evidence.identity, evidence.table,
                       policy.over(evidence.tier_policy))


# the protocol table's columns: measurement, heading, significant digits
STREAM_COLUMNS = (("rtf", "RTF", ""), ("work_seconds_per_window_p95", "work p95", "s"),
                  ("token_period_seconds", "token period", "s"), ("feeder_lateness_seconds_p99", "feeder late p99", "s"),
                  ("feeder_lateness_seconds_max", "late max", "s"), ("rss_growth_kib", "RSS growth", "KiB"),
                  ("peak_rss_kib", "peak RSS", "KiB"), ("wer", "WER", ""), ("rolling_trims", "trims", ""))


def _selection(v: ReceiptView) -> dict[str, Any]:
    """What the held-out line needs from one receipt: the case's role, the outcome, the release candidate."""
    return {"role": (v.data.get("parameters") or {}).get("role"), "outcome": v.outcome,
            "release_candidate": (v.policy or {}).get("release_candidate")}


def section(views: Sequence[ReceiptView]) -> list[fmt.Section]:
    """One row per profile and case of the streaming protocol that ran; skipped ones listed below with their
    reasons; whether held-out cases ran; what the results are not."""
    mine = [v for v in views if v.gate == SPEC.name]
    if not mine:
        return []
    ran = [v for v in mine if v.outcome != "skip"]
    skipped = [v for v in mine if v.outcome == "skip"]
    blocks: list[str | fmt.Table] = [scope.heldout_status(_selection(v) for v in mine), ""]
    if ran:
        blocks.append(fmt.table_of(["test", "outcome", *(c[1] for c in STREAM_COLUMNS)], "ll" + "r" * len(STREAM_COLUMNS),
                                   ([v.nodeid.split("[", 1)[-1].rstrip("]"), v.outcome,
                                     *(fmt.num(v.value(k), unit) for k, _, unit in STREAM_COLUMNS)] for v in ran)))
    if skipped:
        blocks += ["", *(f"{line} — {'; '.join(v.reasons)}" for line, v in zip(fmt.receipt_lines(skipped), skipped))]
    blocks += ["", *scope.disclaimer_lines()]
    return [fmt.Section("Streaming protocol (one row per profile and case)", tuple(blocks))]


SPEC = GateSpec(name="streaming", level="run", applies_to=(), policy=StreamingPolicy, evidence=StreamingEvidence,
                decide=decide, section=section,
                describe="the rolling-trim streaming protocol: every event, clock, trim and batch; token ids equal "
                         "PyTorch's; RTF, lateness, memory, WER")
