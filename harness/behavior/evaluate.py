"""Run a rendered suite through a backend and build the behavior report: rates with integer counts.

Per mode (greedy, sampled) the report holds, each as numerator/denominator:
- ``<mode>.<category>``: cases of that category whose checker accepts the reply;
- ``<mode>.stopped``: every case that ended with an end-of-turn id within its budget;
- ``<mode>.repetition``, ``.empty``, ``.garbage``, ``.budget_exhausted``: invalid-output counters
  over every case (metrics that must not rise).
Agreement with a reference (the first N generated ids identical) needs both transcripts and is
computed by :func:`agreement` when two reports are compared.
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import EvidenceError
from ..hashing import sha256_file
from ..progress import ticker
from .checkers import CHECKERS, garbage, runaway_repetition
from .generate import Backend, BatchBackend, Contract, generate_each_mode, generate_modes
from .suite import RenderedCase, RenderedSuite

REPORT_SCHEMA = "gatehouse-behavior-report-v1"
COUNTERS = ("repetition", "empty", "garbage", "budget_exhausted")   # must not rise


def _rate(num: int, den: int) -> dict[str, Any]:
    return {"numerator": num, "denominator": den, "value": num / den if den else None}


def score(rows: list[dict[str, Any]], categories: list[str], modes: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Rates from transcript rows (pure: the same rows always give the same rates)."""
    rates: dict[str, dict[str, Any]] = {}
    for mode in modes:
        mine = [r for r in rows if r["mode"] == mode]
        for cat in categories:
            in_cat = [r for r in mine if r["category"] == cat]
            rates[f"{mode}.{cat}"] = _rate(sum(r["passed"] for r in in_cat), len(in_cat))
        rates[f"{mode}.stopped"] = _rate(sum(r["stopped"] for r in mine), len(mine))
        for counter in COUNTERS:
            rates[f"{mode}.{counter}"] = _rate(sum(r["flags"][counter] for r in mine), len(mine))
    return rates


def quality_index(rates: dict[str, dict[str, Any]], categories: list[str], mode: str = "greedy") -> float | None:
    """Descriptive quality /100: the equal-weight mean of the category rates (None when any is missing)."""
    values = [rates.get(f"{mode}.{c}", {}).get("value") for c in categories]
    if not values or any(v is None for v in values):
        return None
    return 100.0 * sum(values) / len(values)


def _row(mode: str, rc: RenderedCase, ids: list[int], stopped: bool,
         decode: Callable[[list[int]], str]) -> dict[str, Any]:
    """One transcript row: the case, its generated ids and text, the checker's decision and the flags."""
    c = rc.case
    text = decode(ids)
    outcome = {"stopped": stopped, "repetition": runaway_repetition(ids)}
    flags = {"repetition": outcome["repetition"], "empty": not text.strip(), "garbage": garbage(text),
             "budget_exhausted": not stopped}
    passed = bool(CHECKERS[c.checker].check(text, c.expected, outcome))
    return {"mode": mode, "case": c.id, "category": c.category, "checker": c.checker,
            "checker_version": CHECKERS[c.checker].version, "expected": c.expected,
            "prompt": c.prompt, "prompt_ids": list(rc.prompt_ids), "max_new_tokens": c.max_new_tokens,
            "output_ids": ids, "output_text": text, "stopped": stopped, "passed": passed,
            "flags": flags}


def batches(cases: Sequence[RenderedCase], batch: int, padded: bool = False) -> list[list[int]]:
    """Case indices in groups of at most ``batch``, shortest prompts first (ties in suite order).

    By default a group holds prompts of one length only, so no row is padded and a batched case computes
    exactly what it computes alone: a padded row's attention runs over masked columns, whose different
    rounding a graph with int8 activations amplifies into different ids (SmolLM2's q8 graph, chat-v2:
    71 of 160 cases).  ``padded`` fills every group up to ``batch`` with the next lengths instead: fewer, fuller
    batches, at the cost of that rounding."""
    order = sorted(range(len(cases)), key=lambda i: (len(cases[i].prompt_ids), i))
    runs = [order] if padded else [list(g) for _, g in itertools.groupby(order, key=lambda i: len(cases[i].prompt_ids))]
    return [run[k:k + batch] for run in runs for k in range(0, len(run), batch)]


