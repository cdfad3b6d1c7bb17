"""What changed between two runs: ``compare(base, new, policy) -> Comparison``, pure.

Each run is read as the report reads it (:func:`harness.report.collect.collect`, then
:func:`harness.report.assemble.decide`): the same receipt views, the same variant rows and run-level rows,
so a comparison never parses a receipt its own way.  Three kinds of rows come out, each with its reason:

- **verdicts**, per (model, dtype, gate) of every variant and per run-level receipt (by node id): flipped
  pass → fail or error (a regression), fail → pass (fixed), appeared, disappeared, otherwise changed.  The
  outcome compared is the one the receipts recorded; staleness (artifacts on disk changed since) is shown
  beside it but is not a change between the runs.
- **quality**, per variant: the held-out relative loss increase, mean KLD and top-1 agreement (the
  quantization gate's receipt) and the quality index and greedy category rates as k/n (the behavior
  gate's), base against new, with the standard errors the receipts recorded.
- **throughput**, per lane x cell x (model, dtype): the median of each run's per-repeat decode tok/s and
  the Mann-Whitney U test of one run's repeats against the other's (:mod:`harness.compare.stats`), with
  Holm's correction across every test of the comparison.  Two runs are two sessions, never interleaved,
  so the win rule's paired OFF/ON/OFF test cannot apply; the rank test needs no pairing.  Throughput is
  compared only between receipts of one machine fingerprint (the machine identity the report's
  provenance check uses, :data:`harness.report.qualify.MACHINE_KEYS`), and a lane cell is tested only
  when both receipts carry per-repeat samples, enough of them, and a timing during which other processes
  took no more than the policy's ``max_foreign_cpu`` (the receipts' ``machine_during``).  A side may be several
  runs (sessions) of the same code: their repeats are pooled and the spread of their medians measures how far
  sessions land apart; a regression must exceed the policy's registered ``session_spread`` (this machine's,
  from repeated same-commit sessions) or that measured spread, whichever is larger (:func:`session_guard`).  Repeats within one session are not independent draws of
  the session-to-session variation: measured here, one lane cell's median moved up to 27 % between six
  sessions of the same commit while each session's repeats kept a CV of a few percent.

A regression is what a ``fail_on`` threshold of the policy (:mod:`harness.compare.policy`) says it is; a
significant speed-up is reported and never fails.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .. import fmt
from ..report import qualify
from ..report.assemble import decide
from ..report.collect import Collected
from ..view import ReceiptView, cells
from . import stats
from .policy import ComparePolicy

INTERLEAVING = ("the two runs were not interleaved (two separate sessions), so each lane's repeats are compared with "
                "a rank test between the runs, not with the win rule's paired OFF/ON/OFF test, which needs both "
                "sides measured in alternation in one session")
SESSION_CAVEAT = ("the test sees each run's repeat-to-repeat spread only: a shift shared by every repeat of one session "
                  "(another process, the CPU clock, where the scheduler put the threads) reads as a difference between "
                  "the runs, which is why a throughput regression also needs the effect threshold (decode:N%) and the "
                  "session guard")
NO_SAMPLES = "no per-repeat samples (receipt predates decode_tokens_per_s_samples)"
QUANTIZATION_GATE = "quantization"
BEHAVIOR_GATE = "behavior"


# -- the machine a receipt ran on ---------------------------------------------------------------------
@dataclass(frozen=True)
class Machine:
    """A machine fingerprint: the identity fields of a receipt's ``provenance.machine_before``
    (:data:`harness.report.qualify.MACHINE_KEYS`) and their short digest."""

    identity: tuple[tuple[str, Any], ...]

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.identity, sort_keys=True, default=str).encode()).hexdigest()[:12]

    @property
    def label(self) -> str:
        i = dict(self.identity)
        parts = [str(i.get("cpu_model") or "unknown CPU"),
                 f"{i['logical_cpus']} CPUs" if i.get("logical_cpus") is not None else None,
                 f"host {i['hostname']}" if i.get("hostname") else None]
        return f"{self.digest} ({', '.join(p for p in parts if p)})"

    def differences(self, other: "Machine") -> list[str]:
        a, b = dict(self.identity), dict(other.identity)
        return [f"{k} {a.get(k)!r} vs {b.get(k)!r}" for k in qualify.MACHINE_KEYS if a.get(k) != b.get(k)]


def machine_of(view: ReceiptView) -> Machine:
    before = view.provenance.get("machine_before") or {}
    return Machine(tuple((k, before.get(k)) for k in qualify.MACHINE_KEYS))


# -- one run's header ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunSide:
    """What the comparison's header says of one run: its identity, the harness source and packages its
    receipts were measured with, its machine fingerprints, and its receipt counts."""

    path: str
    run_id: str
    created_at: str | None
    campaign_name: str | None
    campaign_sha256: str | None
    screening: bool
    harness: tuple[tuple[str | None, str | None], ...]     # distinct (source sha256, git commit)
    packages: tuple[tuple[str, tuple[str | None, ...]], ...]   # name -> distinct versions across receipts
    machines: tuple[Machine, ...]
    receipts: int
    invalid: int
    stale: int


def _side(c: Collected, rep: Mapping[str, Any]) -> RunSide:
    rec = c.record
    campaign = rec.get("campaign") or {}
    harness: list[tuple[str | None, str | None]] = []
    versions: dict[str, list[str | None]] = {}
    machines: list[Machine] = []
    for v in c.views:
        h = v.provenance.get("harness") or {}
        key = (h.get("sha256"), h.get("git_commit"))
        if key not in harness:
            harness.append(key)
        for name, version in (v.provenance.get("packages") or {}).items():
            seen = versions.setdefault(name, [])
            if version not in seen:
                seen.append(version)
        m = machine_of(v)
        if m not in machines:
            machines.append(m)
    return RunSide(path=str(c.run_dir.path), run_id=str(rec.get("run_id") or c.run_dir.path.name),
                   created_at=rec.get("created_at"), campaign_name=campaign.get("name"),
                   campaign_sha256=campaign.get("sha256"), screening=rep["label"] == "screening",
                   harness=tuple(harness), packages=tuple((n, tuple(vs)) for n, vs in sorted(versions.items())),
                   machines=tuple(machines), receipts=len(c.views), invalid=len(c.invalid),
                   stale=len(rep["stale_receipts"]))


# -- verdicts ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class VerdictRow:
    """One gate of one variant (``scope="variant"``) or one run-level receipt (``scope="run"``, keyed by its
    node id) in both runs.  ``base``/``new`` are the recorded outcomes (None: no receipt), ``change`` one of
    regression, fixed, appeared, disappeared, changed, unchanged; ``reasons`` the new run's reasons (the
    base run's for a receipt that disappeared)."""

    scope: str
    model: str | None
    dtype: str | None
    gate: str
    nodeid: str | None
    base: str | None
    new: str | None
    change: str
    base_stale: bool = False
    new_stale: bool = False
    reasons: tuple[str, ...] = ()


