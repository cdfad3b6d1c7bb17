"""The pure validator of a recorded event log: every protocol invariant, one reason per violated check."""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.streaming import protocol as P
from harness.streaming.profile import SAMPLE_RATE, StreamProfile, batch_bounds, emission_count, needs_eof
from harness.streaming.profile import source_deadline_seconds
from harness.streaming.rolling import crosses_trim, window_clocks
from harness.streaming.tokens import TokenTable, ids_digest, oracle
from harness.verdict import Measurement, Verdict


@dataclass(frozen=True)
class Bounds:
    """Limits the engine must stay within, and the tolerance for recomputed times."""

    cache_bytes: int = 64 * 1024 * 1024
    audio_capacity_samples: int = 32_768
    tolerance_seconds: float = 1e-6


class _Findings:
    """Collects violations per check: the first instance in words and how many there were."""

    def __init__(self):
        self._first: dict[str, str] = {}
        self._count: dict[str, int] = {}

    def fail(self, check: str, detail: str):
        self._count[check] = self._count.get(check, 0) + 1
        self._first.setdefault(check, detail)

    def require(self, ok: bool, check: str, detail: str) -> bool:
        if not ok:
            self.fail(check, detail)
        return ok

    def reasons(self) -> list[str]:
        out = []
        for check, detail in self._first.items():
            n = self._count[check]
            out.append(f"{check}: {detail}" + (f" ({n} violations)" if n > 1 else ""))
        return out


def _is_int(v) -> bool:
    return type(v) is int


def _is_num(v) -> bool:
    return type(v) in (int, float) and math.isfinite(v)


def _fields(f: _Findings, ev: dict, where: str, ints=(), floats=()) -> bool:
    ok = True
    for k in ints:
        ok &= f.require(_is_int(ev.get(k)), "malformed field", f"{where} {k}={ev.get(k)!r} is not an integer")
    for k in floats:
        ok &= f.require(_is_num(ev.get(k)), "malformed field", f"{where} {k}={ev.get(k)!r} is not a finite number")
    return ok


def _order(f: _Findings, events: list[dict]):
    """ready; then per batch its windows, each optionally followed by its one text delta, then the batch;
    complete last."""
    if not events:
        return
    f.require(events[0].get("kind") == P.READY, "event order", f"first event is {events[0].get('kind')!r}, not ready")
    f.require(events[-1].get("kind") == P.COMPLETE, "event order",
              f"last event is {events[-1].get('kind')!r}, not complete")
    next_window, batch_start, last, delta_for = 0, 0, None, set()
    for n, ev in enumerate(events):
        kind, where = ev.get("kind"), f"event #{n} ({ev.get('kind')})"
        if kind == P.READY:
            f.require(n == 0, "event order", f"{where} is a ready event after the start")
        elif kind == P.COMPLETE:
            f.require(n == len(events) - 1, "event order", f"{where} is a complete event before the end")
            f.require(batch_start == next_window, "event order",
                      f"windows {batch_start}..{next_window - 1} have no batch event before complete")
        elif kind == P.WINDOW:
            f.require(ev.get("index") == next_window, "event order",
                      f"{where} has index {ev.get('index')!r}, expected {next_window}")
            next_window += 1
        elif kind == P.DELTA:
            i = ev.get("index")
            ok = last is not None and last.get("kind") == P.WINDOW and last.get("index") == i and i not in delta_for
            f.require(ok, "event order", f"{where} for window {i!r} does not directly follow that window's event")
            delta_for.add(i)
        elif kind == P.BATCH:
            ok = ev.get("start_window") == batch_start and ev.get("end_window_exclusive") == next_window
            f.require(ok and next_window > batch_start, "event order",
                      f"{where} covers {ev.get('start_window')!r}..{ev.get('end_window_exclusive')!r}, "
                      f"but the windows since the previous batch are {batch_start}..{next_window}")
            batch_start = next_window
        last = ev


def _ready(f: _Findings, ready: dict, profile: StreamProfile, model: P.ModelIdentity, bounds: Bounds):
    for key, value in P.expected_ready(profile, model).items():
        got = ready.get(key)
        f.require(got == value and type(got) is type(value), "ready profile",
                  f"ready {key}={got!r}, expected {value!r}")
    cap = ready.get("retained_audio_capacity_samples")
    f.require(_is_int(cap) and 0 < cap <= bounds.audio_capacity_samples, "ready profile",
              f"ready retained_audio_capacity_samples={cap!r} is not within 1..{bounds.audio_capacity_samples}")
    f.require(ready.get("seconds") == 0.0, "ready profile", f"ready seconds={ready.get('seconds')!r}; the audio "
              "clock origin is the ready event")


