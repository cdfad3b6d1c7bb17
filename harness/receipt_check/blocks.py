"""The typed blocks of a v2 receipt, checked for what they mean: ``lane`` (harness.receipt.Receipt.record_lane),
``behavior`` and its ``paired`` record (harness.gates.behavior.paired_record), ``calibration``
(harness.behavior.calibration.Condition.as_dict), ``winrule`` (harness.winrule.probe_window), ``machine_during``
(harness.sampler.summarize) and ``graph_recheck`` (Receipt.recheck_graphs)."""

from __future__ import annotations

import math
from typing import Any, Mapping

from .base import SHA256, Checks, child, is_count, is_number, show

CELL_FIGURES = ("decode_tokens_per_s", "decode_tokens_per_s_cv", "decode_tokens_per_s_iqr", "prefill_ms",
                "prefill_ms_iqr", "cpu_per_wall")
PROFILE_FIGURES = ("kernel_ms", "model_run_ms", "outside_model_run_ms")
FRACTIONS = ("steal_fraction", "steal_fraction_peak", "iowait_fraction", "foreign_cpu_share", "cpu_mhz_spread")
SAMPLER_FIGURES = ("run_queue_mean", "run_queue_peak", "cpu_mhz_min", "cpu_mhz_max")
WINDOW_VERDICTS = ("WIN", "LOSS", "TIE", "INCONCLUSIVE", "INVALID")   # harness.winrule.statistics, .decision
FLIP_COUNTS = ("lost", "gained", "reference_ok", "candidate_ok")
DECISIONS = ("pass", "fail")
TOLERANCE = 1e-6


def check(c: Checks, data: Mapping[str, Any]) -> None:
    decided = (data.get("verdict") or {}).get("decided")
    if data.get("lane") is not None:
        lane(c, data["lane"])
    if data.get("behavior") is not None:
        behavior(c, data["behavior"], decided)
    if data.get("calibration") is not None:
        calibration(c, data["calibration"])
    if data.get("winrule") is not None:
        winrule(c, data["winrule"], decided)
    if data.get("machine_during") is not None:
        machine(c, "machine_during", data["machine_during"])
    if data.get("graph_recheck") is not None:
        graph_recheck(c, data["graph_recheck"], (data.get("verdict") or {}).get("outcome"))


# -- a throughput lane ---------------------------------------------------------------------------------
def lane(c: Checks, block: Any) -> None:
    """Figures that are not negative, a thread count that counts, each cell's samples one per repeat, and no
    figure measured over zero repeats."""
    if not c.table("lane", block):
        return
    c.number("lane.load_ms", block.get("load_ms"))
    c.count("lane.threads", block.get("threads"), 1, null=True)
    cells = block.get("cells")
    if not c.table("lane.cells", cells):
        return
    for name, cell in cells.items():
        where = child("lane.cells", str(name))
        if c.table(where, cell):
            _cell(c, where, cell)


def _pooled(c: Checks, where: str, cell: Mapping[str, Any], low: float, high: float) -> None:
    """harness.throughput.stats.summarize: the pooled rate (every token over every second) is a time-weighted mean
    of the per-repeat rates, so it lies between the slowest and the fastest, and their IQR within their range."""
    rate, iqr = cell.get("decode_tokens_per_s"), cell.get("decode_tokens_per_s_iqr")
    slack = TOLERANCE * max(1.0, abs(high))
    if is_number(rate) and not low - slack <= rate <= high + slack:
        c.bad(child(where, "decode_tokens_per_s"), f"expected the pooled rate of the repeats, between the slowest "
                                                   f"{low:g} and the fastest {high:g}, got {show(rate)}")
    if is_number(iqr) and iqr > high - low + slack:
        c.bad(child(where, "decode_tokens_per_s_iqr"), f"expected at most the repeats' range {high - low:g}, "
                                                       f"got {show(iqr)}")


