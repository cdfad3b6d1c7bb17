"""Tests of the control archive: append-only JSON lines, exact definitions, day-to-day spread."""

from __future__ import annotations

import dataclasses
import json

import pytest

from harness.winrule import (
    ArchiveError, ArchiveRow, Definition, DriftPolicy, Metric, Registration, Start, WaveInput, append, control_rows,
    day_to_day_spread, decide, read, render_markdown,
)
from harness.winrule.archive import machine_id, spreads

REG = Registration("archive-abab", 2, ("short-decode",), repeats=2, waves_per_repeat=1,
                   primary=Metric("decode_tokens_per_s", "tokens/s", True),
                   guards=(Metric("prefill_ms", "ms", False),), required_effect=0.02)
POLICY = DriftPolicy(equal=("cpu_model", "logical_cpus"))
FP = {"cpu_model": "Test CPU", "logical_cpus": 2, "cpu_mhz": 3000.0, "loadavg_1m": 0.3,
      "workload_sha256": "w" * 64, "graph_sha256": "g" * 64, "clock_source": "cpuinfo 2600 MHz"}


def start(i: int, level: float = 1.0, **changes) -> Start:
    role = "candidate" if i == 1 else "control"
    record = dict(
        label=f"s{i + 1}", role=role, registration=REG.key, config="baseline" if role == "control" else "new",
        values={"short-decode": {"decode_tokens_per_s": [50.0 * level, 50.5 * level],
                                 "prefill_ms": [20.0 / level, 20.2 / level]}},
        inputs={"short-decode": [WaveInput(f"p{w}", "f", 42 + w, f"salt-{i}-{w}") for w in range(2)]},
        outputs={"short-decode": [[1, 2], [1, 3]]}, fingerprint=dict(FP), commit="abc123")
    record.update(changes)
    return Start(**record)


def window(level: float = 1.0) -> list[Start]:
    return [start(0, level), start(1, level * 1.05), start(2, level)]


def rows_for(date: str, level: float = 1.0, **kw) -> list[ArchiveRow]:
    return control_rows(window(level), REG, window=f"w-{date}", date=date, machine_keys=POLICY.equal, **kw)


def test_control_rows_archive_only_complete_controls_with_their_definition():
    starts = window()
    starts[2] = dataclasses.replace(starts[2], complete=False)
    rows = control_rows(starts, REG, window="w1", date="2026-10-28", machine_keys=POLICY.equal)
    assert {r.start for r in rows} == {"s1"}  # the candidate never, the incomplete control not either
    assert len(rows) == len(REG.cells) * len(REG.metrics) * REG.repeats
    d = rows[0].definition
    assert (d.registration, d.cell, d.config, d.commit) == ("archive-abab@2", "short-decode", "baseline", "abc123")
    assert d.machine == machine_id(FP, POLICY.equal)


def test_machine_id_ignores_readings_that_move():
    assert machine_id(FP, POLICY.equal) == machine_id({**FP, "cpu_mhz": 1200.0, "loadavg_1m": 4.0}, POLICY.equal)
    assert machine_id(FP, POLICY.equal) != machine_id({**FP, "cpu_model": "Other"}, POLICY.equal)


def test_append_then_read_round_trips_and_never_rewrites(tmp_path):
    path = tmp_path / "archive" / "control.jsonl"
    first = rows_for("2026-10-27")
    assert append(path, first) == len(first)
    before = path.read_bytes()
    second = rows_for("2026-10-28", 1.01)
    append(path, second)
    assert path.read_bytes().startswith(before)  # appended, the old bytes untouched
    assert read(path) == tuple(first + second)
    line = json.loads(path.read_text().splitlines()[0])
    assert line["schema_version"] == 2 and list(line) == sorted(line)
    assert (line["workload"], line["graph"], line["clock"]) == ("w" * 64, "g" * 64, "cpuinfo 2600 MHz")


def test_a_schema_1_row_is_read_as_its_own_definition(tmp_path):
    path = tmp_path / "a.jsonl"
    old = {k: v for k, v in rows_for("2026-10-27")[0].as_dict().items() if k not in ("workload", "graph", "clock")}
    path.write_text(json.dumps({**old, "schema_version": 1}) + "\n")
    (row,) = read(path)
    assert (row.definition.workload, row.definition.graph, row.definition.clock) == ("unrecorded",) * 3
    assert row.definition != rows_for("2026-10-27")[0].definition


