"""The receipt checks' helpers (:class:`Checks`: each check names the field and the value) and the checks every
receipt version shares: finiteness, the outcome against the rule's verdict, the variant, the machine, the pins."""

from __future__ import annotations

import math
import re
from typing import Any, Iterator, Mapping

SHA256 = re.compile(r"^[0-9a-f]{64}$")
FINGERPRINT = re.compile(r"^[0-9a-f]{16}$")     # harness.fingerprint.hardware_fingerprint
RECIPE_BITS = {4: "q4", 8: "q8"}                # harness.recipes: policy_dtype by bits
SHOWN = 60                                      # characters of a bad value a message shows


def show(value: Any) -> str:
    """A value as a message shows it: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= SHOWN else text[:SHOWN - 3] + "..."


def child(where: str, key: str | int) -> str:
    """``lane.cells`` + ``short`` -> ``lane.cells.short``; list items as ``[i]`` (as :class:`harness.fields.Where`)."""
    if isinstance(key, int):
        return f"{where}[{key}]"
    return f"{where}.{key}" if where else str(key)


def non_finite(value: Any, where: str = "") -> Iterator[tuple[str, float]]:
    """(path, value) of every NaN or infinite number anywhere in ``value``, depth first in order (a loop, not
    recursion: a receipt nested as deep as the JSON reader allows is walked too)."""
    stack = [(where, value)]
    while stack:
        at, v = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            yield at or "(top level)", v
        elif isinstance(v, Mapping):
            stack.extend((child(at, str(k)), x) for k, x in reversed(list(v.items())))
        elif isinstance(v, (list, tuple)):
            stack.extend((child(at, i), x) for i, x in reversed(list(enumerate(v))))


def is_number(value: Any) -> bool:
    """A finite JSON number (a boolean is not one, though Python says so; a whole number of any size is)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class Checks:
    """The problems found so far, and the small checks that add to them (each returns whether the value passed)."""

    def __init__(self):
        self.out: list[str] = []

    def bad(self, where: str, problem: str) -> bool:
        self.out.append(f"{where}: {problem}")
        return False

    def number(self, where: str, value: Any, low: float | None = 0.0, high: float | None = None, *,
               null: bool = True) -> bool:
        """A finite number in ``low..high`` (None: unbounded), or null when ``null``; a non-finite one was
        already named by :func:`non_finite`."""
        if value is None and null:
            return True
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if not is_number(value):
            return self.bad(where, f"expected a finite number{' or null' if null else ''}, got {show(value)}")
        if (low is not None and value < low) or (high is not None and value > high):
            span = f"{low:g}..{high:g}" if low is not None and high is not None else f">= {low:g}" if low is not None \
                else f"<= {high:g}"
            return self.bad(where, f"expected a number {span}, got {show(value)}")
        return True

    def count(self, where: str, value: Any, low: int = 0, *, null: bool = False) -> bool:
        """A whole number of at least ``low`` (or null when ``null``)."""
        if value is None and null:
            return True
        if not is_count(value):
            return self.bad(where, f"expected a whole number{' or null' if null else ''}, got {show(value)}")
        if value < low:
            return self.bad(where, f"expected a count >= {low}, got {value}")
        return True

    def text(self, where: str, value: Any, *, null: bool = False) -> bool:
        if (value is None and null) or isinstance(value, str):
            return True
        return self.bad(where, f"expected a string{' or null' if null else ''}, got {show(value)}")

    def table(self, where: str, value: Any, *, null: bool = False) -> bool:
        if (value is None and null) or isinstance(value, Mapping):
            return True
        return self.bad(where, f"expected a table{' or null' if null else ''}, got {show(value)}")

    def names(self, where: str, value: Any) -> bool:
        """A list of strings."""
        if isinstance(value, list) and all(isinstance(x, str) for x in value):
            return True
        return self.bad(where, f"expected a list of names, got {show(value)}")

    def numbers(self, where: str, table: Any, low: float | None = 0.0, high: float | None = None) -> None:
        """Every value of a table a number in ``low..high`` or null."""
        if self.table(where, table, null=True) and table:
            for k, v in table.items():
                self.number(child(where, str(k)), v, low, high)