def _cell(c: Checks, where: str, cell: Mapping[str, Any]) -> None:
    for key in CELL_FIGURES:
        c.number(child(where, key), cell.get(key))
    repeats = cell.get("repeats")
    if not c.count(child(where, "repeats"), repeats):
        return
    if repeats == 0:
        for key in ("decode_tokens_per_s", "prefill_ms"):
            if cell.get(key) is not None:
                c.bad(child(where, key), f"a figure over 0 repeats (null expected), got {show(cell[key])}")
    samples = cell.get("decode_tokens_per_s_samples")
    if samples is not None:
        if not isinstance(samples, list):
            c.bad(child(where, "decode_tokens_per_s_samples"), f"expected a list of numbers, got {show(samples)}")
        else:
            for i, s in enumerate(samples):
                c.number(child(child(where, "decode_tokens_per_s_samples"), i), s, null=False)
            if len(samples) != repeats:
                c.bad(child(where, "decode_tokens_per_s_samples"), f"one sample per repeat ({repeats}), got "
                                                                     f"{len(samples)}")
            elif samples and all(is_number(s) for s in samples):
                _pooled(c, where, cell, min(samples), max(samples))
    c.numbers(child(where, "step"), cell.get("step"))
    profile = cell.get("profile")
    if profile is not None and c.table(child(where, "profile"), profile):
        for key in PROFILE_FIGURES:
            c.number(child(child(where, "profile"), key), profile.get(key))
        c.count(child(child(where, "profile"), "decode_runs"), profile.get("decode_runs"), null=True)
        c.numbers(child(child(where, "profile"), "top_kernels_ms"), profile.get("top_kernels_ms"))


# -- a behavior comparison -------------------------------------------------------------------------
def behavior(c: Checks, block: Any, decided: Any) -> None:
    """Rate counts that are k of n, quality indexes that are the mean of their category rates, timings that
    are tables of seconds, and the paired record."""
    if not c.table("behavior", block):
        return
    categories = block.get("categories")
    if not c.names("behavior.categories", categories):
        categories = None
    counted = block.get("rate_counts")
    if categories and isinstance(counted, Mapping) and any(str(k).startswith("greedy.") for k in counted):
        missing = [cat for cat in categories if f"greedy.{cat}" not in counted]
        if missing:
            c.bad("behavior.categories", f"every category counted in rate_counts (greedy.<category>), got none "
                                         f"for {', '.join(missing)}")
    for counts_key, index_key in (("rate_counts", "quality_index"),
                                  ("reference_rate_counts", "reference_quality_index")):
        counts = block.get(counts_key)
        ok = c.table(child("behavior", counts_key), counts) and all(
            [_rate(c, child(child("behavior", counts_key), str(k)), v) for k, v in counts.items()])
        index = block.get(index_key)
        if c.number(child("behavior", index_key), index, 0.0, 100.0) and ok and categories is not None:
            _quality(c, child("behavior", index_key), index, counts, categories)
    for key in ("timing", "reference_timing"):
        _timing(c, child("behavior", key), block.get(key))
    if block.get("paired") is not None:
        paired(c, block["paired"], decided)


def _rate(c: Checks, where: str, rc: Any) -> bool:
    """One rate's counts: a whole numerator of at most the whole denominator (0/0: no case, a rate of nothing)."""
    if not c.table(where, rc):
        return False
    num, den = rc.get("numerator"), rc.get("denominator")
    if not (c.count(child(where, "numerator"), num) & c.count(child(where, "denominator"), den)):
        return False
    if num > den:
        return c.bad(where, f"numerator {num} of denominator {den}: " + (
            "a zero denominator counts no case" if den == 0 else "more than every case"))
    return True


def _quality(c: Checks, where: str, index: Any, counts: Mapping[str, Any], categories: list[str]) -> None:
    """harness.behavior.evaluate.quality_index: 100 x the mean greedy category rate, null when a category has
    no case (a zero denominator is no score); checked when every category's counts are recorded."""
    rates = [counts.get(f"greedy.{cat}") for cat in categories]
    if not categories or any(r is None for r in rates):
        if not categories and index is not None:
            c.bad(where, f"a quality index of no category (null expected), got {show(index)}")
        return
    if any(r["denominator"] == 0 for r in rates):
        if index is not None:
            empty = next(cat for cat, r in zip(categories, rates) if r["denominator"] == 0)
            c.bad(where, f"greedy.{empty} has 0 cases, so no quality index (null expected), got {show(index)}")
        return
    mean = 100.0 * sum(r["numerator"] / r["denominator"] for r in rates) / len(rates)
    if index is not None and not math.isclose(index, mean, abs_tol=TOLERANCE):
        shown = ", ".join(f"{cat} {r['numerator']}/{r['denominator']}" for cat, r in zip(categories, rates))
        c.bad(where, f"expected 100 x the mean greedy category rate, {mean:.6g} ({shown}), got {show(index)}")