def verdict_change(base: str | None, new: str | None) -> str:
    """How one gate's outcome moved between the runs."""
    if base is None and new is None:
        raise ValueError("a verdict row needs an outcome on at least one side")
    if base is None:
        return "appeared"
    if new is None:
        return "disappeared"
    if base == new:
        return "unchanged"
    if base == "pass" and new in ("fail", "error"):
        return "regression"
    if base in ("fail", "error") and new == "pass":
        return "fixed"
    return "changed"


def _recorded(gate_row: Mapping[str, Any]) -> tuple[str, bool]:
    """A gate's worst recorded outcome over its receipts, and whether any of them is stale (the report's
    gate outcome turns a stale pass into "stale"; a comparison keeps the two apart)."""
    outcome = max((r["outcome"] for r in gate_row["receipts"]), key=lambda o: qualify.SEVERITY.get(o, 0))
    return outcome, any(r["stale"] for r in gate_row["receipts"])


def _variant_gates(rep: Mapping[str, Any]) -> dict[tuple[str, str, str], tuple[str, bool, list[str]]]:
    return {(r["model"], r["dtype"], gate): (*_recorded(g), list(g["reasons"]))
            for r in rep["variants"] for gate, g in r["gates"].items()}


def _run_level(rep: Mapping[str, Any], views: Sequence[ReceiptView]) -> dict[str, tuple[Mapping[str, Any], bool]]:
    stale = {v.nodeid for v in views if v.stale}
    return {r["nodeid"]: (r, r["nodeid"] in stale) for r in rep["run_level"]}


