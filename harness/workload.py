"""The fixed throughput workload shared by every lane (native probe, Python onnxruntime, ORT-GenAI,
llama.cpp, onnxruntime-web, transformers.js): the same prompt token ids, token counts and repeats.

Prompts are the first N token ids of the held-out corpus under the model's own tokenizer, so every
lane decodes the identical ids; the workload's SHA-256 covers the ids and the counts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .errors import CampaignError
from .fields import knob
from .hashing import sha256_bytes

DEFAULTS: dict[str, Any] = {
    "prompt_tokens": {"short": 40, "long": 400},
    "new_tokens": 32,        # greedy, ignoring EOS
    "warmup": 1,
    "repeats": 5,            # at least
    "max_repeats": 15,       # bound on the extra repeats taken when the variation is high
    "cv_limit": 0.05,        # coefficient of variation of per-repeat decode tok/s that triggers more repeats
    "threads": 2,
    "model_max_repeats": {},  # model id -> its own bound on the extra repeats (at least repeats)
}


@dataclass(frozen=True)
class Cell:
    name: str
    prompt_ids: tuple[int, ...]

    @property
    def sha256(self) -> str:
        return sha256_bytes(",".join(map(str, self.prompt_ids)).encode())


@dataclass(frozen=True)
class Workload:
    cells: tuple[Cell, ...]
    new_tokens: int
    warmup: int
    repeats: int
    max_repeats: int
    cv_limit: float
    threads: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def sha256(self) -> str:
        return sha256_bytes(repr(self.describe(with_ids=True)).encode())

    def describe(self, with_ids: bool = False) -> dict[str, Any]:
        d = {"cells": [{"name": c.name, "prompt_tokens": len(c.prompt_ids), "prompt_sha256": c.sha256,
                        **({"prompt_ids": list(c.prompt_ids)} if with_ids else {})} for c in self.cells],
             "new_tokens": self.new_tokens, "ignore_eos": True, "mode": "greedy", "warmup": self.warmup,
             "repeats": self.repeats, "max_repeats": self.max_repeats, "cv_limit": self.cv_limit,
             "threads": self.threads}
        return d

    def cell(self, name: str) -> Cell:
        for c in self.cells:
            if c.name == name:
                return c
        raise KeyError(name)


@dataclass(frozen=True)
class ThroughputPolicy:
    """``[policy.throughput]``: the workload every throughput lane shares, checked when the campaign loads."""

    prompt_tokens: tuple[tuple[str, int], ...] = tuple(DEFAULTS["prompt_tokens"].items())
    new_tokens: int = DEFAULTS["new_tokens"]
    warmup: int = DEFAULTS["warmup"]
    repeats: int = DEFAULTS["repeats"]
    max_repeats: int = DEFAULTS["max_repeats"]
    cv_limit: float = DEFAULTS["cv_limit"]
    threads: int = DEFAULTS["threads"]
    # A model's own bound on the extra repeats: the CI model's decode runs in milliseconds, its CV stays far above
    # any limit, and every lane took all 15 repeats (docs/measurements.md).
    model_max_repeats: dict[str, int] = knob(default_factory=dict, refers="model")

    def max_repeats_of(self, model_id: str | None) -> int:
        return self.model_max_repeats.get(model_id, self.max_repeats)

    @classmethod
    def parse(cls, raw: Any, where) -> "ThroughputPolicy":
        from . import fields

        if raw is None:
            return cls()
        fields.table(where, raw, set(DEFAULTS))
        out: dict[str, Any] = {}
        if "prompt_tokens" in raw:
            pw = where.child("prompt_tokens")
            out["prompt_tokens"] = tuple((name, fields.integer(pw.child(name), n, minimum=1))
                                         for name, n in fields.table(pw, raw["prompt_tokens"]).items())
            if not out["prompt_tokens"]:
                raise pw.fail("expected at least one cell, e.g. { short = 40, long = 400 }")
        for key in ("new_tokens", "warmup", "repeats", "max_repeats", "threads"):
            if key in raw:
                out[key] = fields.integer(where.child(key), raw[key], minimum=0 if key == "warmup" else 1)
        if "cv_limit" in raw:
            out["cv_limit"] = fields.number(where.child("cv_limit"), raw["cv_limit"])
        if "model_max_repeats" in raw:
            mw = where.child("model_max_repeats")
            out["model_max_repeats"] = {m: fields.integer(mw.child(m), n, minimum=1)
                                        for m, n in fields.table(mw, raw["model_max_repeats"]).items()}
        policy = cls(**out)
        if policy.max_repeats < policy.repeats:
            raise where.child("max_repeats").fail(f"{policy.max_repeats} is below repeats ({policy.repeats})")
        for m, n in policy.model_max_repeats.items():
            if n < policy.repeats:
                raise where.child("model_max_repeats").child(m).fail(f"{n} is below repeats ({policy.repeats})")
        return policy

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "prompt_tokens": dict(self.prompt_tokens)}


def build(heldout_ids: list[int], policy: ThroughputPolicy | None = None, source: str = "policy.throughput",
          model_id: str | None = None) -> Workload:
    """The workload from the held-out token ids and the campaign's parsed `[policy.throughput]` (for ``model_id``:
    its own ``model_max_repeats``)."""
    p = policy or ThroughputPolicy()
    cells = []
    for name, n in p.prompt_tokens:
        if n > len(heldout_ids):
            raise CampaignError(f"{source}.prompt_tokens.{name}: {n} tokens requested, the held-out corpus has "
                                f"{len(heldout_ids)}")
        cells.append(Cell(name, tuple(int(t) for t in heldout_ids[:n])))
    return Workload(tuple(cells), p.new_tokens, p.warmup, p.repeats, p.max_repeats_of(model_id), float(p.cv_limit),
                    p.threads)
