"""The rolling-trim streaming protocol gate: the native engine fed at the real pace, every event checked.

Its limits are the suite tier's (``harness/streaming/profiles.toml``); a campaign's
``[policy.streaming]`` may tighten or loosen any of them, checked when the campaign loads.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from .. import fields
from ..fields import Where
from ..verdict import Verdict
from .spec import GateSpec, Policy

_LIMITS = ("max_rtf", "max_work_p95_token_periods", "max_feeder_lateness_p99_seconds", "max_rss_growth_kib", "max_wer")


@dataclass(frozen=True)
class StreamingPolicy(Policy):
    """Overrides of the suite tier's limits; None keeps the tier's."""

    max_rtf: float | None = None
    max_work_p95_token_periods: float | None = None
    max_feeder_lateness_p99_seconds: float | None = None
    max_rss_growth_kib: int | None = None
    max_wer: float | None = None

    @classmethod
    def parse(cls, raw, where: Where) -> "StreamingPolicy":
        if raw is None:
            return cls()
        fields.table(where, raw, _LIMITS)
        return cls(**{k: (fields.integer(where.child(k), v, 0) if k == "max_rss_growth_kib"
                          else fields.number(where.child(k), v)) for k, v in raw.items()})

    def over(self, tier_policy):
        """The tier's limits with this campaign's overrides."""
        changes = {k: getattr(self, k) for k in _LIMITS if getattr(self, k) is not None}
        return dataclasses.replace(tier_policy, **changes)


def decide(evidence: Mapping[str, Any], policy: StreamingPolicy) -> Verdict:
    """``evidence``: the captured stream (``stream``: :class:`harness.streaming.gate.Evidence`), its
    ``profile``, the model ``identity``, the token ``table`` and the suite tier's ``tier_policy``."""
    from ..streaming import gate

    return gate.decide(evidence["stream"], evidence["profile"], evidence["identity"], evidence["table"],
                       policy.over(evidence["tier_policy"]))


SPEC = GateSpec(name="streaming", level="run", applies_to=(), policy=StreamingPolicy, decide=decide,
                describe="the rolling-trim streaming protocol: every event, clock, trim and batch; token ids equal "
                         "PyTorch's; RTF, lateness, memory, WER")