def verdict_rows(rep_b, views_b, rep_n, views_n) -> list[VerdictRow]:
    """Every variant gate and run-level receipt of either run, with how its outcome changed."""
    out = []
    vb, vn = _variant_gates(rep_b), _variant_gates(rep_n)
    for key in sorted(set(vb) | set(vn), key=lambda k: tuple(str(x) for x in k)):
        b, n = vb.get(key), vn.get(key)
        change = verdict_change(b and b[0], n and n[0])
        reasons = (n or b)[2] if change != "unchanged" else []
        out.append(VerdictRow("variant", key[0], key[1], key[2], None, b and b[0], n and n[0], change,
                              bool(b and b[1]), bool(n and n[1]), tuple(reasons)))
    rb, rn = _run_level(rep_b, views_b), _run_level(rep_n, views_n)
    for nodeid in sorted(set(rb) | set(rn)):
        b, n = rb.get(nodeid), rn.get(nodeid)
        row = (n or b)[0]
        change = verdict_change(b and b[0]["outcome"], n and n[0]["outcome"])
        reasons = row["reasons"] if change != "unchanged" else []
        out.append(VerdictRow("run", row.get("model"), row.get("dtype"), row["gate"], nodeid,
                              b and b[0]["outcome"], n and n[0]["outcome"], change, bool(b and b[1]),
                              bool(n and n[1]), tuple(reasons)))
    return out


# -- quality ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Figure:
    """One recorded quality figure: its value, standard error (None when the receipt records none), the
    count it rests on (tokens, cases), and for a rate its counts (numerator, denominator)."""

    value: float | None
    stderr: float | None = None
    n: int | None = None
    counts: tuple[int, int] | None = None


@dataclass(frozen=True)
class QualityRow:
    """One quality figure of one variant in both runs.  ``unit``: ``%`` (a fraction shown as a percentage),
    ``points`` or ``nats``; ``delta`` new minus base, ``delta_stderr`` the two standard errors combined as if
    independent (the runs score the same held-out tokens, so this overstates the noise of a difference and
    understates its significance); ``crossed`` the thresholds this row crosses."""

    model: str
    dtype: str
    figure: str
    unit: str
    base: Figure | None
    new: Figure | None
    delta: float | None
    delta_stderr: float | None
    crossed: tuple[str, ...] = ()


def _last(views: Sequence[ReceiptView], name: str) -> ReceiptView | None:
    """The last receipt (file order) that recorded ``name``: the report's rule (a later receipt wins)."""
    found = [v for v in views if name in v.data["measurements"] and v.value(name) is not None]
    return found[-1] if found else None


def _count(v: ReceiptView, name: str) -> int | None:
    c = v.data["measurements"][name].get("count")
    return c if isinstance(c, int) else None


def quality_figures(views: Sequence[ReceiptView]) -> dict[str, tuple[str, Figure]]:
    """One variant's quality figures, by name: (unit, figure).  The loss increase's standard error is the
    quantization gate's paired per-token standard error of ln(perplexity ratio) over the fp32 loss, since
    relative_increase = (q - fp) / fp = ln_ratio / fp."""
    out: dict[str, tuple[str, Figure]] = {}
    quant = [v for v in views if v.gate == QUANTIZATION_GATE]
    v = _last(quant, "relative_increase")
    if v is not None:
        ln_err, fp = v.value("ln_perplexity_ratio_stderr"), v.value("fp_loss")
        err = ln_err / fp if isinstance(ln_err, (int, float)) and isinstance(fp, (int, float)) and fp > 0 else None
        out["held-out loss increase"] = ("%", Figure(v.value("relative_increase"), err, _count(v, "relative_increase")))
    v = _last(quant, "kld_mean")
    if v is not None:
        out["mean KLD"] = ("nats", Figure(v.value("kld_mean"), None, _count(v, "kld_mean")))
    v = _last(quant, "top1_agreement")
    if v is not None:
        out["top-1 agreement"] = ("%", Figure(v.value("top1_agreement"), v.value("top1_agreement_stderr"),
                                              _count(v, "top1_agreement")))
    blocks = [v.behavior for v in views if v.gate == BEHAVIOR_GATE and v.behavior is not None]
    if blocks:
        b = blocks[-1]
        if b["quality_index"] is not None:
            out["quality index"] = ("points", Figure(b["quality_index"]))
        for cat, rc in sorted(b["categories"].items()):
            if rc:
                k, n = rc["numerator"], rc["denominator"]
                out[f"greedy.{cat}"] = ("%", Figure(k / n if n else None, None, n, (k, n)))
    return out


