"""One A/B/A window of native probe processes, recorded into a receipt: the win rule's gate and the skill
overlay's cost gate share it (thin I/O around :func:`harness.winrule.lane.run_window` and the rule).

The campaign's ``[policy.winrule]`` (:class:`harness.gates.winrule.WinrulePolicy`) gives the registration
(cells, repeats, adaptive cap, effect, alpha, OFF/OFF ceiling), the drift policy's sampled bounds and
waivers. A start's configuration is a dict: ``threads`` and, for an overlay, ``overlay`` (a path; the
config's name carries the overlay file's SHA-256).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from .. import fingerprint, sampler
from ..fields import Where
from ..hashing import sha256_file
from ..progress import emit
from ..throughput import pins
from ..throughput.lanes import ProbeLane
from . import archive as archives
from . import budget as budgets
from . import journal
from .decision import Behavior, Decision
from .drift import DriftPolicy
from .evidence import ORDER, Start
from .lane import Schedule, registered, run_window, time_waves
from .record import draw_chart, render_markdown
from .registration import Metric, Registration
from .rule import decide


def registration(policy, name: str, schedule: Schedule, *, numerics_changing: bool = False,
                 required_effect: float | None = None) -> Registration:
    """The window's registration from ``[policy.winrule]``; ``required_effect`` overrides its effect (the overlay
    cost window asks whether the overlay costs more than the guard's effect)."""
    reg = Registration(
        name=name, version=policy.version, cells=policy.cells, repeats=policy.repeats,
        waves_per_repeat=policy.waves_per_repeat, primary=Metric("decode_tok_s", "tokens/s", True),
        guards=(Metric("prefill_ms", "ms", False, policy.guard_effect),),
        reported=(Metric("cpu_per_wall", "cpu s/s", False),),
        required_effect=policy.required_effect if required_effect is None else required_effect,
        alpha=policy.alpha, seeds="greedy", max_repeats=policy.max_repeats, step=policy.step,
        max_off_off=policy.max_off_off, numerics_changing=numerics_changing)
    return registered(reg, schedule)


def drift_policy(policy) -> DriftPolicy:
    default = DriftPolicy.default()
    return DriftPolicy(equal=default.equal, bounds=default.bounds, max_loadavg=policy.max_loadavg,
                       sampled=policy.sampled, waived=policy.waive)


def schedule_for(policy, work, heldout_ids: Sequence[int]) -> Schedule:
    longest = max(policy.repeats, policy.max_repeats or 0) * policy.waves_per_repeat
    return Schedule.build(heldout_ids, {c: len(work.cell(c).prompt_ids) for c in policy.cells}, longest)


def config_name(config: Mapping[str, Any]) -> str:
    shown = {k: (sha256_file(v)[:16] if k == "overlay" else v) for k, v in config.items()}
    return ",".join(f"{k}={v}" for k, v in sorted(shown.items()))


def archive_path(store_root: Path) -> Path:
    env = os.environ.get("GATEHOUSE_WINRULE_ARCHIVE")
    return Path(env) if env else store_root.parent / "winrule-archive.jsonl"


def budget_of(policy, campaign_path: Path | str) -> budgets.Budget | None:
    """The campaign's budget for one window (``[policy.winrule].max_window_seconds``), or None."""
    seconds = getattr(policy, "max_window_seconds", None)
    return None if seconds is None else budgets.Budget(seconds, Where(campaign_path, "policy.winrule.max_window_seconds"))


@dataclass
class Window:
    decision: Decision
    starts: list[Start]
    schedule: Schedule
    archived_rows: int
    block: dict[str, Any]


def _resume(out: Path, ident: Mapping[str, Any]) -> tuple[tuple[Mapping[str, Any], ...], dict[str, Any]]:
    """The blocks an earlier attempt at this window recorded in this run directory and this window may reuse (the
    journal with the most reusable blocks), and what was decided about every journal found, each said once."""
    kept = journal.set_aside(out / journal.NAME)
    best: tuple[Mapping[str, Any], ...] = ()
    source, said = None, []
    for path in journal.earlier(out):
        try:
            found = journal.read(path)
        except journal.JournalError as exc:
            said.append(f"{exc}; nothing reused from it, the file is kept")
            continue
        blocks, why = journal.reusable(found, ident)
        said.append(why + (f"; {found.torn}" if found.torn else ""))
        if len(blocks) > len(best):
            best, source = blocks, str(path)
    for line in said:
        emit(f"win rule {ident['registration']['name']}: {line}")
    return best, {"from": source, "blocks": len(best), "journals": said,
                  "set_aside": None if kept is None else str(kept)}


def _estimate(receipt, reg: Registration, lanes, labels, schedule: Schedule, work, recorded, budget) -> None:
    """Time one generation per cell on each loaded probe, estimate the window, say so, and refuse it (raise,
    naming the budget's field) when it exceeds the campaign's budget."""
    done = [max((b["end"] for b in recorded if b["label"] == label), default=0) for label in labels]
    est = budgets.estimate(reg, time_waves(lanes, schedule, reg.cells, work.new_tokens), work.warmup, done)
    emit(f"win rule {reg.name}: estimated {est.render()}")
    receipt.note("winrule_estimate", {"first_look_s": est.first_look_s, "most_s": est.most_s, "waves": est.waves,
                                      "warmups": est.warmups, "basis": est.basis,
                                      "budget_s": None if budget is None else budget.seconds})
    refused = None if budget is None else budgets.refusal(est, budget.seconds, budget.where, reg.name)
    if refused is not None:
        raise refused


