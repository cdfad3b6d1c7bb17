"""The streaming gate's pure decision: capture, feeder, protocol, reference ids and the tier's policy."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.streaming import hostclock, metrics
from harness.streaming.capture import feeder_violations
from harness.streaming.profile import TOKEN_PERIOD_SECONDS, StreamProfile
from harness.streaming.protocol import WINDOW, ModelIdentity
from harness.streaming.suite import Policy
from harness.streaming.tokens import TokenTable, oracle
from harness.streaming.validate import Bounds, validate
from harness.verdict import Measurement, Verdict


@dataclass(frozen=True)
class Evidence:
    """What one gate run recorded, plus the PyTorch reference's ids for the same input and profile."""

    events: tuple
    feeder: tuple
    pcm_bytes: int
    samples: int
    reference_ids: tuple
    reference_text: str
    capture_failure: str | None = None
    peak_rss_kib: int | None = None
    rss_samples: tuple = ()
    must_trim: bool = False
    score_wer: bool = False
    reference_margins: tuple = field(default=())
    observations: tuple = ()                 # the host's receive time of each event line
    engine_cpu_seconds: float | None = None  # GNU time's user + system seconds of the engine


def _le(figures, name, limit, label, reasons):
    value = figures[name].value
    if value is None:
        return
    if value > limit:
        reasons.append(f"policy: {label} {value:.6g} exceeds {limit:.6g}")


def decide(ev: Evidence, profile: StreamProfile, model: ModelIdentity, table: TokenTable, policy: Policy,
           bounds: Bounds = Bounds()) -> Verdict:
    reasons: list[str] = []
    figures: dict[str, Measurement] = {}
    if ev.capture_failure:
        reasons.append(f"capture failed: {ev.capture_failure}")
    reasons += feeder_violations(ev.feeder, ev.pcm_bytes)
    figures |= metrics.feeder_figures(ev.feeder)
    figures |= metrics.memory_figures(ev.peak_rss_kib, ev.rss_samples)
    if ev.capture_failure:
        return Verdict.from_checks(reasons, figures)
    events = list(ev.events)
    protocol = validate(events, profile, samples=ev.samples, model=model, table=table, bounds=bounds,
                        require_trim=ev.must_trim)
    reasons += [f"protocol: {r}" for r in protocol.reasons]
    figures |= protocol.figures
    if not protocol.passed:
        return Verdict.from_checks(reasons, figures)
    figures |= metrics.stream_figures(events, profile, ev.samples)
    clock_reasons, clock_figures = hostclock.check(events, ev.observations, ev.engine_cpu_seconds)
    reasons += clock_reasons
    figures |= clock_figures
    ids = [e["token_id"] for e in events if e.get("kind") == WINDOW]
    ref = list(ev.reference_ids)
    if ids != ref:
        k = next((i for i, (a, b) in enumerate(zip(ids, ref)) if a != b), min(len(ids), len(ref)))
        margin = ev.reference_margins[k] if k < len(ev.reference_margins) else None
        reasons.append(f"reference: engine token ids differ from the PyTorch reference at window {k}: engine "
                       f"{ids[k] if k < len(ids) else None}, reference {ref[k] if k < len(ref) else None} "
                       f"(reference logit margin {margin})")
    figures["reference_ids_equal"] = Measurement(ids == ref, "bool", len(ref))
    text = oracle(ids, table).text
    wer, words = metrics.word_error_rate([(ev.reference_text, text)])
    figures["wer"] = Measurement(wer, "ratio", words)
    figures["text_words"] = Measurement(len(text.split()), "count")
    _le(figures, "rtf", policy.max_rtf, "batch-work real-time factor", reasons)
    _le(figures, "work_seconds_per_window_p95", policy.max_work_p95_token_periods * TOKEN_PERIOD_SECONDS,
        "p95 work seconds per window", reasons)
    _le(figures, "feeder_lateness_seconds_p99", policy.max_feeder_lateness_p99_seconds, "feeder lateness p99 (s)",
        reasons)
    if ev.must_trim:
        _le(figures, "rss_growth_kib", policy.max_rss_growth_kib, "RSS growth across the long case (KiB)", reasons)
    if ev.score_wer:
        _le(figures, "wer", policy.max_wer, "word error rate", reasons)
    return Verdict.from_checks(reasons, figures)
