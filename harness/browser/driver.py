"""Playwright driving Debian's chromium (never a downloaded browser) against the bench page.

:class:`Browser` launches headless chromium, records every console message and page error, and on
close makes sure no process it started survives.  :meth:`Page.call` starts a job in the page and
waits for it with a bound, so a page that never reports fails in bounded time with what it logged.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from ..errors import HarnessError
from . import procs

CHROMIUM_ARGS = ("--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic")


class BrowserError(HarnessError):
    """Chromium could not start, the page did not load or report in time, or the page threw."""


def chromium_path() -> str:
    path = shutil.which("chromium")
    if not path:
        raise BrowserError("Debian's chromium is not installed (binary `chromium` not on PATH); run web/setup.sh")
    return path


class Browser:
    """``with Browser(log_path) as b: page = b.open(url)``; console and page errors kept in ``b.events``."""

    def __init__(self, log_path: Path | str, launch_timeout_s: float = 60.0):
        self.log_path = Path(log_path)
        self.launch_timeout_s = launch_timeout_s
        self.events: list[dict[str, Any]] = []
        self._pw = None
        self._browser = None
        self._pids: list[int] = []
        self.version: str | None = None
        self.killed_on_close: list[int] = []
        self.profile_lines: list[str] = []  # onnxruntime-web's profiler prints its JSON events to the console

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> "Browser":
        from playwright.sync_api import sync_playwright

        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        exe = chromium_path()
        before = set(procs.descendants(os.getpid()))
        self._pw = sync_playwright().start()
        try:
            self._browser = self._pw.chromium.launch(executable_path=exe, headless=True, args=list(CHROMIUM_ARGS),
                                                     timeout=self.launch_timeout_s * 1000)
        except Exception as exc:
            self.close()
            raise BrowserError(f"chromium ({exe}) did not start within {self.launch_timeout_s:.0f} s: "
                               f"{str(exc).splitlines()[0]}") from exc
        self.version = self._browser.version
        self._pids = sorted(set(procs.descendants(os.getpid())) - before)
        self._log({"type": "browser", "text": f"chromium {self.version} pids {self._pids}"})
        return self

    def pids(self) -> list[int]:
        """The browser's process tree now (the Playwright driver, chromium and its children)."""
        now = set()
        for pid in self._pids:
            if procs.alive(pid):
                now.add(pid)
                now.update(procs.descendants(pid))
        return sorted(now)

    def close(self) -> None:
        tracked = self.pids()
        try:
            if self._browser is not None:
                self._browser.close()
        except Exception as exc:  # a crashed browser: the kill below still cleans up
            self._log({"type": "close-error", "text": str(exc)})
        try:
            if self._pw is not None:
                self._pw.stop()
        except Exception as exc:
            self._log({"type": "close-error", "text": str(exc)})
        self._browser = self._pw = None
        deadline = time.monotonic() + 5
        while any(procs.alive(p) for p in tracked) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.killed_on_close = procs.kill_all(tracked)
        if self.killed_on_close:
            self._log({"type": "close", "text": f"killed survivors {self.killed_on_close}"})

    def __enter__(self) -> "Browser":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- pages -----------------------------------------------------------------------
    def open(self, url: str, timeout_s: float = 30.0) -> "Page":
        if self._browser is None:
            raise BrowserError("the browser is not started")
        context = self._browser.new_context()
        page = context.new_page()
        label = url.rsplit("/", 1)[-1]
        page.on("console", lambda m: self._console(label, m.type, m.text))
        page.on("pageerror", lambda e: self._log({"type": "pageerror", "page": label, "text": str(e)}))
        page.on("requestfailed", lambda r: self._log({"type": "requestfailed", "page": label,
                                                      "text": f"{r.url} {r.failure}"}))
        page.on("response", lambda r: r.status >= 400 and self._log(
            {"type": "http", "page": label, "text": f"{r.status} {r.url}"}))
        p = Page(self, context, page, label)
        try:
            page.goto(url, wait_until="load", timeout=timeout_s * 1000)
            page.wait_for_function("() => window.__gatehouse && window.__gatehouse.ready", timeout=timeout_s * 1000,
                                   polling=100)
        except Exception as exc:
            p.close()
            raise BrowserError(f"{url}: the bench page did not become ready within {timeout_s:.0f} s "
                               f"({str(exc).splitlines()[0]}); {self.errors_text(label)}") from exc
        return p

    # -- events ----------------------------------------------------------------------
    def _console(self, label: str, kind: str, text: str) -> None:
        if kind == "log" and (text.startswith('{"cat"') or text in ("[", "]")):
            self.profile_lines.append(text)
        else:
            self._log({"type": f"console.{kind}", "page": label, "text": text})

    def _log(self, event: dict[str, Any]) -> None:
        event = {"t": round(time.time(), 3), **event}
        self.events.append(event)
        with open(self.log_path, "a") as f:
            f.write(json.dumps(event) + "\n")

    def errors(self, page: str | None = None) -> list[dict[str, Any]]:
        kinds = {"console.error", "pageerror", "requestfailed", "http"}
        return [e for e in self.events if e["type"] in kinds and (page is None or e.get("page") == page)]

    def errors_text(self, page: str | None = None, limit: int = 4) -> str:
        errs = self.errors(page)
        if not errs:
            return "no console or page errors"
        shown = "; ".join(f"{e['type']}: {e['text'][:300]}" for e in errs[-limit:])
        return f"{len(errs)} console/page error(s), last: {shown}"


class Page:
    def __init__(self, browser: Browser, context, page, label: str):
        self.browser, self.context, self.page, self.label = browser, context, page, label

    def call(self, name: str, arg: Any = None, timeout_s: float = 120.0) -> tuple[Any, dict[str, float]]:
        """Run ``name(arg)`` in the page; returns its result and the browser's CPU seconds / wall seconds."""
        pids = self.browser.pids()
        cpu0, t0 = procs.cpu_seconds(pids), time.monotonic()
        try:
            job = self.page.evaluate("([n, a]) => window.__gatehouse.start(n, a)", [name, arg])
            self.page.wait_for_function("id => window.__gatehouse_jobs[id].done", arg=job,
                                        timeout=timeout_s * 1000, polling=100)
            state = self.page.evaluate("id => window.__gatehouse_jobs[id]", job)
        except Exception as exc:
            raise BrowserError(f"{self.label}: {name} did not report within {timeout_s:.0f} s "
                               f"({str(exc).splitlines()[0]}); {self.browser.errors_text(self.label)}") from exc
        wall = time.monotonic() - t0
        usage = {"wall_s": wall, "cpu_s": procs.cpu_seconds(self.browser.pids()) - cpu0}
        if "error" in state:
            raise BrowserError(f"{self.label}: {name} failed in the page: {state['error'][:800]}")
        return state["result"], usage

    def close(self) -> None:
        try:
            self.context.close()
        except Exception as exc:
            self.browser._log({"type": "close-error", "page": self.label, "text": str(exc)})