def run(receipt, *, label: str, reg: Registration, drift: DriftPolicy, binary: Path, graph: Path,
        graph_sha256: str, configs: Sequence[Mapping[str, Any]], work, schedule: Schedule, archive_file: Path,
        run_name: str, expected: str, behavior: Behavior | None = None,
        budget: budgets.Budget | None = None) -> Window:
    """Three probe processes (control, candidate, control) on ``graph``; estimate the window's time (refused over
    ``budget``), decide, archive the controls, and write ``decision.json``, ``decision.md``, ``starts.json`` and
    ``chart.png`` into the receipt's evidence, beside ``starts.jsonl``, the journal each start block is appended to
    as it ends (and whose blocks a rerun of this window in the same run directory reuses when its registration
    and machine fingerprint match, :mod:`harness.winrule.journal`)."""
    max_seq = max(len(work.cell(c).prompt_ids) for c in reg.cells) + work.new_tokens + 8
    source = fingerprint.harness_source()
    commit = source.get("git_commit")
    _, mhz_source = sampler.read_mhz()
    context = {"workload_sha256": schedule.sha256, "graph_sha256": graph_sha256,
               "clock_source": f"{mhz_source or 'none'}; probe steady_clock"}
    archive = archives.read(archive_file) if archive_file.exists() else ()
    labels = [f"{label}-{i + 1}-{role}" for i, role in enumerate(ORDER)]
    names = [config_name(c) for c in configs]
    out = receipt.evidence_dir
    ident = journal.identity(reg, labels, names, context, fingerprint.machine(), drift.equal, source.get("sha256"))
    recorded, resumed = _resume(out, ident)
    receipt.note("winrule_resume", resumed)
    with contextlib.ExitStack() as stack:
        lanes, loads = [], []
        for name, config in zip(labels, configs):
            lane = stack.enter_context(ProbeLane(binary, graph, int(config["threads"]), name=name, max_seq=max_seq,
                                                 overlay=config.get("overlay")))
            loads.append(lane.load())   # a load failure is an error of the test: nothing was measured
            lanes.append(lane)
        pins.pin_runtime(receipt, probe_binary=binary, probe_load=loads[0])
        _estimate(receipt, reg, lanes, labels, schedule, work, recorded, budget)
        path = out / journal.NAME
        journal.append(path, journal.header(ident, commit=commit, drift=drift, behavior=behavior, resumed=resumed))
        with receipt.sampling("the A/B/A window: three probe processes, every block"):
            decision, starts, raws = run_window(
                reg, lanes, names, labels, schedule, new_tokens=work.new_tokens, warmup=work.warmup,
                fingerprint=lambda: {**fingerprint.machine(), **context}, commit=commit,
                decide=lambda s: decide(s, reg, drift, archive, behavior), recorded=recorded,
                journal=lambda record: journal.append(path, record))
    rows = archives.control_rows(starts, reg, window=f"{run_name}/{label}",
                                 date=dt.datetime.now(dt.timezone.utc).date().isoformat(), machine_keys=drift.equal)
    if rows:
        archives.append(archive_file, rows)
    (out / "decision.json").write_text(json.dumps(decision.as_dict(), indent=1))
    (out / "decision.md").write_text(render_markdown(decision))
    (out / "starts.json").write_text(json.dumps({"raw": raws, "starts": [s.as_dict() for s in starts]}, indent=1))
    draw_chart(decision, out / "chart.png")
    block = {"window": label, "verdict": decision.verdict, "verdict_before_override": decision.verdict_before_override,
             "reasons": list(decision.reasons), "expected": expected, "markdown": "decision.md", "chart": "chart.png",
             "archive": str(archive_file), "archived_rows": len(rows), "bad_evidence": list(decision.bad_evidence),
             "looks": [x.repeats for x in decision.looks], "outputs": decision.outputs,
             "sampled": {s.label: dict(s.samples) for s in starts},
             "waived": dict(decision.drift.waived) if decision.drift else {}, "schedule_sha256": schedule.sha256}
    return Window(decision, starts, schedule, len(rows), block)


def control_token_ms(decision: Decision) -> float | None:
    """The controls' median milliseconds per decoded token on the fastest cell of a window's decision (None when
    it measured none): what decides whether a window's verdict can be trusted across processes (the gates'
    ``min_token_ms``)."""
    import statistics

    rates = [statistics.median(s.control) for s in decision.series
             if s.metric == "decode_tok_s" and s.control and all(v > 0 for v in s.control)]
    return 1000.0 / max(rates) if rates else None


def ratio_figures(decision: Decision) -> dict[str, Any]:
    from ..verdict import Measurement

    return {f"{s.cell}_candidate_over_control": Measurement(sum(s.candidate) / sum(s.control), "ratio", len(s.candidate))
            for s in decision.series if s.metric == "decode_tok_s" and s.result is not None}


__all__ = ["Window", "archive_path", "budget_of", "config_name", "control_token_ms", "drift_policy", "ratio_figures", "registration", "run",
           "schedule_for"]