def _window_clocks(f: _Findings, windows: list[dict], clocks, per_token: int):
    """Each window's absolute and rolling clocks, trims, logical cache, phases and timestamp against the
    clocks :func:`window_clocks` computes for the profile."""
    previous = -math.inf
    for w, c in zip(windows, clocks):
        i = c.index
        f.require(w["index"] == i, "window index", f"window event #{i} has index {w['index']}")
        f.require(w["absolute_text_position"] == c.absolute_text_position
                  and w["absolute_encoder_position"] == c.absolute_encoder_position, "absolute clock",
                  f"window {i} absolute positions {w['absolute_text_position']}/{w['absolute_encoder_position']}, "
                  f"expected {c.absolute_text_position}/{c.absolute_encoder_position}")
        f.require(w["text_position"] == c.text_position and w["encoder_position"] == c.encoder_position,
                  "rolling clock", f"window {i} rolling positions {w['text_position']}/{w['encoder_position']}, "
                  f"expected {c.text_position}/{c.encoder_position}")
        f.require(w["rolling_dropped_tokens"] == c.rolling_dropped_tokens
                  and w["rolling_trim_count"] == c.rolling_trim_count, "rolling trim",
                  f"window {i} dropped {w['rolling_dropped_tokens']} in {w['rolling_trim_count']} trims, "
                  f"expected {c.rolling_dropped_tokens} in {c.rolling_trim_count}")
        f.require(w["cache_logical_bytes"] == w["text_position"] * per_token, "logical cache",
                  f"window {i} cache_logical_bytes={w['cache_logical_bytes']}, expected "
                  f"{w['text_position']} x {per_token}")
        phases = w.get("phase_seconds")
        f.require(isinstance(phases, list) and len(phases) == len(P.PHASES)
                  and all(_is_num(p) and p >= 0 for p in phases), "window phases",
                  f"window {i} phase_seconds={phases!r} is not {len(P.PHASES)} non-negative numbers")
        f.require(_is_num(w.get("logit_margin")) and w["logit_margin"] >= 0, "window phases",
                  f"window {i} logit_margin={w.get('logit_margin')!r} is not a non-negative number")
        f.require(w["seconds"] >= previous, "window timestamps",
                  f"window {i} at {w['seconds']} s is before window {i - 1} at {previous} s")
        previous = w["seconds"]