def quality_rows(views_b: Sequence[ReceiptView], views_n: Sequence[ReceiptView], policy: ComparePolicy) -> list[QualityRow]:
    """Every quality figure either run recorded for a variant, base against new, with the thresholds crossed."""
    gb, gn = qualify.by_variant(views_b), qualify.by_variant(views_n)
    loss, quality = policy.threshold("loss"), policy.threshold("quality")
    out = []
    for key in sorted(set(gb) | set(gn), key=lambda k: (str(k[0]), str(k[1]))):
        fb, fn = quality_figures(gb.get(key, [])), quality_figures(gn.get(key, []))
        for name in list(dict.fromkeys([*fb, *fn])):
            unit = (fb.get(name) or fn.get(name))[0]
            b, n = fb.get(name, (unit, None))[1], fn.get(name, (unit, None))[1]
            delta = err = None
            if b is not None and n is not None and b.value is not None and n.value is not None:
                delta = n.value - b.value
                if b.stderr is not None and n.stderr is not None:
                    err = (b.stderr ** 2 + n.stderr ** 2) ** 0.5
            crossed = []
            if delta is not None and loss is not None and name == "held-out loss increase" and delta > loss.limit:
                crossed.append(str(loss))
            if delta is not None and quality is not None and name == "quality index" and -delta > quality.limit:
                crossed.append(str(quality))
            out.append(QualityRow(key[0], key[1], name, unit, b, n, delta, err, tuple(crossed)))
    return out


# -- throughput -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LaneCell:
    """One lane's figures on one cell on one side of the comparison (one run or several): the pooled decode
    rate of the first run's receipt, the per-repeat rates of every run pooled (None when a receipt has none),
    each run's median, the machines, and the largest share of CPU time other processes took during a timing."""

    nodeid: str
    pooled: float | None
    samples: tuple[float, ...] | None
    machine: Machine
    foreign_cpu: float | None
    run_medians: tuple[float, ...] = ()
    machines: tuple[Machine, ...] = ()

    @property
    def spread(self) -> float | None:
        """The largest drop between two of this side's runs' medians (1 - min / max): how far sessions of the
        same code landed apart, on the scale a regression is judged; None with fewer than two runs."""
        m = self.run_medians
        return 1 - min(m) / max(m) if len(m) >= 2 and max(m) > 0 else None


@dataclass(frozen=True)
class ThroughputRow:
    """One lane x cell x (model, dtype) on both sides.

    ``statistic`` is ``median`` (of the per-repeat decode tok/s, every run of a side pooled) when both sides
    have samples, else ``pooled`` (the receipts' pooled rates, shown, never tested).  ``change`` is new / base - 1
    of that statistic.  ``test`` is the rank test of the new side's repeats against the base side's (U counts
    the (new, base) pairs where the new repeat was faster, ties one half), ``p_holm`` its Holm-adjusted p.
    ``guard`` is the change a regression must exceed besides the decode threshold: the larger spread of run
    medians within a side when a side has two or more runs, else the policy's ``session_spread``
    (``guard_source`` says which).  ``result``: regression (significant, slower, past both), slower, faster
    (significant), unchanged (no significant change), not tested, not compared; ``why`` says which and why."""

    gate: str
    lane: str
    model: str | None
    dtype: str | None
    cell: str
    base: LaneCell | None
    new: LaneCell | None
    statistic: str
    base_value: float | None
    new_value: float | None
    change: float | None
    test: stats.RankTest | None
    p_holm: float | None
    result: str
    why: str
    guard: float | None = None
    guard_source: str = ""


def _lane_cells(views: Sequence[ReceiptView]) -> dict[tuple[str, str, str | None, str | None, str], LaneCell]:
    out = {}
    for v in views:
        row = v.lane
        if row is None:
            continue
        samples = v.lane_samples
        for cell in sorted(set(cells(row)) | set(samples)):
            s = samples.get(cell)
            m = machine_of(v)
            out[(v.gate, row["lane"], v.model, v.dtype, cell)] = LaneCell(
                v.nodeid, row.get(f"decode_tok_s_{cell}"), s, m, row.get("foreign_cpu_share"),
                (statistics.median(s),) if s else (), (m,))
    return out


