"""toy_ratio: the worked example of docs/adding-a-gate.md, a whole gate in one module.

It judges the ratio of two sizes a test records (a part against its whole) against ``[policy.toy_ratio]``'s
``max_ratio``.  The suite's own test (``suites/harness/test_adding_a_gate.py``) drops this module into a gate
package and a pytest project, with ``test_toy_ratio.py`` beside it, and runs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from harness import fmt
from harness.fields import knob
from harness.gates.spec import Evidence, Figure, GateSpec, Policy
from harness.verdict import Measurement, Verdict


@dataclass(frozen=True)
class RatioPolicy(Policy):
    """``[policy.toy_ratio]``: the largest part/whole ratio that passes."""

    max_ratio: float = knob(0.5, hi=1.0)


@dataclass(frozen=True)
class RatioEvidence(Evidence):
    """What the test recorded."""

    part_bytes: int
    whole_bytes: int


def decide(evidence: RatioEvidence, policy: RatioPolicy) -> Verdict:
    ratio = evidence.part_bytes / evidence.whole_bytes
    reasons = [] if ratio <= policy.max_ratio else [
        f"part/whole is {ratio:.3f} ({evidence.part_bytes} of {evidence.whole_bytes} bytes), above max_ratio "
        f"{policy.max_ratio}"]
    return Verdict.from_checks(reasons, {"ratio": Measurement(ratio, "ratio")})


def section(views: Sequence) -> list[fmt.Section]:
    """One row per variant this gate judged."""
    mine = [v for v in views if v.gate == SPEC.name]
    if not mine:
        return []
    return [fmt.Section("Toy ratio", (fmt.table_of(["model", "dtype", "ratio", "outcome"], "llrl",
                                                   ([v.model, v.dtype, fmt.num(v.value("ratio")), v.outcome]
                                                    for v in mine)),))]


SPEC = GateSpec(name="toy_ratio", level="variant", applies_to=("fp32", "q4"), policy=RatioPolicy,
                evidence=RatioEvidence, decide=decide, section=section, required=False,
                figures=(Figure("ratio", "ratio", "lower"),),
                describe="a part's size against its whole's, at most max_ratio (the worked example of a gate)")