def _groups(backend: Backend | BatchBackend, suite: RenderedSuite, contract: Contract, batch: int,
            padded: bool, together: bool) -> list[list[int]] | None:
    """The groups of cases whose modes decode side by side, or None for the sequential path: one case at a time
    through ``backend.start/step``, mode after mode (:func:`generate_each_mode`), for batch 1 unless ``together``
    (and the backend has a batched path and the contract more than one mode to share it)."""
    if batch > 1:
        return batches(suite.cases, batch, padded)
    if together and isinstance(backend, BatchBackend) and len(contract.modes) > 1:
        return [[i] for i in range(len(suite.cases))]
    return None


def _generated(backend: Backend | BatchBackend, suite: RenderedSuite, contract: Contract,
               groups: list[list[int]] | None, tick: Callable[[int], None]) -> dict[str, list[tuple[list[int], bool]]]:
    """Per mode, (ids, stopped) of every case in the suite's order: in ``groups`` (:func:`_groups`) through
    :func:`generate_modes` (one prefill per group, every mode's rows decoded together), or one case at a time."""
    cases = suite.cases
    if groups is None:
        out: dict[str, list[tuple[list[int], bool]]] = {mode: [] for mode in contract.modes}
        for i, rc in enumerate(cases):
            for mode, found in generate_each_mode(backend, list(rc.prompt_ids), rc.case.max_new_tokens, contract,
                                                  rc.case.id).items():
                out[mode].append(found)
            tick((i + 1) * len(contract.modes))
        return out
    found: dict[str, dict[int, tuple[list[int], bool]]] = {mode: {} for mode in contract.modes}
    for group in groups:
        results = generate_modes(backend, [list(cases[i].prompt_ids) for i in group],
                                 [cases[i].case.max_new_tokens for i in group], contract, contract.modes,
                                 [cases[i].case.id for i in group])
        for mode in contract.modes:
            found[mode].update(zip(group, results[mode]))
        tick(len(found[contract.modes[0]]) * len(contract.modes))
    return {mode: [found[mode][i] for i in range(len(cases))] for mode in contract.modes}


def run(backend: Backend | BatchBackend, suite: RenderedSuite, contract: Contract, decode: Callable[[list[int]], str],
        progress: Callable[[str], None] = lambda s: None, batch: int = 1,
        padded: bool = False, together: bool = True) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every case in every mode of the contract: transcript rows (in the suite's order, mode after mode) and timing.

    ``batch`` is how many cases share a forward pass (more than 1: ``backend`` must also be a
    :class:`BatchBackend`), ``padded`` whether a batch may mix prompt lengths (:func:`batches`). A case's modes
    share its prefill and decode side by side, one row per mode (``modes_together`` in the timing), in batches of
    more than one case, and at batch 1 when ``together`` and the backend is a :class:`BatchBackend` (``together``
    False keeps a graph whose two-row batch is not verified, a peer's, at one row: one case at a time, mode after
    mode, from one prefill when the backend is :class:`Resumable`); the timing records all three, as the report
    does."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise EvidenceError(f"behavior evaluation batch {batch!r} is not a positive integer")
    t0 = time.monotonic()
    tick = ticker("case x mode", len(suite.cases) * len(contract.modes), say=progress)
    groups = _groups(backend, suite, contract, batch, padded, together)
    generated = _generated(backend, suite, contract, groups, tick)
    rows, tokens = [], 0
    per_mode: dict[str, dict[str, Any]] = {}
    for mode in contract.modes:
        mode_tokens = 0
        for rc, (ids, stopped) in zip(suite.cases, generated[mode]):
            mode_tokens += len(ids) + (1 if stopped else 0)
            rows.append(_row(mode, rc, ids, stopped, decode))
        per_mode[mode] = {"generated_tokens": mode_tokens}
        tokens += mode_tokens
    return rows, {"seconds": time.monotonic() - t0, "generated_tokens": tokens, "modes": per_mode, "batch": batch,
                  "padded": padded and batch > 1, "modes_together": groups is not None and len(contract.modes) > 1}


def write(out: Path, rows: list[dict[str, Any]], timing: dict[str, Any], suite: RenderedSuite, contract: Contract,
          subject: dict[str, Any]) -> dict[str, Any]:
    """Write transcripts.jsonl and report.json into ``out``; the report pins the transcripts' SHA-256."""
    out.mkdir(parents=True, exist_ok=True)
    tpath = out / "transcripts.jsonl"
    with open(tpath, "w") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    rates = score(rows, suite.suite.categories, contract.modes)
    report = {"schema": REPORT_SCHEMA, "status": "complete", "subject": subject, "suite": suite.describe(),
              "suite_sha256": suite.sha256, "contract": contract.as_dict(), "contract_sha256": contract.sha256,
              "max_new_tokens": {rc.case.id: rc.case.max_new_tokens for rc in suite.cases},
              "categories": suite.suite.categories,
              "rates": {k: v["value"] for k, v in rates.items()},
              "rate_counts": {k: {"numerator": v["numerator"], "denominator": v["denominator"]} for k, v in rates.items()},
              "quality_index": quality_index(rates, suite.suite.categories),
              "timing": {"seconds": round(timing["seconds"], 3), "generated_tokens": timing["generated_tokens"],
                         "modes": timing.get("modes", {})},
              "evaluation": {"batch": timing.get("batch", 1), "padded": timing.get("padded", False),
                             "modes_together": timing.get("modes_together", False)},
              "transcripts": {"file": tpath.name, "sha256": sha256_file(tpath), "rows": len(rows)}}
    (out / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False))
    return report