def _merge(cells_of_runs: Sequence[LaneCell]) -> LaneCell:
    """One side's lane cell from its runs' (in run order): samples pooled (None if any run has none), every
    run's median, the largest foreign CPU share, the first run's machine and all of them."""
    first = cells_of_runs[0]
    if len(cells_of_runs) == 1:
        return first
    samples = None if any(c.samples is None for c in cells_of_runs) else tuple(x for c in cells_of_runs for x in c.samples)
    foreign = [c.foreign_cpu for c in cells_of_runs if c.foreign_cpu is not None]
    machines = tuple(dict.fromkeys(m for c in cells_of_runs for m in c.machines))
    return LaneCell(first.nodeid, first.pooled, samples, first.machine, max(foreign) if foreign else None,
                    tuple(m for c in cells_of_runs for m in c.run_medians), machines)


def side_cells(runs: Sequence[Sequence[ReceiptView]]) -> dict[tuple[str, str, str | None, str | None, str], LaneCell]:
    """Every lane cell of a side's runs, merged across the runs that measured it."""
    per_run = [_lane_cells(views) for views in runs]
    keys = dict.fromkeys(k for cells_ in per_run for k in cells_)
    return {k: _merge([cells_[k] for cells_ in per_run if k in cells_]) for k in keys}


def _change(base: float | None, new: float | None) -> float | None:
    if base is None or new is None or base <= 0:
        return None
    return new / base - 1


def _untested(b: LaneCell | None, n: LaneCell | None, policy: ComparePolicy) -> tuple[str, str] | None:
    """(result, why) for a lane cell that gets no test, or None when it can be tested."""
    if b is None or n is None:
        return "not compared", f"only in the {'new' if b is None else 'base'} run"
    machines = list(dict.fromkeys((*b.machines, *n.machines))) or [b.machine, n.machine]
    if len(set(machines)) > 1:
        diff = "; ".join(machines[0].differences(machines[1]))
        return "not compared", f"different machines ({machines[0].digest} vs {machines[1].digest}: {diff})"
    missing = [side for side, c in (("base", b), ("new", n)) if c.samples is None]
    if missing:
        return "not tested", f"{NO_SAMPLES} in the {' and '.join(missing)} run{'s' if len(missing) > 1 else ''}"
    busy = [f"the {side} run's {fmt.pct(c.foreign_cpu)}" for side, c in (("base", b), ("new", n))
            if c.foreign_cpu is not None and c.foreign_cpu > policy.max_foreign_cpu]
    if busy:
        return "not tested", (f"busy machine: other processes took more than {fmt.pct(policy.max_foreign_cpu)} of the "
                              f"CPU during the timing ({' and '.join(busy)})")
    if min(len(b.samples), len(n.samples)) < policy.min_samples:
        return "not tested", (f"n={len(b.samples)}/{len(n.samples)}, below the minimum of {policy.min_samples} "
                              f"samples per side")
    return None


def session_guard(b: LaneCell, n: LaneCell, policy: ComparePolicy) -> tuple[float, str]:
    """The drop a regression must exceed because sessions of the same code land apart: the policy's registered
    ``session_spread`` (this machine's, measured over repeated same-commit sessions), or, when a side has two or
    more runs and their medians lie further apart than that, their largest drop (measured here)."""
    measured = [x for x in (b.spread, n.spread) if x is not None]
    if measured and max(measured) > policy.session_spread:
        return max(measured), (f"measured: two runs of one side lie {fmt.pct(max(measured))} apart, more than the "
                               f"registered session_spread {fmt.pct(policy.session_spread)}")
    runs = f" ({len(b.run_medians)} base, {len(n.run_medians)} new run(s))" if measured else " (one run per side)"
    return policy.session_spread, f"registered: session_spread {fmt.pct(policy.session_spread)}{runs}"


