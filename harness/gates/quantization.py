"""The quantization-loss rule: held-out loss, perplexity and KL divergence of q8/q4 against fp32."""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from dataclasses import dataclass

from .. import fields
from ..domain import PEERS
from ..errors import EvidenceError
from ..fields import Where
from ..stats import mean_and_stderr, percentile, proportion_stderr, relative_increase
from ..verdict import Measurement, Verdict
from .spec import GateSpec, Policy

MIN_TOKENS = 100  # llama.cpp prints no statistics below 100 tokens; neither do we decide on them


def summarize(evidence: Mapping[str, Any]) -> dict[str, Any]:
    """Loss, perplexity, llama.cpp-style KLD statistics and top-1 agreement from per-token evidence."""
    try:
        fp = np.asarray(evidence["nll_reference"], dtype=np.float64)
        q = np.asarray(evidence["nll_candidate"], dtype=np.float64)
        kld = np.asarray(evidence["kld"], dtype=np.float64)
        same = np.asarray(evidence["top1_same"], dtype=bool)
    except KeyError as exc:
        raise EvidenceError(f"quantization evidence lacks {exc.args[0]!r}") from None
    n = int(fp.size)
    if not (q.size == kld.size == same.size == n):
        raise EvidenceError(f"quantization evidence arrays differ in length: {fp.size}, {q.size}, {kld.size}, {same.size}")
    if n == 0:
        raise EvidenceError("quantization evidence scored no tokens")
    fp_loss, q_loss = float(fp.mean()), float(q.mean())
    ln_ratio, ln_ratio_err = mean_and_stderr(q - fp)  # paired: the covariance is in the difference
    hits = int(same.sum())
    return {
        "tokens": n, "fp_loss": fp_loss, "quant_loss": q_loss,
        "relative_increase": relative_increase(fp_loss, q_loss) if fp_loss > 0 else math.nan,
        "fp_perplexity": math.exp(fp_loss), "quant_perplexity": math.exp(q_loss),
        "perplexity_ratio": math.exp(q_loss - fp_loss), "ln_perplexity_ratio": ln_ratio,
        "ln_perplexity_ratio_stderr": ln_ratio_err,
        "kld_mean": float(kld.mean()), "kld_median": percentile(kld, 50), "kld_p99": percentile(kld, 99),
        "kld_max": float(kld.max()), "kld_min": float(kld.min()),
        "top1_agreement": hits / n, "top1_agreement_stderr": proportion_stderr(hits, n), "top1_hits": hits,
    }


def decide(summary: Mapping[str, Any], max_relative_increase: float) -> Verdict:
    """Pass when the relative loss increase is within policy and every figure is sound.

    Soundness is checked, not assumed: at least :data:`MIN_TOKENS` scored tokens,
    finite positive fp loss, ``relative_increase == (q - fp) / fp`` to 1e-9,
    KLD >= 0 and top-1 agreement within [0, 1].
    """
    reasons = []
    n = summary.get("tokens", 0)
    fp, q, rel = summary.get("fp_loss"), summary.get("quant_loss"), summary.get("relative_increase")
    if not isinstance(n, int) or n < MIN_TOKENS:
        reasons.append(f"only {n!r} tokens scored; at least {MIN_TOKENS} are needed")
    finite = all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in (fp, q, rel))
    if not finite or fp <= 0:
        reasons.append(f"losses are not finite and positive (fp {fp!r}, quantized {q!r}, relative {rel!r})")
    else:
        if not math.isclose(rel, (q - fp) / fp, rel_tol=0, abs_tol=1e-9):
            reasons.append(f"relative increase {rel!r} is not (q - fp) / fp = {(q - fp) / fp!r}")
        if rel > max_relative_increase:
            reasons.append(f"relative loss increase {rel:.4%} exceeds the policy's {max_relative_increase:.2%} "
                           f"(fp {fp:.4f} -> quantized {q:.4f} nats/token over {n} tokens)")
    if not (summary.get("kld_min", 0) >= 0 and summary.get("kld_mean", 0) >= 0):
        reasons.append(f"negative KL divergence (mean {summary.get('kld_mean')!r}, min {summary.get('kld_min')!r})")
    top1 = summary.get("top1_agreement")
    if not isinstance(top1, (int, float)) or not 0 <= top1 <= 1:
        reasons.append(f"top-1 agreement {top1!r} is outside [0, 1]")
    units = {"tokens": "count", "fp_loss": "nats_per_token", "quant_loss": "nats_per_token",
             "relative_increase": "ratio", "fp_perplexity": "perplexity", "quant_perplexity": "perplexity",
             "perplexity_ratio": "ratio", "ln_perplexity_ratio": "nats_per_token",
             "ln_perplexity_ratio_stderr": "nats_per_token", "kld_mean": "nats", "kld_median": "nats",
             "kld_p99": "nats", "kld_max": "nats", "kld_min": "nats", "top1_agreement": "fraction",
             "top1_agreement_stderr": "fraction", "top1_hits": "count"}
    figures = {k: Measurement(summary[k], units[k], n if k not in ("tokens", "top1_hits") else None)
               for k in units if k in summary}
    return Verdict.from_checks(reasons, figures)


@dataclass(frozen=True)
class QuantizationPolicy(Policy):
    """``[policy.quantization]``: tokens scored and the largest relative loss increase per quantized dtype."""

    REQUIRED = True
    max_tokens: int = 4096
    max_relative_increase: dict[str, float] = None  # type: ignore[assignment]

    @classmethod
    def parse(cls, raw, where: Where) -> "QuantizationPolicy":
        if raw is None:
            raise where.fail("missing table")
        fields.table(where, raw, {"max_tokens", "max_relative_increase"}, required=("max_tokens", "max_relative_increase"))
        limits = {}
        lw = where.child("max_relative_increase")
        for dtype, value in fields.table(lw, raw["max_relative_increase"]).items():
            if dtype not in ("q8", "q4"):
                raise lw.child(dtype).fail("only q8 and q4 are quantized dtypes")
            limits[dtype] = fields.number(lw.child(dtype), value)
        return cls(max_tokens=fields.integer(where.child("max_tokens"), raw["max_tokens"], minimum=MIN_TOKENS),
                   max_relative_increase=limits)

    def limit_for(self, dtype: str) -> float:
        key = PEERS[dtype].policy_dtype if dtype in PEERS else dtype
        if key not in self.max_relative_increase:
            raise EvidenceError(f"policy.quantization.max_relative_increase has no entry for {key!r}")
        return self.max_relative_increase[key]


def decide_gate(evidence: Mapping[str, Any], policy: QuantizationPolicy) -> Verdict:
    """The gate's decision on per-token evidence: summarized, then :func:`decide` at the dtype's limit."""
    return decide(summarize(evidence), policy.limit_for(evidence["policy_dtype"]))


SPEC = GateSpec(
    name="quantization", level="variant", applies_to=("q8", "q4", "recipe", "ort-genai-int4", "ort-genai-kquant"), policy=QuantizationPolicy,
    decide=decide_gate,
    describe="held-out loss, perplexity and llama.cpp-style KL divergence of q8/q4 against the fp32 graph")
