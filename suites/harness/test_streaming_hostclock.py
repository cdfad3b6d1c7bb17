"""The streaming gate vouches for the engine's timings with the host's: an engine that under-reports its
work, or whose clock does not keep the host's time, fails with the figures (it passed before)."""

from harness.streaming.gate import Evidence, decide
from harness.streaming.hostclock import ClockBounds, check
from harness.streaming.profile import StreamProfile, emission_count
from harness.streaming.protocol import ModelIdentity
from harness.streaming.suite import Policy
from harness.streaming.synthetic import event_log
from harness.streaming.tokens import TokenTable

TABLE = TokenTable.from_words(["zero", "one", "two", "three", "stop", "go"])
MODEL = ModelIdentity(sha256="ab" * 32, vocab_size=TABLE.size, cache_bytes_per_token=2 * 2 * 64 * 4)
PROFILE = StreamProfile("rt480b4", "realtime", 480, 4, 64, 8)
SAMPLES = 48_000
POLICY = Policy(max_rtf=1.0, max_work_p95_token_periods=1.0, max_feeder_lateness_p99_seconds=1.0,
                max_rss_growth_kib=10**6, max_wer=1.0)


def _run(work_per_window: float):
    ids = [i % TABLE.size for i in range(emission_count(SAMPLES, PROFILE))]
    return ids, event_log(PROFILE, SAMPLES, ids, MODEL, TABLE, work_per_window=work_per_window)


def _host_view(events, latency=0.0005):
    """When the host received each line: just after the engine says it wrote it."""
    return tuple({"event_index": i, "since_feeder_start_seconds": e.get("finished_seconds", e.get("seconds", 0.0))
                  + latency} for i, e in enumerate(events))


def _work(events):
    return sum(e["work_seconds"] for e in events if e["kind"] == "batch")


def _evidence(claimed, observed, cpu, ids):
    return Evidence(events=tuple(claimed), feeder=(), pcm_bytes=4 * SAMPLES, samples=SAMPLES,
                    reference_ids=tuple(ids), reference_text="",
                    observations=observed, engine_cpu_seconds=cpu)


def test_an_honest_engine_passes_the_host_clock():
    ids, events = _run(0.02)
    reasons, figures = check(events, _host_view(events), _work(events))
    assert reasons == []
    assert figures["host_clock_offset_spread_seconds"].value < 1e-9
    assert figures["host_clock_drift_seconds"].value < 1e-9
    assert abs(figures["engine_cpu_over_claimed_work"].value - 1.0) < 1e-9


def test_an_engine_that_under_reports_its_work_tenfold_fails_with_the_figures():
    ids, real = _run(0.02)            # what the engine did: the host saw these lines at these times
    _, claimed = _run(0.002)          # what it says it did
    reasons, figures = check(claimed, _host_view(real), _work(real))
    # at the real pace each batch starts at its audio deadline, so the lie barely accumulates as drift: the CPU
    # check is the one that catches it
    assert any("under-reports its work" in r and "10.0x" in r for r in reasons), reasons
    assert figures["host_clock_offset_spread_seconds"].value > 0.1
    # and through the gate's own decision, which passed such an engine before the host clock was checked
    verdict = decide(_evidence(claimed, _host_view(real), _work(real), ids), PROFILE, MODEL, TABLE, POLICY)
    assert not verdict.passed and any(r.startswith("host clock:") for r in verdict.reasons)
    honest = decide(_evidence(real, _host_view(real), _work(real), ids), PROFILE, MODEL, TABLE, POLICY)
    assert not any(r.startswith("host clock:") for r in honest.reasons), honest.reasons


def test_no_host_receive_times_fails_closed():
    _, events = _run(0.01)
    reasons, _ = check(events, (), _work(events))
    assert reasons and "cannot be vouched for" in reasons[0]


def test_a_tiny_run_records_the_ratio_without_judging_it():
    _, events = _run(0.0001)
    reasons, figures = check(events, _host_view(events), 0.04)     # start-up CPU dominates below 0.05 s
    assert not any("under-reports" in r for r in reasons) and figures["engine_cpu_over_claimed_work"].value > 3


def _batches(events):
    return [i for i, e in enumerate(events) if e["kind"] == "batch"]


def test_a_host_that_was_late_for_a_moment_passes_with_the_spread_recorded():
    """The host's reader late by 0.4 s for two batch lines mid-run (a delivery delay, never negative): the spread of
    all offsets shows it, the lowest offset of each third does not move."""
    _, events = _run(0.02)
    view = list(_host_view(events))
    batches = _batches(events)
    assert len(batches) >= 9, len(batches)
    for i in batches[len(batches) // 2: len(batches) // 2 + 2]:
        view[i] = {**view[i], "since_feeder_start_seconds": view[i]["since_feeder_start_seconds"] + 0.4}
    reasons, figures = check(events, tuple(view), _work(events))
    assert reasons == []
    assert abs(figures["host_clock_offset_spread_seconds"].value - 0.4) < 1e-9
    assert figures["host_clock_drift_seconds"].value < 1e-9


def test_an_engine_clock_running_five_percent_slow_fails():
    """Claimed times 5 % behind the host's over a 3 s run: every third's lowest offset is later than the last."""
    ids, real = _run(0.02)
    slow = [{**e, "finished_seconds": e["finished_seconds"] * 0.95} if e["kind"] == "batch" else e for e in real]
    reasons, figures = check(slow, _host_view(real), _work(real))
    assert any("drift from the host's receive times" in r for r in reasons), reasons
    assert figures["host_clock_drift_seconds"].value > ClockBounds().max_drift_seconds


def test_the_stretches_have_two_batches_each_and_a_short_run_judges_every_batch():
    from harness.streaming.hostclock import thirds_lowest

    offs = [(float(v), w) for w, v in enumerate([5, 1, 4, 2, 6, 3, 9])]
    assert thirds_lowest(offs) == [(1.0, 1), (2.0, 3), (3.0, 5)]            # 7: 2 + 2 + 3
    assert thirds_lowest(offs[:6]) == [(1.0, 1), (2.0, 3), (3.0, 5)]       # 6: 2 + 2 + 2
    assert thirds_lowest(offs[:5]) == [(1.0, 1), (2.0, 3)]                 # 5: 2 + 3
    assert thirds_lowest(offs[:4]) == [(1.0, 1), (2.0, 3)]                 # 4: 2 + 2
    assert thirds_lowest(offs[:3]) == offs[:3] and thirds_lowest(offs[:1]) == offs[:1]
    assert thirds_lowest([]) == []
