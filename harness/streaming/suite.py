"""Loads the streaming gate's versioned data file: profiles, cases and tiers with their policies."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness.errors import CampaignError
from harness.streaming.profile import StreamProfile

DATA = Path(__file__).with_name("profiles.toml")
SCHEMA_VERSION = 1
ROLES = ("dev", "heldout")
POLICY_KEYS = ("max_rtf", "max_work_p95_token_periods", "max_feeder_lateness_p99_seconds", "max_rss_growth_kib",
               "max_wer")


@dataclass(frozen=True)
class CaseSpec:
    """A synthesized input: dev cases are one utterance; heldout cases join ``utterances`` of held-out voices."""

    name: str
    role: str
    seed: int
    words: int = 0
    utterances: int = 0
    lead_seconds: float = 0.3
    end_remainder_samples: int | None = None
    must_trim: bool = False


@dataclass(frozen=True)
class Policy:
    max_rtf: float
    max_work_p95_token_periods: float
    max_feeder_lateness_p99_seconds: float
    max_rss_growth_kib: int
    max_wer: float


@dataclass(frozen=True)
class Tier:
    name: str
    model: str
    profiles: tuple[str, ...]
    cases: tuple[str, ...]
    policy: Policy


@dataclass(frozen=True)
class Suite:
    profiles: dict[str, StreamProfile]
    cases: dict[str, CaseSpec]
    tiers: dict[str, Tier]


def load(path: Path = DATA) -> Suite:
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise CampaignError(f"{path}: cannot read streaming suite: {e}") from None
    if data.get("schema_version") != SCHEMA_VERSION:
        raise CampaignError(f"{path}: schema_version {data.get('schema_version')!r}, expected {SCHEMA_VERSION}")
    profiles = {n: StreamProfile.from_mapping(n, p, str(path)) for n, p in data.get("profiles", {}).items()}
    cases = {}
    for name, c in data.get("cases", {}).items():
        try:
            spec = CaseSpec(name=name, **c)
        except TypeError as e:
            raise CampaignError(f"{path}: case {name}: {e}") from None
        if spec.role not in ROLES:
            raise CampaignError(f"{path}: case {name} role {spec.role!r} is not one of {ROLES}")
        if (spec.words > 0) == (spec.utterances > 0):
            raise CampaignError(f"{path}: case {name} needs exactly one of words or utterances")
        cases[name] = spec
    tiers = {}
    for name, t in data.get("tiers", {}).items():
        policy = t.get("policy", {})
        missing = [k for k in POLICY_KEYS if k not in policy]
        if missing or set(policy) - set(POLICY_KEYS):
            raise CampaignError(f"{path}: tier {name} policy keys {sorted(policy)}, expected {list(POLICY_KEYS)}")
        for ref, pool in (("profiles", profiles), ("cases", cases)):
            unknown = [x for x in t.get(ref, []) if x not in pool]
            if unknown:
                raise CampaignError(f"{path}: tier {name} names unknown {ref} {unknown}")
        tiers[name] = Tier(name, t["model"], tuple(t["profiles"]), tuple(t["cases"]), Policy(**policy))
    return Suite(profiles, cases, tiers)
