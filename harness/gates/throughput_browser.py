"""The browser throughput gate: onnxruntime-web and transformers.js in headless Chromium (wasm, threads, SIMD)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .. import fields
from ..browser import rule
from ..domain import DTYPES
from ..fields import Where
from ..verdict import Verdict
from .spec import GateSpec, Policy


@dataclass(frozen=True)
class ThreadProbe:
    cell: str = "short"
    threads: int = 1
    repeats: int = 3


@dataclass(frozen=True)
class BrowserPolicy(Policy):
    """``[policy.throughput_browser]``: where parity is required, and the one-thread probe of thread scaling."""

    require_parity_dtypes: tuple[str, ...] = ("fp32",)
    thread_probe: ThreadProbe = ThreadProbe()

    @classmethod
    def parse(cls, raw, where: Where) -> "BrowserPolicy":
        if raw is None:
            return cls()
        fields.table(where, raw, {"require_parity_dtypes", "thread_probe"})
        out: dict[str, Any] = {}
        if "require_parity_dtypes" in raw:
            out["require_parity_dtypes"] = fields.strings(where.child("require_parity_dtypes"),
                                                          raw["require_parity_dtypes"], DTYPES, nonempty=False)
        if "thread_probe" in raw:
            tw = where.child("thread_probe")
            t = fields.table(tw, raw["thread_probe"], {"cell", "threads", "repeats"})
            d = ThreadProbe()
            out["thread_probe"] = ThreadProbe(fields.text(tw.child("cell"), t.get("cell", d.cell)),
                                              fields.integer(tw.child("threads"), t.get("threads", d.threads), 1),
                                              fields.integer(tw.child("repeats"), t.get("repeats", d.repeats), 1))
        return cls(**out)


def decide(evidence: Mapping[str, Any], policy: BrowserPolicy) -> Verdict:
    w = evidence["workload"]
    return rule.decide(dict(evidence), {"threads": w["threads"], "repeats": w["repeats"],
                                        "require_parity_dtypes": policy.require_parity_dtypes})


SPEC = GateSpec(
    name="throughput_browser", level="variant", applies_to=("fp32", "q8", "q4"), policy=BrowserPolicy,
    decide=decide,
    describe="decode tokens/s in headless Chromium, cross-origin isolated, on as many wasm threads as asked")