def _timing(c: Checks, where: str, timing: Any) -> None:
    if timing is None or not c.table(where, timing):
        return
    c.number(child(where, "seconds"), timing.get("seconds"))
    c.count(child(where, "generated_tokens"), timing.get("generated_tokens"), null=True)
    modes = timing.get("modes")
    if modes is not None and c.table(child(where, "modes"), modes):
        for mode, m in modes.items():
            at = child(child(where, "modes"), str(mode))
            if c.table(at, m):
                if "seconds" in m:   # a mode's own seconds: only when the modes ran one after another
                    c.number(child(at, "seconds"), m.get("seconds"))
                c.count(child(at, "generated_tokens"), m.get("generated_tokens"), null=True)


def paired(c: Checks, rec: Any, decided: Any) -> None:
    """The paired rule's record: its settings in range, each metric's flips and figures, and no failing metric
    beside a rule that passed."""
    where = "behavior.paired"
    if not c.table(where, rec):
        return
    for key in ("confidence", "power"):   # harness.gates.behavior.BehaviorPolicy's bounds
        c.number(child(where, key), rec.get(key), 0.5, 1.0)
    for key in ("margin", "detect"):
        c.number(child(where, key), rec.get(key), 0.0, 1.0)
    c.count(child(where, "confirm_seeds"), rec.get("confirm_seeds"), null=True)
    for key in ("rule", "test", "correction"):
        c.text(child(where, key), rec.get(key), null=True)
    if "not_measured" in rec:
        c.names(child(where, "not_measured"), rec["not_measured"])
    confirmed = rec.get("confirmed_on")
    if confirmed is not None and not (isinstance(confirmed, list) and all(is_count(s) for s in confirmed)):
        c.bad(child(where, "confirmed_on"), f"expected the confirmation seeds (whole numbers) or null, got "
                                            f"{show(confirmed)}")
    metrics = rec.get("metrics")
    if not isinstance(metrics, list):
        c.bad(child(where, "metrics"), f"expected a list of metric decisions, got {show(metrics)}")
        return
    for i, m in enumerate(metrics):
        at = child(child(where, "metrics"), i)
        if c.table(at, m) and flips(c, at, m):
            _decision(c, at, m)
            if m.get("first_stage") is not None and c.table(child(at, "first_stage"), m["first_stage"]) \
                    and flips(c, child(at, "first_stage"), {"metric": m.get("metric"), **m["first_stage"]}):
                _decision(c, child(at, "first_stage"), m["first_stage"])
        if isinstance(m, Mapping) and m.get("decision") == "fail" and decided is True:
            c.bad(child(at, "decision"), "a failing metric beside a rule that passed (verdict.decided true)")


def flips(c: Checks, where: str, f: Mapping[str, Any]) -> bool:
    """harness.behavior.paired.Flips: whole counts, n > 0, lost + gained and each side's rights at most n, and
    the candidate's rights minus the reference's equal gained minus lost."""
    c.text(child(where, "metric"), f.get("metric"))
    n = f.get("n")
    ok = c.count(child(where, "n"), n, 1)
    for key in FLIP_COUNTS:
        ok = c.count(child(where, key), f.get(key)) and ok
    if not ok:
        return False
    lost, gained, ref, cand = (f[k] for k in FLIP_COUNTS)
    if lost + gained > n or ref > n or cand > n:
        return c.bad(where, f"lost {lost} + gained {gained}, reference right {ref} and candidate right {cand} must "
                            f"each fit the {n} paired cases")
    if cand - ref != gained - lost:
        return c.bad(where, f"candidate right {cand} - reference right {ref} must equal gained {gained} - lost {lost}")
    return True


