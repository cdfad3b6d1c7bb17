"""Behavior rates and the comparisons on them: seed 000's margin rule and paired inference against a published
reference.

Rates are evidence only when valid: finite counts, 0 <= numerator <= denominator, denominator > 0,
value = numerator / denominator.  A missing or zero denominator is never a score.  The comparison
is refused (each reason listed) when the suite SHA-256, the sampling contract or a denominator
differ.  Metrics that must not fall pass when candidate >= reference - margin; metrics that must not
rise (invalid-output counters) pass when candidate <= reference + margin.  This is a conservative
finite-suite comparison, not a global quality guarantee.

A published reference (``[policy.behavior.published.<model>]``: the report pinned by SHA-256 and the
published graph's SHA-256) is paired inference (:func:`published_inference`): the report must be
complete ONNX evidence that measured the pinned graph; threads, the generation config (seed and seed
strategy, sampler, temperature, top-k, top-p, end-of-turn ids, modes, device, every case's
max_new_tokens) and the repetition penalty must equal the candidate's, each difference a named
reason; the rates are then compared with zero margin.  Its record (:func:`published_record`, kind
``published-paired-inference``) never claims that the published model was trained on the same corpus.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import EvidenceError
from ..verdict import Measurement, Verdict


def require_rate(report: dict[str, Any], name: str, label: str = "report") -> tuple[float, int]:
    counts = report.get("rate_counts", {}).get(name)
    value = report.get("rates", {}).get(name)
    if not isinstance(counts, dict):
        raise EvidenceError(f"{label}: {name}: missing numerator/denominator")
    num, den = counts.get("numerator"), counts.get("denominator")
    for what, v in (("numerator", num), ("denominator", den)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise EvidenceError(f"{label}: {name}: {what} {v!r} is not an integer count")
    if den <= 0:
        raise EvidenceError(f"{label}: {name}: denominator {den} is not positive; a zero denominator is not a score")
    if not 0 <= num <= den:
        raise EvidenceError(f"{label}: {name}: numerator {num} is outside 0..{den}")
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or not math.isclose(value, num / den, abs_tol=1e-9)):
        raise EvidenceError(f"{label}: {name}: rate {value!r} is not {num}/{den}")
    return float(value), den


def _complete_and_same_suite(reference: dict[str, Any], candidate: dict[str, Any]) -> list[str]:
    reasons = []
    for label, rep in (("reference", reference), ("candidate", candidate)):
        if rep.get("status") != "complete":
            reasons.append(f"{label} behavior report is not complete (status {rep.get('status')!r})")
    if not reference.get("suite_sha256") or reference.get("suite_sha256") != candidate.get("suite_sha256"):
        reasons.append(f"different or missing scenario suite SHA-256 (reference {str(reference.get('suite_sha256'))[:12]}, "
                       f"candidate {str(candidate.get('suite_sha256'))[:12]})")
    return reasons


def comparable(reference: dict[str, Any], candidate: dict[str, Any]) -> list[str]:
    """Reasons the two reports cannot be compared (empty when they can)."""
    reasons = _complete_and_same_suite(reference, candidate)
    rc, cc = reference.get("contract"), candidate.get("contract")
    if not rc or rc != cc:
        diff = sorted(k for k in set(rc or {}) | set(cc or {}) if (rc or {}).get(k) != (cc or {}).get(k))
        reasons.append(f"different or missing sampling contracts (fields differ: {', '.join(diff) or 'all'})")
    return reasons


@dataclass(frozen=True)
class MarginRule:
    """Seed 000's margin rule: each ``minimum`` metric's candidate rate at least the reference's minus its margin
    (``margins`` per metric, else ``margin``), each ``maximum`` metric's at most the reference's plus it."""

    margin: float = 0.0
    margins: Mapping[str, float] = field(default_factory=dict)
    minimum: tuple[str, ...] = ()
    maximum: tuple[str, ...] = ()


def _check_margin(policy: MarginRule, published: bool) -> float:
    margin = policy.margin
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not math.isfinite(margin) or not 0 <= margin <= 1:
        raise EvidenceError(f"behavior margin must be a finite number in [0, 1], got {margin!r}")
    if published and margin != 0:
        raise EvidenceError("a published reference is compared with zero margin")
    return margin


def _rates(reference: dict[str, Any], candidate: dict[str, Any], policy: MarginRule, margin: float,
           per_metric: dict[str, float]) -> tuple[list[str], dict[str, Measurement]]:
    """The metric-by-metric comparison: reasons and figures."""
    reasons: list[str] = []
    figures: dict[str, Measurement] = {}
    for direction in ("minimum", "maximum"):
        for name in getattr(policy, direction):
            try:
                base, base_n = require_rate(reference, name, "reference")
                value, n = require_rate(candidate, name, "candidate")
            except EvidenceError as exc:
                reasons.append(str(exc))
                continue
            m = per_metric.get(name, margin)
            key = name.replace(".", "_")
            figures[key + "_rate"] = Measurement(value, "fraction", n)
            figures[key + "_reference_rate"] = Measurement(base, "fraction", base_n)
            if n != base_n:
                reasons.append(f"{name}: unequal denominators (candidate {n}, reference {base_n})")
            elif direction == "minimum" and value < base - m - 1e-12:
                reasons.append(f"{name}: {value:.4f} is below reference {base:.4f} - margin {m:g}")
            elif direction == "maximum" and value > base + m + 1e-12:
                reasons.append(f"{name}: {value:.4f} is above reference {base:.4f} + margin {m:g}")
    if not policy.minimum and not policy.maximum:
        reasons.append("the behavior policy names no metric to compare")
    return reasons, figures


def decide(reference: dict[str, Any], candidate: dict[str, Any], policy: MarginRule,
           published: bool = False) -> Verdict:
    """The parity verdict by the margin rule.

    ``published=True`` compares against a pinned published reference: the margin must be zero.
    """
    margin = _check_margin(policy, published)
    per_metric = {} if published else dict(policy.margins)
    reasons, figures = _rates(reference, candidate, policy, margin, per_metric)
    return Verdict.from_checks([*comparable(reference, candidate), *reasons], figures)


PAIRED_KIND = "published-paired-inference"
# The contract fields that make up the generation config (threads and the repetition penalty are
# named on their own); a contract field outside all three is still compared, as "sampling contract".
GENERATION = ("seed", "seed_strategy", "sampler", "temperature", "top_k", "top_p", "eos_ids", "modes", "device")
_KINDS = {"onnx": "an ONNX graph", "torch": "a PyTorch model", "gguf": "a GGUF file"}


def _table(report: dict[str, Any], key: str) -> dict[str, Any]:
    value = report.get(key)
    return value if isinstance(value, dict) else {}


def _is_sha256(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def paired(reference: dict[str, Any], candidate: dict[str, Any], graph_sha256: str) -> list[str]:
    """Why ``reference`` is not paired inference of the published graph ``graph_sha256`` with ``candidate``
    (empty when it is): the reference measured that ONNX graph, both are ONNX evidence, and threads, the
    generation config and the repetition penalty are recorded and equal."""
    if not _is_sha256(graph_sha256):
        raise EvidenceError(f"the published graph SHA-256 must be pinned as 64 lower-case hex digits, "
                            f"got {graph_sha256!r}")
    reasons = []
    for label, rep in (("reference", reference), ("candidate", candidate)):
        kind = _table(rep, "subject").get("kind")
        if kind != "onnx":
            reasons.append(f"{label} is not ONNX evidence: it measured "
                           f"{_KINDS.get(kind, 'an unknown subject')} (subject kind {kind!r})")
    measured = _table(reference, "subject").get("graph_sha256")
    if measured is None:
        reasons.append(f"reference records no graph SHA-256, so it did not measure the pinned published graph "
                       f"{graph_sha256[:12]}")
    elif measured != graph_sha256:
        reasons.append(f"reference measured graph {str(measured)[:12]}, not the pinned published graph "
                       f"{graph_sha256[:12]}")
    rc, cc = _table(reference, "contract"), _table(candidate, "contract")

    def pair(name: str, what: str, r: Any, c: Any) -> None:
        """``r`` and ``c`` recorded (not None) and equal, or named reasons."""
        missing = [label for label, v in (("reference", r), ("candidate", c)) if v is None]
        reasons.extend(f"{label} records no {what}" for label in missing)
        if not missing and r != c:
            reasons.append(f"{name}: reference {r!r}, candidate {c!r}")

    pair("threads differ", "thread count", rc.get("threads"), cc.get("threads"))
    for key in GENERATION:
        pair(f"generation config {key} differs", f"generation setting {key}", rc.get(key), cc.get(key))
    rt, ct = reference.get("max_new_tokens"), candidate.get("max_new_tokens")
    if isinstance(rt, dict) and isinstance(ct, dict):
        cases = sorted(k for k in set(rt) | set(ct) if rt.get(k) != ct.get(k))
        if cases:
            reasons.append(f"generation config max_new_tokens differs in {len(cases)} case(s), first {cases[0]!r}: "
                           f"reference {rt.get(cases[0])!r}, candidate {ct.get(cases[0])!r}")
    else:
        pair("generation config max_new_tokens differs", "per-case max_new_tokens", rt, ct)
    pair("repetition penalty differs", "repetition penalty", rc.get("repetition_penalty"), cc.get("repetition_penalty"))
    named = {"threads", "repetition_penalty", *GENERATION}
    for key in sorted((set(rc) | set(cc)) - named):
        if rc.get(key) != cc.get(key):
            reasons.append(f"sampling contract {key} differs: reference {rc.get(key)!r}, candidate {cc.get(key)!r}")
    return reasons


def published_inference(reference: dict[str, Any], candidate: dict[str, Any], policy: MarginRule,
                        graph_sha256: str) -> Verdict:
    """The candidate against a published reference: :func:`paired`, the same complete suite, then every
    metric at zero margin (``policy`` as for :func:`decide`; a nonzero margin is refused)."""
    margin = _check_margin(policy, published=True)
    reasons, figures = _rates(reference, candidate, policy, margin, {})
    return Verdict.from_checks([*paired(reference, candidate, graph_sha256),
                                *_complete_and_same_suite(reference, candidate), *reasons], figures)


def published_record(verdict: Verdict, graph_sha256: str) -> dict[str, Any]:
    """The ``published-paired-inference`` record of a gate verdict: the published comparison's part of it
    (the reasons :func:`combine` prefixed), read from the one verdict rather than decided again.  Paired
    inference on the same suite says nothing about the training data: the record never claims the same
    training corpus."""
    reasons = [r[len(PUBLISHED):] for r in verdict.reasons if r.startswith(PUBLISHED)]
    return {"kind": PAIRED_KIND, "published_graph_sha256": graph_sha256, "same_training_corpus_claim": False,
            "passed": not reasons, "reasons": reasons}


def with_agreement(report: dict[str, Any], counts: dict[str, dict[str, int]]) -> dict[str, Any]:
    """A copy of ``report`` with agreement rates (computed against a reference's transcripts) added."""
    import copy

    out = copy.deepcopy(report)
    for name, c in counts.items():
        out.setdefault("rate_counts", {})[name] = dict(c)
        out.setdefault("rates", {})[name] = c["numerator"] / c["denominator"] if c["denominator"] else None
    return out


PUBLISHED = "published reference: "


def combine(main: Verdict, published: Verdict) -> Verdict:
    """Both comparisons must pass; the published one's reasons and figures are prefixed."""
    return Verdict.from_checks([*main.reasons, *(PUBLISHED + r for r in published.reasons)],
                               {**main.figures, **{f"published_{k}": v for k, v in published.figures.items()}})
