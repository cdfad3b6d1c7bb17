"""One receipt outcome from pytest's phase reports and the gate's verdict, the receipt's figures as JUnit XML
properties, and the pinned graphs re-hashed when a test body ends."""

from __future__ import annotations

from pathlib import Path

import pytest

from .receipt import recheck_reasons as receipt_recheck_reasons


def outcome(r, reps) -> tuple[str, list[str]]:
    """Turn pytest's phase reports and the gate's own verdict into one receipt outcome."""
    setup = reps.get("setup")
    if setup is None or setup[0].skipped:
        return "skip", [text(setup) or "skipped at setup"]
    if setup[0].failed:
        return "error", [f"setup failed: {text(setup)}"]
    outcome, reasons = "pass", []
    call = reps.get("call")
    if call is not None:
        rep, excinfo = call
        unexpected = excinfo is not None and not excinfo.errisinstance((AssertionError, pytest.skip.Exception)) \
            and not hasattr(rep, "wasxfail")
        if unexpected:
            outcome, reasons = "error", [f"{excinfo.typename}: {excinfo.value}"]
        elif r.verdict is not None:
            outcome, reasons = ("pass", []) if r.verdict.passed else ("fail", list(r.verdict.reasons))
        elif rep.failed or hasattr(rep, "wasxfail"):
            outcome, reasons = "fail", [text(call) or "assertion failed"]
        elif rep.skipped:
            outcome, reasons = "skip", [text(call) or "skipped"]
    changed = receipt_recheck_reasons(r.graph_recheck)
    if changed:   # the figures were measured on bytes that are no longer the pinned graph
        outcome, reasons = ("error" if outcome == "error" else "fail"), [*reasons, *changed]
    teardown = reps.get("teardown")
    if teardown is not None and teardown[0].failed:
        outcome, reasons = "error", reasons + [f"teardown failed: {text(teardown)}"]
    return outcome, reasons


def text(entry) -> str:
    if entry is None:
        return ""
    rep, excinfo = entry
    if excinfo is not None:
        if excinfo.errisinstance(pytest.skip.Exception):
            return str(excinfo.value.msg if hasattr(excinfo.value, "msg") else excinfo.value)
        return f"{excinfo.typename}: {str(excinfo.value).strip().splitlines()[0] if str(excinfo.value).strip() else ''}"
    if isinstance(rep.longrepr, tuple):
        return str(rep.longrepr[2])
    return str(rep.longrepr or "")


def junit_properties(r, outcome: str, reasons: list[str], path: Path) -> list[tuple[str, str]]:
    """The receipt's key figures as JUnit XML properties, so a CI system reads them without the report: the
    gate, its outcome and first reason, the receipt's path, every measurement (``gatehouse.<name>``, the raw
    value with its unit) and each lane cell's decode tokens/s."""
    props = [("gatehouse_receipt", str(path)), ("gatehouse.gate", r.gate), ("gatehouse.outcome", outcome)]
    if reasons:
        props.append(("gatehouse.reason", reasons[0]))
    for name, m in sorted(r.measurements.items()):
        if m.get("value") is not None:
            props.append((f"gatehouse.{name}", f"{m['value']}" + (f" {m['unit']}" if m.get("unit") else "")))
    for cell, c in sorted(((r.lane or {}).get("cells") or {}).items()):
        if c.get("decode_tokens_per_s") is not None:
            props.append((f"gatehouse.{r.lane['name']}.{cell}.decode_tokens_per_s", str(c["decode_tokens_per_s"])))
    return props


def recheck_graphs(r, rep) -> None:
    """Re-hash the graphs the test pinned as soon as its body ends; a changed one fails the test (an
    expected failure too: a graph that changed is not the failure the campaign expected)."""
    reasons = r.recheck_graphs()
    if not reasons:
        return
    rep.outcome = "failed"
    rep.longrepr = "Gatehouse: a pinned graph changed while the test measured it:\n" + "\n".join(reasons)
    if hasattr(rep, "wasxfail"):
        del rep.wasxfail
