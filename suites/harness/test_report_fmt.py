"""The one number formatter every renderer uses (terminal, report.md, report.html, compare)."""

import math

import pytest

from harness import fmt


@pytest.mark.parametrize("value, unit, shown", [
    (11440.0, "", "11,400"),              # three significant figures, thousands separators
    (1.144e4, "tok/s", "11,400 tok/s"),
    (4.292e-06, "", "4.29×10⁻⁶"),         # never 4.292e-06
    (0.0123, "", "0.0123"),
    (2.5, "", "2.5"),                     # trailing zeros dropped
    (999.6, "", "1,000"),                 # rounding that carries into the next power
    (0.00099996, "", "0.001"),
    (-0.2, "", "-0.2"),
    (0, "", "0"),
    (20, "", "20"),                       # a count prints exactly
    (12345678, "", "12,345,678"),
    (0.0061, "%", "0.61 %"),              # a fraction as a percentage
    (0.5, "%", "50 %"),
    (0.0123, "s", "12.3 ms"),             # seconds at a readable scale
    (4.2e-5, "s", "42 µs"),
    (1440, "ms", "1.44 s"),
    (12.3, "ms", "12.3 ms"),
    (1.44e8, "B", "144 MB"),
    (569_000, "B", "569 kB"),
    (512, "B", "512 B"),
    (6780, "KiB", "6,780 KiB"),           # any other unit is appended
])
def test_figure(value, unit, shown):
    assert fmt.figure(value, unit) == shown


@pytest.mark.parametrize("value", [None, math.nan, math.inf, -math.inf, True, "12"])
def test_missing_or_not_a_number_is_a_dash(value):
    assert fmt.figure(value) == "—"


def test_sign_and_percent_helpers():
    assert fmt.figure(0.0061, "%", sign=True) == "+0.61 %"
    assert fmt.figure(-0.1, "%", sign=True) == "-10 %"
    assert fmt.figure(12, sign=True) == "+12"
    assert fmt.pct(0.10312) == "10.3 %"
    assert fmt.num("text") == "text" and fmt.num(None) == "—"


def test_figures_table_turns_when_wide():
    few = fmt.figures_table([("a", "pass", {"x": 1.0, "y": 2000.0})])
    assert few[0] == "| test | outcome | x | y |" and few[-1] == "| a | pass | 1 | 2,000 |"
    many = {f"f{i}": float(i) for i in range(fmt.WIDE + 1)}
    wide = fmt.figures_table([("a", "pass", many), ("b", "fail", {"f0": 3.0})])
    assert wide[0] == "| figure | a (pass) | b (fail) |"
    assert "| f0 | 0 | 3 |" in wide and "| f8 | 8 | — |" in wide