def _batches(f: _Findings, batches: list[dict], windows: list[dict], windows_ok: bool, *, final: dict, ready: dict,
             count: int, samples: int, profile: StreamProfile, bounds: Bounds, per_token: int) -> tuple[set, float]:
    """Batches: coverage, shape, times, cache, EOF and source deadlines.  Returns the cache allocations the
    batches reported and when the last of them finished."""
    tol = bounds.tolerance_seconds
    elapsed = final.get("elapsed_seconds") if _is_num(final.get("elapsed_seconds")) else math.inf
    expected_bounds = batch_bounds(count, profile)
    f.require(len(batches) == len(expected_bounds), "batch coverage",
              f"{len(batches)} batch events, expected {len(expected_bounds)}")
    allocations, capacities, prior_finish, covered = set(), set(), -math.inf, 0
    for n, b in enumerate(batches):
        where = f"batch #{n}"
        if not _fields(f, b, where, P.BATCH_INTS, P.BATCH_FLOATS):
            continue
        start, end = b["start_window"], b["end_window_exclusive"]
        f.require(start == covered, "batch coverage", f"{where} starts at window {start}, expected {covered}")
        want = expected_bounds[n] if n < len(expected_bounds) else None
        f.require((start, end) == want, "batch shape", f"{where} covers [{start}, {end}), expected {want}")
        covered = end
        t0, t1, work = b["started_seconds"], b["finished_seconds"], b["work_seconds"]
        f.require(prior_finish <= t0 <= t1 <= elapsed, "batch times",
                  f"{where} runs {t0}..{t1} s after the previous batch finished at {prior_finish} s "
                  f"(elapsed {elapsed} s)")
        f.require(abs((t1 - t0) - work) <= tol, "batch work", f"{where} work_seconds={work}, but it ran "
                  f"{t1 - t0} s")
        prior_finish = t1
        inside = windows[start:end] if windows_ok and 0 <= start < end else []
        f.require(all(t0 <= w["seconds"] <= t1 for w in inside), "window timestamps",
                  f"a window of {where} lies outside its interval {t0}..{t1} s")
        if windows_ok and 0 < end <= len(windows):
            last = windows[end - 1]
            f.require(b["rolling_trim_count"] == last["rolling_trim_count"]
                      and b["decoder_cached_tokens"] == last["text_position"], "batch cache metadata",
                      f"{where} reports {b['decoder_cached_tokens']} cached tokens after "
                      f"{b['rolling_trim_count']} trims; its last window has {last['text_position']} after "
                      f"{last['rolling_trim_count']}")
            processed = (profile.startup_tokens + end - 1) * 4
            f.require(all(w["processed_absolute_encoder_position"] == processed for w in inside),
                      "processed encoder clock", f"a window of {where} does not report {processed} frames "
                      "materialized for its batch")
        allocated = b["cache_allocated_bytes"]
        allocations.add(allocated)
        expected_alloc = per_token * profile.context_tokens
        f.require(allocated == expected_alloc, "cache allocation",
                  f"{where} cache_allocated_bytes={allocated}, expected {expected_alloc}")
        f.require(allocated <= bounds.cache_bytes, "cache bound",
                  f"{where} allocates {allocated} bytes, above the bound {bounds.cache_bytes}")
        f.require(all(w["cache_logical_bytes"] <= allocated for w in inside), "logical cache",
                  f"a window of {where} holds more logical cache than the {allocated} bytes allocated")
        capacity = b["retained_audio_capacity_samples"]
        capacities.add(capacity)
        f.require(capacity <= bounds.audio_capacity_samples and capacity == ready.get(
            "retained_audio_capacity_samples"), "audio storage",
            f"{where} retains {capacity} samples; ready said {ready.get('retained_audio_capacity_samples')!r}, "
            f"bound {bounds.audio_capacity_samples}")
        if end < 1:
            continue
        eof = needs_eof(end - 1, samples, profile)
        f.require(type(b.get("input_eof")) is bool and b["input_eof"] == eof, "eof flag",
                  f"{where} input_eof={b.get('input_eof')!r}, expected {eof}")
        deadline = source_deadline_seconds(end - 1, samples, profile)
        f.require(b["source_audio_ready_seconds"] == deadline, "source deadline",
                  f"{where} source_audio_ready_seconds={b['source_audio_ready_seconds']}, expected {deadline}")
        f.require(abs(b["relative_to_audio_clock_seconds"] - (t0 - deadline)) <= tol, "relative clock",
                  f"{where} relative_to_audio_clock_seconds={b['relative_to_audio_clock_seconds']}, expected "
                  f"{t0 - deadline}")
        f.require(t0 + tol >= deadline, "source causality",
                  f"{where} started at {t0} s, before its source audio could have arrived at {deadline} s")
    f.require(covered == count, "batch coverage", f"batches cover {covered} windows, expected {count}")
    f.require(len(allocations) <= 1, "cache allocation", f"cache allocation changed: {sorted(allocations)}")
    f.require(len(capacities) <= 1, "audio storage", f"retained audio capacity changed: {sorted(capacities)}")
    return allocations, prior_finish