def throughput_rows(runs_b: Sequence[Sequence[ReceiptView]], runs_n: Sequence[Sequence[ReceiptView]],
                    policy: ComparePolicy) -> list[ThroughputRow]:
    """Every lane cell of either side: tested where both sides recorded enough per-repeat samples on one
    machine, Holm-corrected across all of this comparison's tests, then judged against ``decode:N%`` and the
    session guard (:func:`session_guard`)."""
    lb, ln = side_cells(runs_b), side_cells(runs_n)
    keys = sorted(set(lb) | set(ln), key=lambda k: (str(k[2]), str(k[3]), k[0], k[1], k[4]))
    pending = []
    for key in keys:
        b, n = lb.get(key), ln.get(key)
        both = b is not None and n is not None and b.samples is not None and n.samples is not None
        statistic = "median" if both else "pooled"
        bv = (statistics.median(b.samples) if both else b.pooled) if b is not None else None
        nv = (statistics.median(n.samples) if both else n.pooled) if n is not None else None
        skip = _untested(b, n, policy)
        test = None if skip else stats.mann_whitney(n.samples, b.samples)
        pending.append((key, b, n, statistic, bv, nv, test, skip))
    adjusted = iter(stats.holm([t.p for *_, t, skip in pending if t is not None]))
    decode = policy.threshold("decode")
    out = []
    for key, b, n, statistic, bv, nv, test, skip in pending:
        change = _change(bv, nv)
        p_holm = next(adjusted) if test is not None else None
        guard, source = session_guard(b, n, policy) if test is not None else (None, "")
        if skip:
            result, why = skip
        elif p_holm < policy.alpha and change is not None and change < 0:
            past_decode = decode is not None and change < -decode.limit
            if past_decode and change < -guard:
                result, why = "regression", f"significant, slower than the {decode} threshold and the session guard ({source})"
            elif past_decode:
                result, why = "slower", f"significant, but within the session guard {fmt.pct(guard)} ({source})"
            else:
                result = "slower"
                why = (f"significant, within the {decode} threshold" if decode is not None
                       else "significant; no decode threshold declared")
        elif p_holm < policy.alpha and change is not None and change > 0:
            result, why = "faster", "significant (an improvement never fails)"
        else:
            result, why = "unchanged", "no significant change"
        out.append(ThroughputRow(key[0], key[1], key[2], key[3], key[4], b, n, statistic, bv, nv, change, test,
                                 p_holm, result, why, guard, source))
    return out


# -- the comparison --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Crossing:
    """A fail-on threshold and what crossed it (empty: not crossed)."""

    threshold: str
    description: str
    items: tuple[str, ...]


@dataclass(frozen=True)
class Comparison:
    """Everything ``bin/gatehouse compare`` reports and decides: both runs' headers, the policy, the rows,
    each threshold with what crossed it, the tests made (``tests``, the Holm family's size) and notes."""

    base: RunSide
    new: RunSide
    policy: ComparePolicy
    verdicts: tuple[VerdictRow, ...]
    quality: tuple[QualityRow, ...]
    throughput: tuple[ThroughputRow, ...]
    thresholds: tuple[Crossing, ...]
    notes: tuple[str, ...]
    same_machine: bool
    test_name: str = stats.TEST_NAME
    interleaved: bool = False
    runs: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())   # every run id of each side

    @property
    def tests(self) -> int:
        return sum(r.test is not None for r in self.throughput)

    @property
    def crossed(self) -> tuple[Crossing, ...]:
        return tuple(c for c in self.thresholds if c.items)

    @property
    def failed(self) -> bool:
        return bool(self.crossed)


def _subject(model, dtype, gate, nodeid=None) -> str:
    what = f"{model}-{dtype}" if model and dtype else (model or nodeid or "run")
    return f"{what} / {gate}" + (f" (`{nodeid}`)" if nodeid and model and dtype else "")


def _crossings(policy: ComparePolicy, verdicts, quality, throughput) -> tuple[Crossing, ...]:
    out = []
    for t in policy.fail_on:
        if t.kind == "verdict":
            items = [f"{_subject(r.model, r.dtype, r.gate, r.nodeid if r.scope == 'run' else None)}: "
                     f"{r.base} → {r.new or 'no receipt'}" for r in verdicts if r.change in ("regression", "disappeared")]
        elif t.kind == "decode":
            items = [f"{r.lane} {r.model}-{r.dtype} {r.cell}: {fmt.pct(r.change, sign=True)}"
                     for r in throughput if r.result == "regression"]
        else:
            items = [f"{r.model}-{r.dtype} {r.figure}" for r in quality if str(t) in r.crossed]
        out.append(Crossing(str(t), t.describe(), tuple(items)))
    return tuple(out)