def load(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A behavior report (``path``: the report file, or the directory holding ``report.json``) and the
    transcripts beside it, refused when the transcripts changed after it was written."""
    path = Path(path)
    rpath = path / "report.json" if path.is_dir() else path
    directory = rpath.parent
    try:
        report = json.loads(rpath.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise EvidenceError(f"{rpath}: cannot read the behavior report: {exc}") from exc
    if report.get("schema") != REPORT_SCHEMA:
        raise EvidenceError(f"{rpath}: not a {REPORT_SCHEMA} (schema {report.get('schema')!r})")
    tpath = directory / report["transcripts"]["file"]
    if not tpath.is_file() or sha256_file(tpath) != report["transcripts"]["sha256"]:
        raise EvidenceError(f"{tpath}: transcripts differ from the SHA-256 their report {rpath} pinned")
    rows = [json.loads(line) for line in tpath.read_text().splitlines() if line.strip()]
    return report, rows


def agreement(reference_rows: list[dict[str, Any]], candidate_rows: list[dict[str, Any]], tokens: int,
              modes: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """Per mode: cases whose first ``tokens`` generated ids (or the whole reply, if shorter) are identical."""
    ref = {(r["mode"], r["case"]): r for r in reference_rows}
    out = {}
    for mode in modes:
        num = den = 0
        for r in candidate_rows:
            if r["mode"] != mode:
                continue
            base = ref.get((mode, r["case"]))
            if base is None:
                raise EvidenceError(f"reference transcripts lack case {r['case']!r} in mode {mode!r}")
            den += 1
            a, b = r["output_ids"][:tokens], base["output_ids"][:tokens]
            # a reply that stopped early must stop at the same place to agree
            num += int(a == b)
        out[f"{mode}.agreement"] = {"numerator": num, "denominator": den}
    return out


def comparison(reference: dict[str, Any], reference_rows: list[dict[str, Any]], candidate: dict[str, Any],
               candidate_rows: list[dict[str, Any]], tokens: int, modes: tuple[str, ...]) -> dict[str, Any]:
    """The behavior gate's evidence: both reports with greedy agreement against the reference's ids added
    (the reference against itself, so both carry the same rates), and the flip table of every metric counted
    case by case (:func:`harness.behavior.paired.table`) that the paired rule decides on."""
    from ..gates.behavior import with_agreement
    from .paired import table as flip_table

    return {"reference": with_agreement(reference, agreement(reference_rows, reference_rows, tokens, modes)),
            "candidate": with_agreement(candidate, agreement(reference_rows, candidate_rows, tokens, modes)),
            "flips": flip_table(reference_rows, candidate_rows, tokens)}