def _decision(c: Checks, where: str, m: Mapping[str, Any]) -> None:
    """One metric's figures: the drop is (lost - gained) / n, its interval holds together, p-values are p-values."""
    drop = (m["lost"] - m["gained"]) / m["n"]
    if c.number(child(where, "drop"), m.get("drop"), -1.0, 1.0, null=False) and not math.isclose(
            m["drop"], drop, abs_tol=TOLERANCE):
        c.bad(child(where, "drop"), f"expected (lost {m['lost']} - gained {m['gained']}) / n {m['n']} = {drop:.6g}, "
                                    f"got {show(m['drop'])}")
    low, high = m.get("low"), m.get("high")
    if c.number(child(where, "low"), low, -1.0, 1.0, null=False) & c.number(child(where, "high"), high, -1.0, 1.0,
                                                                             null=False) \
            and not low - TOLERANCE <= drop <= high + TOLERANCE:
        c.bad(where, f"expected the interval {show(low)}..{show(high)} to hold the drop {drop:.6g}")
    if c.number(child(where, "p"), m.get("p"), 0.0, 1.0, null=False) & c.number(
            child(where, "p_adjusted"), m.get("p_adjusted"), 0.0, 1.0, null=False) \
            and m["p_adjusted"] < m["p"] - TOLERANCE:
        c.bad(child(where, "p_adjusted"), f"Holm's adjustment never lowers a p-value: p {show(m['p'])}, got "
                                          f"{show(m['p_adjusted'])}")
    c.number(child(where, "margin"), m.get("margin"), 0.0, 1.0, null=True)
    c.number(child(where, "detectable_drop"), m.get("detectable_drop"))
    if "seeds" in m:
        c.count(child(where, "seeds"), m["seeds"], 1)
    if "decision" in m and m["decision"] not in DECISIONS:
        c.bad(child(where, "decision"), f"expected pass or fail, got {show(m['decision'])}")


# -- the calibration of the behavior rule -----------------------------------------------------------
def calibration(c: Checks, conditions: Any) -> None:
    """Each condition's flips (as a paired metric's), its failing metrics among those judged and ``failed``
    saying whether there are any, its seeds a count."""
    if not isinstance(conditions, list):
        c.bad("calibration", f"expected a list of conditions, got {show(conditions)}")
        return
    for i, cond in enumerate(conditions):
        where = child("calibration", i)
        if not c.table(where, cond):
            continue
        for key in ("flips", "pooled_flips"):
            items = cond.get(key, [])
            if not isinstance(items, list):
                c.bad(child(where, key), f"expected a list of flip counts, got {show(items)}")
                continue
            for j, f in enumerate(items):
                if c.table(child(child(where, key), j), f):
                    flips(c, child(child(where, key), j), f)
        c.count(child(where, "seeds"), cond.get("seeds", 1), 1)
        c.numbers(child(where, "measured"), cond.get("measured"), None, None)
        failing, metrics = cond.get("failing"), cond.get("metrics")
        if c.names(child(where, "failing"), failing) and c.names(child(where, "metrics"), metrics):
            stray = [m for m in failing if m not in metrics]
            if stray:
                c.bad(child(where, "failing"), f"{', '.join(stray)} failing but not among the metrics judged")
            if isinstance(cond.get("failed"), bool) and cond["failed"] != bool(failing):
                c.bad(child(where, "failed"), f"expected {bool(failing)} (failing metrics: "
                                              f"{', '.join(failing) or 'none'}), got {show(cond['failed'])}")


