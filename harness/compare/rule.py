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
  from repeated same-commit sessions) or that measured spread, whichever is larger
  (:func:`harness.compare.throughput.session_guard`).  Repeats within one session are not independent draws of
  the session-to-session variation: measured here, one lane cell's median moved up to 27 % between six
  sessions of the same commit while each session's repeats kept a CV of a few percent.

The throughput rows are :mod:`harness.compare.throughput`'s, each run's header and machine fingerprint
:mod:`harness.compare.sides`'; the verdict and quality rows and the comparison itself are here.

A regression is what a ``fail_on`` threshold of the policy (:mod:`harness.compare.policy`) says it is; a
significant speed-up is reported and never fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .. import fmt
from ..report import qualify
from ..report.assemble import decide
from ..report.collect import Collected
from ..view import ReceiptView
from . import stats
from .policy import ComparePolicy
from .sides import RunSide, run_side
from .timecost import TimeRow, cold_builds, time_rows
from .throughput import NO_SAMPLES, ThroughputRow, throughput_rows

QUANTIZATION_GATE = "quantization"
BEHAVIOR_GATE = "behavior"


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
    time: tuple[TimeRow, ...] = ()                              # the tool's own time (harness.compare.timecost)
    builds: tuple[tuple[int, float], tuple[int, float]] = ((0, 0.0), (0, 0.0))   # each side's (built, seconds)

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


def _crossings(policy: ComparePolicy, verdicts, quality, throughput, time=()) -> tuple[Crossing, ...]:
    out = []
    for t in policy.fail_on:
        if t.kind == "verdict":
            items = [f"{_subject(r.model, r.dtype, r.gate, r.nodeid if r.scope == 'run' else None)}: "
                     f"{r.base} → {r.new or 'no receipt'}" for r in verdicts if r.change in ("regression", "disappeared")]
        elif t.kind == "time":
            items = [f"{r.gate}: {fmt.num(r.base_seconds)} s → {fmt.num(r.new_seconds)} s "
                     f"({fmt.pct(r.change, sign=True)})" for r in time if r.compared and r.change > t.limit]
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
    side_b, side_n = run_side(bases[0], rep_b), run_side(news[0], rep_n)
    verdicts = verdict_rows(rep_b, views_b, rep_n, views_n)
    quality = quality_rows(views_b, views_n, policy)
    throughput = throughput_rows([v for _, v in decided_b], [v for _, v in decided_n], policy)
    machines = {m for c, (rep, _) in zip(bases + news, decided_b + decided_n) for m in run_side(c, rep).machines}
    same = len(machines) == 1
    notes = _notes(side_b, side_n, policy, throughput)
    time = time_rows(rep_b, rep_n)
    if len(bases) > 1 or len(news) > 1:
        notes.insert(0, f"{len(bases)} base and {len(news)} new run(s): verdicts and quality compare the first run of "
                        f"each side ({side_b.run_id}, {side_n.run_id}); throughput pools every run's repeats and "
                        f"measures the sessions' spread from their medians")
    return Comparison(base=side_b, new=side_n, policy=policy, verdicts=tuple(verdicts), quality=tuple(quality),
                      throughput=tuple(throughput), thresholds=_crossings(policy, verdicts, quality, throughput, time),
                      notes=tuple(notes), same_machine=same, time=tuple(time),
                      builds=(cold_builds(rep_b), cold_builds(rep_n)),
                      runs=(tuple(run_side(c, r).run_id for c, (r, _) in zip(bases, decided_b)),
                            tuple(run_side(c, r).run_id for c, (r, _) in zip(news, decided_n))))