def test_read_of_a_missing_archive_is_empty(tmp_path):
    assert read(tmp_path / "none.jsonl") == ()
    assert append(tmp_path / "none.jsonl", []) == 0 and not (tmp_path / "none.jsonl").exists()


def test_append_refuses_a_torn_archive(tmp_path):
    path = tmp_path / "a.jsonl"
    append(path, rows_for("2026-10-27"))
    with open(path, "ab") as f:
        f.write(b'{"schema_version": 1, "cell"')
    size = path.stat().st_size
    with pytest.raises(ArchiveError, match="unterminated"):
        append(path, rows_for("2026-10-28"))
    assert path.stat().st_size == size
    with pytest.raises(ArchiveError, match=r"a\.jsonl:\d+: unterminated"):
        read(path)


@pytest.mark.parametrize("line, match", [
    ("not json\n", r":2: Expecting value"),
    ('{"schema_version": 3}\n', r":2: archive row schema_version 3"),
    ('{"schema_version": 1, "registration": "r@1"}\n', r":2: archive row lacks field 'cell'"),
])
def test_read_names_the_bad_line(tmp_path, line, match):
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps(rows_for("2026-10-27")[0].as_dict()) + "\n" + line)
    with pytest.raises(ArchiveError, match=match):
        read(path)


@pytest.mark.parametrize("change, match", [
    ({"date": "28/10/2026"}, "date"), ({"value": float("nan")}, "value"), ({"value": 0.0}, "value"),
    ({"repeat": -1}, "repeat"), ({"window": ""}, "window"),
])
def test_archive_rows_validate_their_fields(change, match):
    row = rows_for("2026-10-27")[0]
    with pytest.raises(ArchiveError, match=match):
        dataclasses.replace(row, **change)


def test_spread_is_computed_per_definition_and_never_mixes(tmp_path):
    path = tmp_path / "a.jsonl"
    append(path, rows_for("2026-10-26"))
    append(path, rows_for("2026-10-27", 1.01))
    # Same workload, another commit and another machine: far off, and must not widen the spread.
    other = control_rows([dataclasses.replace(s, commit="def456") for s in window(1.5)], REG, window="w-x",
                         date="2026-10-27", machine_keys=POLICY.equal)
    other += control_rows([dataclasses.replace(s, fingerprint={**FP, "cpu_model": "Other"}) for s in window(0.5)],
                          REG, window="w-y", date="2026-10-28", machine_keys=POLICY.equal)
    append(path, other)
    rows = read(path)
    definition = rows_for("2026-10-26")[0].definition
    spread = day_to_day_spread(rows, definition, 0.02)
    assert spread.days == 2 and spread.rows == 8  # two days x two control starts x two repeats
    assert spread.spread == pytest.approx(0.01)
    assert spread.exceeds_required_effect is False
    assert len(spreads(rows, 0.02)) == len({r.definition for r in rows}) == 3 * len(REG.metrics)


def test_spread_needs_two_days():
    rows = rows_for("2026-10-27")
    s = day_to_day_spread(rows, rows[0].definition, 0.02)
    assert s.spread is None and s.exceeds_required_effect is None and s.days == 1
    assert day_to_day_spread(rows, dataclasses.replace(rows[0].definition, metric="other"), 0.02).rows == 0


def test_decision_reports_the_archive_spread_beside_the_required_effect():
    archive = rows_for("2026-10-25") + rows_for("2026-10-26", 1.03)
    d = decide(window(), REG, POLICY, archive=archive)
    assert d.verdict == "WIN"  # the spread is reported, never decisive
    primary = next(s for s in d.archive_spreads if s.definition.metric == "decode_tokens_per_s")
    assert primary.spread == pytest.approx(0.03) and primary.exceeds_required_effect is True
    assert {s.definition.metric for s in d.archive_spreads} == {"decode_tokens_per_s", "prefill_ms"}
    assert "Archive day-to-day spread of `decode_tokens_per_s`" in render_markdown(d)
    assert json.dumps(d.as_dict(), allow_nan=False)


def test_definition_fields_must_be_named():
    with pytest.raises(ArchiveError, match="definition commit"):
        ArchiveRow(Definition("r@1", "c", "m", "cfg", "", "mach"), "ms", "2026-10-28", "w", "s1", 0, 1.0)