# -- a win-rule window ------------------------------------------------------------------------------
def winrule(c: Checks, w: Any, decided: Any) -> None:
    """A verdict the rule can give, files inside the receipt's evidence folder, looks that are repeat counts,
    the sampled machine per start, and an INVALID window never beside a rule that passed."""
    if not c.table("winrule", w):
        return
    for key in ("verdict", "verdict_before_override"):
        v = w.get(key)
        if not (v in WINDOW_VERDICTS or (v is None and key != "verdict")):
            c.bad(child("winrule", key), f"expected one of {', '.join(WINDOW_VERDICTS)}, got {show(v)}")
    if w.get("verdict") == "INVALID" and decided is True:
        c.bad("winrule.verdict", "an INVALID window beside a rule that passed (verdict.decided true)")
    for key in ("markdown", "chart"):
        name = w.get(key)
        if isinstance(name, str) and (not name or "/" in name or "\\" in name or name in (".", "..")):
            c.bad(child("winrule", key), f"expected a file name in the receipt's evidence folder, got {show(name)}")
    c.count("winrule.archived_rows", w.get("archived_rows"), null=True)
    looks = w.get("looks")
    if looks is not None and isinstance(looks, list):
        for i, n in enumerate(looks):
            c.count(child("winrule.looks", i), n, 1)
        if all(is_count(n) for n in looks) and looks != sorted(looks):
            c.bad("winrule.looks", f"expected repeat counts in the order the rule looked, got {show(looks)}")
    sha = w.get("schedule_sha256")
    if sha is not None and not (isinstance(sha, str) and SHA256.match(sha)):
        c.bad("winrule.schedule_sha256", f"expected 64 hex digits, got {show(sha)}")
    sampled = w.get("sampled")
    if sampled is not None and c.table("winrule.sampled", sampled):
        for label, m in sampled.items():
            machine(c, child("winrule.sampled", str(label)), m)


# -- the machine during a timing ------------------------------------------------------------------
def machine(c: Checks, where: str, m: Any) -> None:
    """harness.sampler.summarize: fractions in 0..1, the rest not negative, a mean at most its peak, and a figure
    listed absent recorded as null."""
    if not c.table(where, m):
        return
    for key in FRACTIONS:
        c.number(child(where, key), m.get(key), 0.0, 1.0)
    for key in SAMPLER_FIGURES:
        c.number(child(where, key), m.get(key))
    c.count(child(where, "samples"), m.get("samples"), null=True)
    for key in ("covers", "cpu_mhz_source"):
        c.text(child(where, key), m.get(key), null=True)
    for key in ("interval_s", "duration_s"):
        c.number(child(where, key), m.get(key))
    for low, high in (("steal_fraction", "steal_fraction_peak"), ("run_queue_mean", "run_queue_peak"),
                      ("cpu_mhz_min", "cpu_mhz_max")):
        a, b = m.get(low), m.get(high)
        if is_number(a) and is_number(b) and a > b + TOLERANCE:
            c.bad(child(where, low), f"expected at most {high} {show(b)}, got {show(a)}")
    absent = m.get("absent")
    if absent is not None and c.names(child(where, "absent"), absent):
        listed = [k for k in absent if isinstance(k, str) and m.get(k) is not None]
        if listed:
            c.bad(child(where, "absent"), f"{', '.join(listed)} listed absent but recorded")


# -- the pinned graphs re-hashed -----------------------------------------------------------------------
def graph_recheck(c: Checks, g: Any, outcome: Any) -> None:
    """Every changed graph among those checked, each really changed (another SHA-256, or gone with no size),
    and a test whose graph changed never passed (harness.pytest_outcome.outcome)."""
    if not c.table("graph_recheck", g):
        return
    checked = {(x.get("role"), x.get("path")) for x in g.get("checked") or [] if isinstance(x, Mapping)}
    changed = g.get("changed") or []
    for i, x in enumerate(changed):
        where = child("graph_recheck.changed", i)
        if not c.table(where, x):
            continue
        if (x.get("role"), x.get("path")) not in checked:
            c.bad(where, f"{x.get('role')} {x.get('path')} changed but is not among the graphs checked")
        if x.get("sha256_after") == x.get("sha256_pinned"):
            c.bad(child(where, "sha256_after"), f"the pinned SHA-256 again, got {show(x.get('sha256_after'))}: "
                                                f"nothing changed")
        if (x.get("sha256_after") is None) != (x.get("bytes_after") is None):
            c.bad(child(where, "bytes_after"), f"a size exactly when a SHA-256 is recorded after, got "
                                               f"{show(x.get('bytes_after'))}")
    if changed and outcome in ("pass", "skip"):
        c.bad("verdict.outcome", f"a pinned graph changed during the test (graph_recheck.changed), got outcome "
                                 f"{outcome!r}")
