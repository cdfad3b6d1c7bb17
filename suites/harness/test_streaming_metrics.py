"""Streaming metrics are pure functions of the recorded events, feeder records and memory samples."""

import pytest

from harness.streaming.metrics import (feeder_figures, memory_figures, nearest_rank, stream_figures,
                                       word_error_rate, word_errors)
from harness.streaming.profile import StreamProfile, emission_count
from harness.streaming.protocol import ModelIdentity
from harness.streaming.synthetic import event_log
from harness.streaming.tokens import TokenTable, oracle

TABLE = TokenTable.from_words(["red", "green", "blue"])
MODEL = ModelIdentity("cd" * 32, TABLE.size, 1024)


def test_nearest_rank():
    assert nearest_rank([], 0.95) is None
    assert nearest_rank(range(1, 101), 0.95) == 95
    assert nearest_rank([3, 1, 2], 0.5) == 2 and nearest_rank([5], 0.99) == 5


@pytest.mark.parametrize("ref,hyp,edits", [
    ("a b c", "a b c", 0), ("a b c", "a c", 1), ("a b c", "a x b c", 1), ("a b", "", 2), ("", "a", 1),
    ("one two three", "one too three four", 2),
])
def test_word_errors(ref, hyp, edits):
    assert word_errors(ref, hyp)[0] == edits


def test_word_error_rate_is_corpus_level():
    assert word_error_rate([("a b c d", "a b c d"), ("a b", "a")]) == (1 / 6, 6)
    assert word_error_rate([]) == (None, 0)


def test_stream_figures():
    p = StreamProfile("b2", "realtime", 160, 2, 48, 4)
    samples = 32_000
    n = emission_count(samples, p)
    ids = [0] * n
    ids[10] = 2
    events = event_log(p, samples, ids, MODEL, TABLE, work_per_window=0.002, queue=0.001)
    fig = stream_figures(events, p, samples)
    assert fig["work_seconds_per_window_p95"].value == pytest.approx(0.002)
    assert fig["windows_over_token_period"].value == 0
    assert fig["queue_seconds_max"].value == pytest.approx(0.001)
    assert fig["rtf"].value == pytest.approx(sum(e["work_seconds"] for e in events if e["kind"] == "batch") / 2.0)
    assert fig["first_text_audio_clock_seconds"].value == next(e["seconds"] for e in events
                                                               if e["kind"] == "text_delta")
    assert fig["first_readable_text_after_source_seconds"].value > 0
    assert fig["eof_drain_batches"].value >= 1
    assert oracle(ids, TABLE).text == "green"


def test_stream_figures_without_text():
    p = StreamProfile("b1", "hf", 80, 1, 48, 4)
    events = event_log(p, 8000, [0] * emission_count(8000, p), MODEL, TABLE)
    fig = stream_figures(events, p, 8000)
    assert fig["first_text_audio_clock_seconds"].value is None


def test_feeder_and_memory_figures():
    records = [{"deadline_seconds": 0.02 * k, "before_seconds": 0.02 * k + 1e-4, "after_seconds": 0.02 * k + 2e-4}
               for k in range(1, 101)]
    fig = feeder_figures(records)
    assert fig["feeder_lateness_seconds_p99"].value == pytest.approx(2e-4)
    assert fig["feeder_early_chunks"].value == 0
    mem = memory_figures(5000, [(t, 4000 + (t > 5) * 10) for t in range(10)])
    assert mem["rss_growth_kib"].value == 10 and mem["peak_rss_kib"].value == 5000
    assert memory_figures(None, [])["rss_growth_kib"].value is None