def verdict(c: Checks, v: Mapping[str, Any]) -> None:
    """The outcome against the rule's own verdict (harness.pytest_outcome.outcome): a rule that decided fail never
    passes or skips, and a test skipped before its body decided nothing."""
    outcome, decided = v.get("outcome"), v.get("decided")
    if decided is False and outcome in ("pass", "skip"):
        c.bad("verdict.outcome", f"the rule decided fail (verdict.decided false), got outcome {outcome!r}")
    if outcome == "skip" and decided is not None:
        c.bad("verdict.decided", f"a skipped test decided nothing (null), got {show(decided)}")


def variant(c: Checks, v: Mapping[str, Any]) -> None:
    """The variant's optional fields, and a recipe variant's recipe block (harness.recipes.Recipe.as_dict)."""
    for key in ("tier", "profile"):
        c.text(child("variant", key), v.get(key), null=True)
    if "browser" in v and not isinstance(v["browser"], bool):
        c.bad("variant.browser", f"expected true or false, got {show(v['browser'])}")
    recipe = v.get("recipe")
    if recipe is None or not c.table("variant.recipe", recipe):
        return
    if not isinstance(recipe.get("id"), str) or recipe.get("id") != v.get("dtype"):
        c.bad("variant.recipe.id", f"expected the variant's dtype {v.get('dtype')!r} (a recipe's id is its dtype "
                                   f"label), got {show(recipe.get('id'))}")
    bits, policy_dtype = recipe.get("bits"), recipe.get("policy_dtype")
    if policy_dtype not in RECIPE_BITS.values():
        c.bad("variant.recipe.policy_dtype", f"expected one of {', '.join(RECIPE_BITS.values())}, "
                                             f"got {show(policy_dtype)}")
    elif "bits" in recipe and RECIPE_BITS.get(bits) != policy_dtype:
        want = next(b for b, d in RECIPE_BITS.items() if d == policy_dtype)
        c.bad("variant.recipe.bits", f"expected {want} (policy_dtype {policy_dtype!r} is the {want}-bit dtype), "
                                     f"got {show(bits)}")
    if "block_size" in recipe:
        c.count("variant.recipe.block_size", recipe["block_size"], 1)


# harness.fingerprint.machine(): what it records of the machine, by kind
MACHINE_TEXT = ("cpu_model", "cpu_governor", "hostname", "os", "python", "machine", "isa_flags", "omp_num_threads",
                "omp_wait_policy", "gatehouse_threads")
MACHINE_COUNTS = (("logical_cpus", 1), ("affinity_cpus", 1), ("memory_total_bytes", 0))
MACHINE_FIGURES = (("loadavg_1m", 0.0), ("loadavg_5m", 0.0), ("loadavg_15m", 0.0), ("cpu_mhz", 0.0),
                   ("thermal_max_c", None))


def provenance(c: Checks, p: Mapping[str, Any]) -> None:
    """The machine the receipt was measured on: identity strings, counts that are counts, the fingerprint the
    report groups timings by (16 hex digits), loads that are not negative."""
    before = p.get("machine_before")
    for name, m in (("machine_before", before), ("machine_after", p.get("machine_after"))):
        if not isinstance(m, Mapping):
            continue
        where = child("provenance", name)
        for key in MACHINE_TEXT:
            c.text(child(where, key), m.get(key), null=True)
        for key, low in MACHINE_COUNTS:
            c.count(child(where, key), m.get(key), low, null=True)
        for key, low in MACHINE_FIGURES:
            c.number(child(where, key), m.get(key), low)
        if "fingerprint" in m and not (isinstance(m["fingerprint"], str) and FINGERPRINT.match(m["fingerprint"])):
            c.bad(child(where, "fingerprint"), f"expected 16 hex digits (harness.fingerprint), "
                                               f"got {show(m['fingerprint'])}")
    threads = p.get("threads")
    if threads is not None:
        c.count("provenance.threads", threads, 1)


def artifacts(c: Checks, pinned: list[Any]) -> None:
    """One file, one identity: a path pinned twice (under two roles) with two SHA-256s or sizes is two files."""
    seen: dict[str, tuple[int, Any, Any]] = {}
    for i, a in enumerate(pinned):
        if not isinstance(a, Mapping) or not isinstance(a.get("path"), str):
            continue
        first = seen.setdefault(a["path"], (i, a.get("sha256"), a.get("bytes")))
        if (first[1], first[2]) != (a.get("sha256"), a.get("bytes")):
            c.bad(f"artifacts[{i}]", f"{a['path']} is pinned as artifacts[{first[0]}] with SHA-256 "
                                     f"{str(first[1])[:12]} ({first[2]} bytes), got {str(a.get('sha256'))[:12]} "
                                     f"({a.get('bytes')} bytes)")
