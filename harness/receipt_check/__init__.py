"""What a receipt means, checked after its JSON Schema: the one semantic validator every reader goes through.

The schema says which keys a receipt has and roughly their types; it cannot say that a count is a whole number no
larger than its denominator, that a figure is finite (JSON ``1e999`` parses to infinity), that a rate does not rest
on zero cases, or that the blocks agree with each other and with the verdict.  :func:`problems` is pure over a
receipt that passed the schema and lists each such problem as ``field.path: what was expected, got what`` (empty
when there is none); :func:`harness.receipt.validate` raises them as one error naming the file, so the report
(:mod:`harness.report.collect`, and compare through it), the merge and the remote controller list such a receipt
as invalid and never count it, and the plugin never writes one.

Every receipt (schema v1 and v2, :mod:`.base`): every number anywhere in it is finite; the outcome agrees with the
rule's own verdict (a rule that decided fail never gives ``pass`` or ``skip``, a skipped test decided nothing); a
recipe variant's block is a recipe (``policy_dtype`` by its bits, its id the dtype); the machine's fingerprint is
16 hex digits, its counts whole and its figures not negative; one file is pinned with one SHA-256 and size.

The typed v2 blocks (:mod:`.blocks`): a lane's figures are not negative, its per-repeat samples one per repeat with
the pooled rate between the slowest and the fastest, and no figure rests on zero repeats; a behavior block's rate
counts are k of n (k <= n), every category counted, the quality index in 0..100, null when a category has no case,
else 100 x the mean of the category rates; a paired metric's lost, gained and rights fit its n (n > 0), its drop is
(lost - gained) / n inside its interval, its p-values are p-values with Holm's never below the raw one; a failing
metric or an INVALID window never sits beside a rule that passed; a calibration condition's flips likewise, and
``failed`` says whether any judged metric is failing; the sampled machine's fractions lie in 0..1 and a mean never
exceeds its peak; a re-hashed graph that changed is one that was checked, really changed, and its test did not pass.

This package imports nothing else of Gatehouse's: it sits at the bottom, below ``receipt`` and the report.
"""

from __future__ import annotations

from typing import Any, Mapping

from . import base, blocks
from .base import Checks, show

MAX_LISTED = 6   # problems one error message lists (the rest are counted)


def infinite(data: Any) -> list[str]:
    """Every NaN or infinite number in ``data``, each naming its field (JSON has neither, but ``1e999`` parses to
    infinity and a remote worker's receipt is read by Python's own reader, which takes ``NaN``)."""
    return [f"{where}: expected a finite number, got {show(value)}" for where, value in base.non_finite(data)]


def problems(data: Mapping[str, Any]) -> list[str]:
    """Every problem of a schema-valid receipt the schema cannot see, each naming its field (empty when none)."""
    c = Checks()
    c.out += infinite(data)
    base.verdict(c, data.get("verdict") or {})
    base.variant(c, data.get("variant") or {})
    base.provenance(c, data.get("provenance") or {})
    base.artifacts(c, data.get("artifacts") or [])
    reference = (data.get("parameters") or {}).get("reference")
    c.text("parameters.reference", reference, null=True)
    if data.get("schema_version") == 2:
        blocks.check(c, data)
    return c.out


def describe(found: list[str]) -> str:
    """Problems as one message: the first :data:`MAX_LISTED`, then how many more."""
    more = len(found) - MAX_LISTED
    return "; ".join(found[:MAX_LISTED]) + (f"; and {more} more" if more > 0 else "")