def _notes(base: RunSide, new: RunSide, policy: ComparePolicy, throughput: Sequence[ThroughputRow]) -> list[str]:
    notes = []
    if base.campaign_sha256 != new.campaign_sha256:
        notes.append(f"the campaigns differ: {base.campaign_name} ({str(base.campaign_sha256)[:12]}) vs "
                     f"{new.campaign_name} ({str(new.campaign_sha256)[:12]})")
    if {h for h, _ in base.harness} != {h for h, _ in new.harness}:
        notes.append("the harness source differs (informational): "
                     f"{', '.join(str(h)[:12] for h, _ in base.harness) or 'none'} vs "
                     f"{', '.join(str(h)[:12] for h, _ in new.harness) or 'none'}")
    pb, pn = dict(base.packages), dict(new.packages)
    differ = [f"{name} {'/'.join(map(str, pb.get(name, ('absent',))))} → {'/'.join(map(str, pn.get(name, ('absent',))))}"
              for name in sorted(set(pb) | set(pn)) if pb.get(name) != pn.get(name)]
    if differ:
        notes.append("package versions differ (informational): " + ", ".join(differ))
    for side, name in ((base, "base"), (new, "new")):
        if len({h for h, _ in side.harness}) > 1:
            notes.append(f"the {name} run mixes {len(side.harness)} harness sources (a rerun after a code change)")
        if len(side.machines) > 1:
            notes.append(f"the {name} run's receipts come from {len(side.machines)} machines: "
                         f"{', '.join(m.label for m in side.machines)}")
        if side.invalid:
            notes.append(f"the {name} run has {side.invalid} receipt(s) the report could not read; they are not compared")
        if side.screening:
            notes.append(f"the {name} run is a screening run")
    tested = [r for r in throughput if r.test is not None]
    if tested:
        threshold = policy.alpha / len(tested)
        best = min(stats.smallest_p(r.test.n_x, r.test.n_y) for r in tested)
        if best >= threshold:
            need = stats.repeats_needed(policy.alpha, len(tested))
            notes.append(f"no throughput change can be significant here: with these sample sizes the smallest p a "
                         f"rank test can give is {fmt.figure(best)}, and Holm's correction across {len(tested)} tests "
                         f"needs one below {fmt.figure(threshold)} (alpha {fmt.figure(policy.alpha)} / {len(tested)}); "
                         f"{need or 'more than 100'} repeats per side would do ([policy.throughput] repeats)")
    if any(r.why.startswith(NO_SAMPLES) for r in throughput):
        notes.append("receipts written before per-repeat samples were recorded carry only pooled rates: their lanes "
                     "are shown, not tested")
    return notes


def compare(base: Collected | Sequence[Collected], new: Collected | Sequence[Collected],
            policy: ComparePolicy) -> Comparison:
    """What changed from ``base`` to ``new`` (each a run as :func:`harness.report.collect.collect` read it, or
    several runs of one side), judged by ``policy``.  Verdicts and quality figures compare each side's first
    run; throughput pools every run of a side and measures the sessions' spread from them."""
    bases = [base] if isinstance(base, Collected) else list(base)
    news = [new] if isinstance(new, Collected) else list(new)
    if not bases or not news:
        raise ValueError("compare needs at least one run on each side")
    decided_b = [decide(c) for c in bases]
    decided_n = [decide(c) for c in news]
    (rep_b, views_b), (rep_n, views_n) = decided_b[0], decided_n[0]
    side_b, side_n = _side(bases[0], rep_b), _side(news[0], rep_n)
    verdicts = verdict_rows(rep_b, views_b, rep_n, views_n)
    quality = quality_rows(views_b, views_n, policy)
    throughput = throughput_rows([v for _, v in decided_b], [v for _, v in decided_n], policy)
    machines = {m for c, (rep, _) in zip(bases + news, decided_b + decided_n) for m in _side(c, rep).machines}
    same = len(machines) == 1
    notes = _notes(side_b, side_n, policy, throughput)
    if len(bases) > 1 or len(news) > 1:
        notes.insert(0, f"{len(bases)} base and {len(news)} new run(s): verdicts and quality compare the first run of "
                        f"each side ({side_b.run_id}, {side_n.run_id}); throughput pools every run's repeats and "
                        f"measures the sessions' spread from their medians")
    return Comparison(base=side_b, new=side_n, policy=policy, verdicts=tuple(verdicts), quality=tuple(quality),
                      throughput=tuple(throughput), thresholds=_crossings(policy, verdicts, quality, throughput),
                      notes=tuple(notes), same_machine=same,
                      runs=(tuple(_side(c, r).run_id for c, (r, _) in zip(bases, decided_b)),
                            tuple(_side(c, r).run_id for c, (r, _) in zip(news, decided_n))))
