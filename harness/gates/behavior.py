"""Gate 3, behavior parity: a candidate's scenario rates against a reference's, with a margin.

Rates are evidence only when valid: finite counts, 0 <= numerator <= denominator, denominator > 0,
value = numerator / denominator.  A missing or zero denominator is never a score.  The comparison
is refused (each reason listed) when the suite SHA-256, the sampling contract or a denominator
differ.  Metrics that must not fall pass when candidate >= reference - margin; metrics that must not
rise (invalid-output counters) pass when candidate <= reference + margin.  A pinned published
reference is compared with zero margin.  This is a conservative finite-suite comparison, not a
global quality guarantee.
"""

from __future__ import annotations

import math
from typing import Any

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


def comparable(reference: dict[str, Any], candidate: dict[str, Any]) -> list[str]:
    """Reasons the two reports cannot be compared (empty when they can)."""
    reasons = []
    for label, rep in (("reference", reference), ("candidate", candidate)):
        if rep.get("status") != "complete":
            reasons.append(f"{label} behavior report is not complete (status {rep.get('status')!r})")
    if not reference.get("suite_sha256") or reference.get("suite_sha256") != candidate.get("suite_sha256"):
        reasons.append(f"different or missing scenario suite SHA-256 (reference {str(reference.get('suite_sha256'))[:12]}, "
                       f"candidate {str(candidate.get('suite_sha256'))[:12]})")
    rc, cc = reference.get("contract"), candidate.get("contract")
    if not rc or rc != cc:
        diff = sorted(k for k in set(rc or {}) | set(cc or {}) if (rc or {}).get(k) != (cc or {}).get(k))
        reasons.append(f"different or missing sampling contracts (fields differ: {', '.join(diff) or 'all'})")
    return reasons


def decide(reference: dict[str, Any], candidate: dict[str, Any], policy: dict[str, Any],
           published: bool = False) -> Verdict:
    """The parity verdict; ``policy`` has ``margin``, optional ``margins`` per metric, ``minimum`` and ``maximum``.

    ``published=True`` compares against a pinned published reference: the margin must be zero.
    """
    margin = policy.get("margin", 0)
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not math.isfinite(margin) or not 0 <= margin <= 1:
        raise EvidenceError(f"behavior margin must be a finite number in [0, 1], got {margin!r}")
    if published and margin != 0:
        raise EvidenceError("a published reference is compared with zero margin")
    per_metric = {} if published else dict(policy.get("margins", {}))
    reasons = comparable(reference, candidate)
    figures: dict[str, Measurement] = {}
    for direction in ("minimum", "maximum"):
        for name in policy.get(direction, []):
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
    if not policy.get("minimum") and not policy.get("maximum"):
        reasons.append("the behavior policy names no metric to compare")
    return Verdict.from_checks(reasons, figures)


def with_agreement(report: dict[str, Any], counts: dict[str, dict[str, int]]) -> dict[str, Any]:
    """A copy of ``report`` with agreement rates (computed against a reference's transcripts) added."""
    import copy

    out = copy.deepcopy(report)
    for name, c in counts.items():
        out.setdefault("rate_counts", {})[name] = dict(c)
        out.setdefault("rates", {})[name] = c["numerator"] / c["denominator"] if c["denominator"] else None
    return out


def combine(main: Verdict, published: Verdict) -> Verdict:
    """Both comparisons must pass; the published one's reasons and figures are prefixed."""
    return Verdict.from_checks([*main.reasons, *(f"published reference: {r}" for r in published.reasons)],
                               {**main.figures, **{f"published_{k}": v for k, v in published.figures.items()}})