def _complete(f: _Findings, final: dict, *, batches: list[dict], ready: dict, allocations: set, prior_finish: float,
              samples: int, count: int, ids: list, ids_ok: bool, table: TokenTable, profile: StreamProfile,
              per_token: int, tol: float):
    """The complete record: counts, digest, text, time accounting."""
    f.require(final.get("status") == "complete" and final.get("all_source_audio_observed") is True,
              "complete record", f"complete status={final.get('status')!r}, all_source_audio_observed="
              f"{final.get('all_source_audio_observed')!r}")
    f.require(final["audio_samples"] == samples, "audio coverage",
              f"complete audio_samples={final['audio_samples']}, {samples} were fed")
    f.require(final["audio_seconds"] == samples / SAMPLE_RATE, "audio coverage",
              f"complete audio_seconds={final['audio_seconds']}, expected {samples / SAMPLE_RATE}")
    f.require(final["emitted_tokens"] == count, "emission count",
              f"complete emitted_tokens={final['emitted_tokens']}, expected {count}")
    if ids_ok:
        f.require(final.get("generated_ids_sha256") == ids_digest(ids), "id digest",
                  f"complete generated_ids_sha256={final.get('generated_ids_sha256')!r} differs from the "
                  "digest of the window token ids")
    f.require(final["peak_cache_allocated_bytes"] == per_token * profile.context_tokens
              and final["peak_cache_allocated_bytes"] in (allocations or {final["peak_cache_allocated_bytes"]}),
              "cache allocation", f"complete peak_cache_allocated_bytes={final['peak_cache_allocated_bytes']}, "
              f"batches allocated {sorted(allocations)}")
    f.require(final["retained_audio_capacity_samples"] == ready.get("retained_audio_capacity_samples"),
              "audio storage", f"complete retained_audio_capacity_samples="
              f"{final['retained_audio_capacity_samples']} differs from ready")
    total = sum(b["work_seconds"] for b in batches if _is_num(b.get("work_seconds")))
    f.require(abs(final["batch_work_seconds"] - total) <= tol * max(1, len(batches)), "time accounting",
              f"complete batch_work_seconds={final['batch_work_seconds']}, batches sum to {total}")
    f.require(abs(final["input_wait_seconds"] + final["input_convert_seconds"] - final["input_seconds"]) <= tol
              and min(final["input_wait_seconds"], final["input_convert_seconds"]) >= 0, "time accounting",
              f"input_wait_seconds + input_convert_seconds != input_seconds ({final['input_wait_seconds']} + "
              f"{final['input_convert_seconds']} vs {final['input_seconds']})")
    f.require(final["input_seconds"] + final["batch_work_seconds"] <= final["elapsed_seconds"] + tol,
              "time accounting", f"input {final['input_seconds']} s + work {final['batch_work_seconds']} s "
              f"overlap: more than the {final['elapsed_seconds']} s elapsed")
    eof_at, el = final["input_eof_detected_seconds"], final["elapsed_seconds"]
    f.require(samples / SAMPLE_RATE - tol <= eof_at <= el and prior_finish <= el, "eof accounting",
              f"EOF detected at {eof_at} s, audio lasts {samples / SAMPLE_RATE} s, last batch finished at "
              f"{prior_finish} s, elapsed {el} s")
    f.require(abs(final["completion_after_eof_detected_seconds"] - (el - eof_at)) <= tol
              and abs(final["completion_relative_to_audio_clock_seconds"] - (el - samples / SAMPLE_RATE)) <= tol,
              "eof accounting", "completion_after_eof_detected_seconds or "
              "completion_relative_to_audio_clock_seconds does not follow from elapsed, EOF and audio length")
    if ids_ok:
        want = oracle(ids, table)
        f.require(final["text_bytes"] == len(want.text.encode()) and final["visible_tokens"] == want.visible_tokens
                  and final["skipped_tokens"] == want.skipped_tokens, "text counts",
                  f"complete reports {final['text_bytes']} bytes, {final['visible_tokens']} visible and "
                  f"{final['skipped_tokens']} skipped tokens; the oracle says {len(want.text.encode())}, "
                  f"{want.visible_tokens}, {want.skipped_tokens}")


def _text(f: _Findings, deltas: list[dict], windows: list[dict], final: dict, ids: list, table: TokenTable):
    """The text deltas against the tokenizer oracle, each stamped with its window's time."""
    want = oracle(ids, table)
    got = [(d.get("index"), d.get("text")) for d in deltas]
    if got != list(want.deltas):
        first = next((n for n, (a, b) in enumerate(zip(got, want.deltas)) if a != b), min(len(got), len(want.deltas)))
        f.fail("text deltas", f"text deltas differ from the tokenizer oracle at delta #{first}: got "
               f"{got[first] if first < len(got) else None!r}, expected "
               f"{want.deltas[first] if first < len(want.deltas) else None!r}")
    for d in deltas:
        i = d.get("index")
        ok = _is_int(i) and 0 <= i < len(windows) and d.get("seconds") == windows[i].get("seconds")
        f.require(ok, "text timestamps", f"text delta for window {i!r} at {d.get('seconds')!r} s is not "
                  "stamped with its window's time")
    if final:
        first_t = deltas[0].get("seconds") if deltas else None
        last_t = deltas[-1].get("seconds") if deltas else None
        f.require(final.get("first_text_seconds") == first_t and final.get("last_text_seconds") == last_t,
                  "text timestamps", f"complete first/last_text_seconds={final.get('first_text_seconds')!r}/"
                  f"{final.get('last_text_seconds')!r}, deltas give {first_t!r}/{last_t!r}")


