"""Bad input for the browser lane, with the real server and the real chromium: a graph the page cannot
load, a page that never reports, a taken port, a page served without isolation. Each fails clearly
within a bound, and neither the browser nor the server outlives the test."""

import os
import socket
import time
from pathlib import Path

import pytest

from harness.browser import procs, rule
from harness.gates import throughput_browser as browser_gate
from harness.browser.driver import Browser, BrowserError
from harness.browser.server import ServerError, StaticServer

WEB = Path(__file__).resolve().parents[2] / "web"
pytestmark = [pytest.mark.browser]


def _web_ready():
    if not (WEB / "node_modules" / "onnxruntime-web" / "package.json").is_file():
        pytest.fail("web/node_modules is missing; run web/setup.sh")


@pytest.fixture
def no_orphans():
    """Fails the test if a process it started (server, Playwright driver, chromium) is still alive."""
    before = set(procs.descendants(os.getpid()))
    yield
    deadline = time.monotonic() + 10
    while True:
        left = [p for p in set(procs.descendants(os.getpid())) - before if procs.alive(p)]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not left, f"processes outlived the test: {left}"


def _identity_graph(path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "identity", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)


def test_taken_port_is_a_clear_error(tmp_path, no_orphans):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        t0 = time.monotonic()
        with pytest.raises(ServerError, match=f"127.0.0.1:{port}.*(in use|Address)"):
            StaticServer({"web": WEB}, tmp_path / "server.log", port=port).start()
        assert time.monotonic() - t0 < 10


def test_missing_mount_is_refused(tmp_path):
    with pytest.raises(ServerError, match="is not a directory"):
        StaticServer({"web": tmp_path / "absent"}, tmp_path / "server.log").start()


def test_broken_graph_fails_within_bound(tmp_path, no_orphans):
    _web_ready()
    models = tmp_path / "models"
    models.mkdir()
    (models / "broken.onnx").write_bytes(b"this is not an ONNX graph\x00\x01" * 64)
    with StaticServer({"web": WEB, "models": models}, tmp_path / "server.log") as server, \
            Browser(tmp_path / "browser.jsonl") as browser:
        page = browser.open(server.url("web/ort.html"))
        t0 = time.monotonic()
        with pytest.raises(BrowserError, match="load failed in the page"):
            page.call("load", {"model": server.url("models/broken.onnx"), "numThreads": 2}, timeout_s=60)
        assert time.monotonic() - t0 < 60
        page.close()
    assert (tmp_path / "server.log").read_text().count("broken.onnx") >= 1


def test_missing_graph_fails_within_bound(tmp_path, no_orphans):
    _web_ready()
    with StaticServer({"web": WEB}, tmp_path / "server.log") as server, Browser(tmp_path / "b.jsonl") as browser:
        page = browser.open(server.url("web/ort.html"))
        with pytest.raises(BrowserError, match="load failed"):
            page.call("load", {"model": server.url("models/absent.onnx"), "numThreads": 2}, timeout_s=60)
        assert any(e["type"] == "http" and "404" in e["text"] for e in browser.errors())


def test_page_that_never_reports_times_out(tmp_path, no_orphans):
    site = tmp_path / "site"
    site.mkdir()
    (site / "silent.html").write_text("<!doctype html><title>silent</title>"
                                      "<script>throw new Error('gatehouse test: never ready')</script>")
    with StaticServer({"site": site}, tmp_path / "server.log") as server, Browser(tmp_path / "b.jsonl") as browser:
        t0 = time.monotonic()
        with pytest.raises(BrowserError, match="did not become ready within 3 s.*never ready"):
            browser.open(server.url("site/silent.html"), timeout_s=3)
        assert time.monotonic() - t0 < 15


def test_job_that_never_finishes_times_out(tmp_path, no_orphans):
    site = tmp_path / "site"
    site.mkdir()
    (site / "hang.html").write_text(
        "<!doctype html><script type=module>"
        "window.__gatehouse_jobs = {}; window.__gatehouse = {ready: true, "
        "start(n, a) { window.__gatehouse_jobs['1'] = {done: false}; return '1'; }};</script>")
    with StaticServer({"site": site}, tmp_path / "server.log") as server, Browser(tmp_path / "b.jsonl") as browser:
        page = browser.open(server.url("site/hang.html"))
        t0 = time.monotonic()
        with pytest.raises(BrowserError, match="generate did not report within 2 s"):
            page.call("generate", {}, timeout_s=2)
        assert time.monotonic() - t0 < 10


def test_unisolated_page_fails_the_gate_with_that_reason(tmp_path, no_orphans):
    _web_ready()
    models = tmp_path / "models"
    models.mkdir()
    _identity_graph(models / "identity.onnx")
    with StaticServer({"web": WEB, "models": models}, tmp_path / "server.log", isolate=False) as server, \
            Browser(tmp_path / "b.jsonl") as browser:
        page = browser.open(server.url("web/ort.html"))
        info, _ = page.call("load", {"model": server.url("models/identity.onnx"), "numThreads": 2,
                                     "kvHeads": 1, "headDim": 1}, timeout_s=60)
        page.close()
    assert info["env"]["crossOriginIsolated"] is False
    evidence = browser_gate.BrowserEvidence(lane="ort-web", dtype="fp32", load=info, cells={}, parity={},
                                            workload={"threads": 2, "repeats": 5, "cells": []})
    v = browser_gate.decide(evidence, browser_gate.BrowserPolicy())
    assert not v.passed
    assert any("not cross-origin isolated" in r for r in v.reasons), v.render()
    assert any("runtime runs 1" in r for r in v.reasons), v.render()


def test_isolated_page_runs_two_threads(tmp_path, no_orphans):
    _web_ready()
    models = tmp_path / "models"
    models.mkdir()
    _identity_graph(models / "identity.onnx")
    with StaticServer({"web": WEB, "models": models}, tmp_path / "server.log") as server, \
            Browser(tmp_path / "b.jsonl") as browser:
        page = browser.open(server.url("web/ort.html"))
        info, _ = page.call("load", {"model": server.url("models/identity.onnx"), "numThreads": 2,
                                     "kvHeads": 1, "headDim": 1}, timeout_s=60)
        page.close()
    assert info["env"]["crossOriginIsolated"] is True and info["env"]["simd"] is True
    assert rule.threads_used(info) == 2