def validate(events, profile: StreamProfile, *, samples: int, model: P.ModelIdentity, table: TokenTable,
             bounds: Bounds = Bounds(), require_trim: bool = False) -> Verdict:
    """Check a complete event log against the profile, the input length, the model and the token table."""
    f = _Findings()
    tol = bounds.tolerance_seconds
    if not isinstance(events, list) or not events:
        return Verdict.from_checks(["event log: no events were recorded"])
    bad = [n for n, ev in enumerate(events) if not isinstance(ev, dict) or ev.get("kind") not in P.KINDS]
    for n in bad:
        kind = events[n].get("kind") if isinstance(events[n], dict) else type(events[n]).__name__
        f.fail("event kind", f"event #{n} has kind {kind!r}, not one of {P.KINDS}")
    events = [ev for ev in events if isinstance(ev, dict)]
    _order(f, events)
    by = {k: [ev for ev in events if ev.get("kind") == k] for k in P.KINDS}
    f.require(len(by[P.READY]) == 1, "ready coverage", f"{len(by[P.READY])} ready events, expected 1")
    f.require(len(by[P.COMPLETE]) == 1, "complete coverage", f"{len(by[P.COMPLETE])} complete events, expected 1")
    ready = by[P.READY][0] if by[P.READY] else {}
    final = by[P.COMPLETE][0] if by[P.COMPLETE] else {}
    windows, batches, deltas = by[P.WINDOW], by[P.BATCH], by[P.DELTA]
    if ready:
        _ready(f, ready, profile, model, bounds)

    count = emission_count(samples, profile)
    f.require(len(windows) == count, "emission count", f"{len(windows)} window events, expected {count} "
              f"for {samples} samples")
    windows_ok = all(_fields(f, w, f"window #{n}", P.WINDOW_INTS, ("seconds",)) for n, w in enumerate(windows))
    ids = [w.get("token_id") for w in windows]
    bad_ids = [i for i in ids if not (_is_int(i) and 0 <= i < table.size)]
    f.require(not bad_ids, "token ids", f"token ids {bad_ids[:5]} are outside the {table.size}-token table")
    ids_ok = windows_ok and not bad_ids

    # Absolute and rolling clocks, trims, logical cache, timestamps.
    per_token = model.cache_bytes_per_token
    clocks = window_clocks(max(len(windows), 1), profile)
    if windows_ok:
        _window_clocks(f, windows, clocks, per_token)
    trims = windows[-1].get("rolling_trim_count") if windows_ok and windows else 0
    if require_trim:
        f.require(crosses_trim(count, profile) and _is_int(trims) and trims > 0, "rolling trim",
                  f"the long case must cross a rolling trim: {count} windows in a {profile.context_tokens}-token "
                  f"context, {trims} trims reported")

    allocations, prior_finish = _batches(f, batches, windows, windows_ok, final=final, ready=ready, count=count,
                                         samples=samples, profile=profile, bounds=bounds, per_token=per_token)
    if final and _fields(f, final, "complete", P.COMPLETE_INTS, P.COMPLETE_FLOATS):
        _complete(f, final, batches=batches, ready=ready, allocations=allocations, prior_finish=prior_finish,
                  samples=samples, count=count, ids=ids, ids_ok=ids_ok, table=table, profile=profile,
                  per_token=per_token, tol=tol)
    if ids_ok:
        _text(f, deltas, windows, final, ids, table)
    figures = {
        "windows": Measurement(len(windows), "count"),
        "windows_expected": Measurement(count, "count"),
        "batches": Measurement(len(batches), "count"),
        "rolling_trims": Measurement(trims if _is_int(trims) else None, "count"),
    }
    return Verdict.from_checks(f.reasons(), figures)
