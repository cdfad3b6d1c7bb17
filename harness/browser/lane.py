"""Runs the shared workload through one bench page (onnxruntime-web or transformers.js) and collects
the evidence the rule judges: load facts, per-repeat stamps, pooled figures and where the time went."""

from __future__ import annotations

import re

import statistics
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from .. import lanes
from ..lanes import BaseLane, Generation
from ..progress import emit
from ..fmt import figure
from ..workload import Workload
from .driver import Browser, BrowserError
from .server import StaticServer

LANES = ("ort-web", "transformers.js")   # the lanes of our own graphs; wllama is the browser peer (WllamaLane)
PAGES = {"ort-web": "web/ort.html", "transformers.js": "web/tfjs.html", "wllama": "web/wllama.html"}
# what the page reports of one generation beyond ids and stamps, kept in each raw record for the breakdown
DETAIL = ("feed_ms", "run_ms", "argmax_ms", "kv_bytes_last_step", "copy_floor_ms_last_step", "workers_started",
          "total_ms")
# transformers.js picks a graph by dtype from the layout's file names: onnx/model.onnx (fp32),
# model_quantized.onnx (q8), model_q4.onnx (q4), model_int8.onnx, model_uint8.onnx, model_fp16.onnx, ...
TFJS_SUFFIXES = {"": "fp32", "_quantized": "q8", "_q4": "q4", "_int8": "int8", "_uint8": "uint8", "_fp16": "fp16",
                 "_q4f16": "q4f16", "_bnb4": "bnb4"}


def tfjs_dtype(graph_file: str) -> str | None:
    """The transformers.js dtype that loads ``graph_file``, or None when it is not in the layout."""
    m = re.fullmatch(r"onnx/model(_\w+)?\.onnx", graph_file)
    return TFJS_SUFFIXES.get(m.group(1) or "") if m else None


@dataclass(frozen=True)
class Target:
    """Where the page finds the graph: the export directory's URL prefix and the graph file in it."""

    export_prefix: str      # e.g. "artifacts/export-14da1d355c24dd7e1f24"
    graph_file: str         # e.g. "onnx/model_q4.onnx"
    dtype: str
    pack: str | None = None   # packed delivery: the pack index beside the graph ("onnx/pack.json")


@dataclass(frozen=True)
class Timeouts:
    page_s: float = 30.0
    load_s: float = 240.0
    generate_s: float = 180.0


def load_config(lane: str, server: StaticServer, target: Target, threads: int) -> dict[str, Any]:
    if lane == "ort-web":
        cfg = {"model": server.url(f"{target.export_prefix}/{target.graph_file}"), "numThreads": threads,
               "downloadPrefix": f"/{target.export_prefix}/"}
        if target.pack:
            cfg["pack"] = server.url(f"{target.export_prefix}/{target.pack}")
        return cfg
    parent, _, name = target.export_prefix.rpartition("/")
    return {"localModelPath": f"/{parent}/", "modelId": name, "dtype": tfjs_dtype(target.graph_file),
            "numThreads": threads}


class PageLane(BaseLane):
    """One bench page in a fresh browser context as a :class:`harness.lanes.Lane`: ``load()`` opens the page
    and loads the graph (the page's load facts), ``generate`` is one ``generate`` job in the page (the page
    stamps each token; wall and CPU seconds are the browser process tree's over the job, from
    :meth:`harness.browser.driver.Page.call`), ``release`` frees the session, ``close`` the page."""

    def __init__(self, browser: Browser, server: StaticServer, lane: str, target: Target, threads: int,
                 timeouts: Timeouts = Timeouts()):
        super().__init__(lane)
        self.browser, self.server, self.target, self.threads, self.timeouts = browser, server, target, threads, timeouts
        self.page = None

    def load(self) -> dict[str, Any]:
        self.page = self.browser.open(self.server.url(PAGES[self.name]), self.timeouts.page_s)
        info, usage = self.page.call("load", load_config(self.name, self.server, self.target, self.threads),
                                     self.timeouts.load_s)
        info["load_cpu_per_wall"] = usage["cpu_s"] / usage["wall_s"] if usage["wall_s"] else None
        return info

    def generate(self, prompt_ids: Sequence[int], n: int) -> Generation:
        arg = {"ids": list(prompt_ids), "newTokens": n, "measureCopy": self.name == "ort-web"}
        out, usage = self.page.call("generate", arg, self.timeouts.generate_s)
        return Generation(tuple(out["ids"]), tuple(out["token_ms"]), usage["wall_s"], usage["cpu_s"],
                          {k: out[k] for k in DETAIL if k in out})

    def release(self) -> None:
        """Free onnxruntime-web's session (transformers.js has no such call); a failure here is not evidence."""
        if self.page is not None and self.name == "ort-web":
            try:
                self.page.call("release", None, 30)
            except Exception:
                pass

    def close(self) -> str | None:
        page, self.page = self.page, None
        if page is not None:
            page.close()
        return None


def teacher_sequence(prompt_ids: Sequence[int], reference: Sequence[int]) -> tuple[list[int], int]:
    """The teacher-forced sequence for a reference continuation: the prompt and every reference token but the last,
    and the position of the first prediction (row ``from - 1`` predicts ``reference[0]``)."""
    return list(prompt_ids) + list(reference[:-1]), len(prompt_ids)


def run(browser: Browser, server: StaticServer, lane: str, target: Target, workload: Workload, *,
        threads: int | None = None, cells: tuple[str, ...] | None = None, repeats: int | None = None,
        max_repeats: int | None = None, timeouts: Timeouts = Timeouts(),
        progress: Callable[[str], None] = emit, teacher: dict[str, Sequence[int]] | None = None) -> dict[str, Any]:
    """Load the graph in a fresh page, then the workload (or ``cells`` of it, with other repeat bounds)
    through :func:`harness.lanes.measure_runs`. A lane error is raised, as the page raised it.

    ``teacher`` (ort-web only): per cell a reference continuation (the native fp32 graph's greedy ids); after the
    timing the page predicts every position of it teacher-forced (one call over prompt + reference), and the
    evidence's ``teacher_forced[cell]`` holds the page's top-1 ids."""
    threads = workload.threads if threads is None else threads
    repeats = workload.repeats if repeats is None else repeats
    max_repeats = workload.max_repeats if max_repeats is None else max(max_repeats, repeats)
    work = replace(workload, cells=tuple(c for c in workload.cells if cells is None or c.name in cells),
                   repeats=repeats, max_repeats=max_repeats)
    with PageLane(browser, server, lane, target, threads, timeouts) as page:
        progress(f"{lane} {target.dtype}: loading the graph in a fresh page ({threads} thread(s))")   # 10-25 s for 0.5 GB
        info = page.load()
        progress(f"{lane} {target.dtype}: loaded in {figure(info['load_ms'], 'ms')}, threads {info['num_threads_effective']}")
        found = lanes.measure_runs({lane: page}, work, progress=progress)[lane]
        if found.exception is not None:
            raise found.exception
        forced = {}
        for c in work.cells:
            if teacher and c.name in teacher and lane == "ort-web":
                seq, start = teacher_sequence(c.prompt_ids, teacher[c.name])
                out, _ = page.page.call("teacherForce", {"ids": seq, "from": start}, timeouts.generate_s)
                forced[c.name] = list(out["top1"])
        page.release()
    ev = found.evidence()
    return {"lane": lane, "dtype": target.dtype, "threads_requested": threads, "load": info, "cells": ev["cells"],
            "teacher_forced_top1": forced,
            "raw": ev["raw"], "ids": ev["ids"],
            "breakdown": {c: breakdown([r for r in raw if not r["warmup"]]) for c, raw in ev["raw"].items()}}


def breakdown(measured: list[dict[str, Any]]) -> dict[str, Any]:
    """Where one decode step's time goes (steps after the first token, mean over repeats)."""
    def mean_steps(key: str) -> float | None:
        vals = [v for r in measured if key in r for v in r[key][1:]]
        return statistics.fmean(vals) if vals else None

    step_ms = [(r["token_ms"][-1] - r["token_ms"][0]) / (len(r["token_ms"]) - 1) for r in measured]
    copy = [r["copy_floor_ms_last_step"] for r in measured if r.get("copy_floor_ms_last_step") is not None]
    kv = [r["kv_bytes_last_step"] for r in measured if r.get("kv_bytes_last_step")]
    cpu = [r["cpu_per_wall"] for r in measured if r.get("cpu_per_wall") is not None]
    return {"step_ms": statistics.fmean(step_ms), "session_run_ms": mean_steps("run_ms"),
            "feed_build_ms": mean_steps("feed_ms"), "argmax_ms": mean_steps("argmax_ms"),
            "kv_bytes_last_step": max(kv) if kv else None,
            "kv_copy_floor_ms_last_step": statistics.median(copy) if copy else None,
            "browser_cpu_per_wall": statistics.fmean(cpu) if cpu else None}


def profile(browser: Browser, server: StaticServer, target: Target, workload: Workload,
            cells: Sequence[str] = ("short",), new_tokens: int = 8, warmup: int = 1,
            timeouts: Timeouts = Timeouts(), progress: Callable[[str], None] = emit) -> dict[str, dict[str, Any]]:
    """Profiled onnxruntime-web generations (profiling slows them: kept apart from the measurement), one per cell
    of ``cells`` in turn, in one fresh page that loads the graph once, after ``warmup`` unrecorded generations of
    the first cell (a fresh page's first generation runs its kernels cold: on SmolLM2 a short-cell step profiled
    first took 200 ms, then 100-129 ms): per cell, kernel ms by op type per decode step and how much of
    session.run is not kernel time.  The runtime prints the whole profile when profiling ends, so each
    generation's events are told apart by its runs: ``new_tokens`` runs a generation, in order."""
    from . import profile as prof

    t0 = time.monotonic()
    progress(f"ort-web {target.dtype}: profiling {new_tokens} tokens of the {' and '.join(cells)} cell(s) in a "
             f"fresh page")
    page = browser.open(server.url(PAGES["ort-web"]), timeouts.page_s)
    try:
        cfg = {**load_config("ort-web", server, target, workload.threads), "profiling": True}
        page.call("load", cfg, timeouts.load_s)
        start = len(browser.profile_lines)
        outs = []
        for cell in [cells[0]] * warmup + list(cells):
            out, _ = page.call("generate", {"ids": list(workload.cell(cell).prompt_ids), "newTokens": new_tokens},
                               timeouts.generate_s)
            outs.append(out)
        page.call("endProfiling", None, 60)
        lines = browser.profile_lines[start:]
        del browser.profile_lines[start:]
    finally:
        page.close()
    progress(f"ort-web {target.dtype}: {len(cells)} cell(s) profiled in {time.monotonic() - t0:.1f} s")
    evts = prof.events(lines)
    runs = len(prof.model_runs(evts))
    if runs != new_tokens * (warmup + len(cells)):
        raise BrowserError(f"ort-web {target.dtype}: the profile holds {runs} session runs, expected {new_tokens} per "
                           f"generation for {warmup} warm-up and {len(cells)} profiled generation(s) "
                           f"({', '.join(cells)})")
    found = {}
    for k, (cell, out) in enumerate(zip(cells, outs[warmup:])):
        summary = prof.summarize(evts, first=(warmup + k) * new_tokens, count=new_tokens)
        js_run = out["run_ms"][1:]
        summary["cell"] = cell
        summary["js_session_run_ms"] = statistics.fmean(js_run) if js_run else None
        if summary.get("decode_runs") and summary["js_session_run_ms"] is not None:
            # what session.run costs beyond the runtime's own run: moving feeds in and outputs out of the heap
            summary["outside_model_run_ms"] = summary["js_session_run_ms"] - summary["model_run_ms"]
        found[cell] = summary
    return found


class WllamaLane(BaseLane):
    """The browser peer: wllama (llama.cpp in WebAssembly) on a GGUF in the bench page ``web/wllama.html``.

    wllama 3.x takes a text prompt and streams one text piece per generated token (its message encoder refuses a
    token-id prompt), so ``decode(ids)`` turns the workload's prompt ids into text; the engine's own prompt token
    count (``prompt_n``) is kept per generation so the receipt shows whether it read the same number of tokens.
    The generated ids are ``encode`` of the streamed text (a re-tokenization: what parity with our graphs is
    computed on). Stamps are the page's, one per streamed piece."""

    def __init__(self, browser: Browser, server: StaticServer, model_url: str, threads: int, n_ctx: int,
                 decode: Callable[[Sequence[int]], str], encode: Callable[[str], Sequence[int]],
                 timeouts: Timeouts = Timeouts()):
        super().__init__("wllama")
        self.browser, self.server, self.model_url, self.threads, self.n_ctx = browser, server, model_url, threads, n_ctx
        self.decode, self.encode, self.timeouts = decode, encode, timeouts
        self.page = None

    def load(self) -> dict[str, Any]:
        self.page = self.browser.open(self.server.url(PAGES["wllama"]), self.timeouts.page_s)
        info, usage = self.page.call("load", {"model": self.model_url, "numThreads": self.threads, "nCtx": self.n_ctx},
                                     self.timeouts.load_s)
        info["load_cpu_per_wall"] = usage["cpu_s"] / usage["wall_s"] if usage["wall_s"] else None
        return info

    def generate(self, prompt_ids: Sequence[int], n: int) -> Generation:
        out, usage = self.page.call("generate", {"text": self.decode(list(prompt_ids)), "newTokens": n},
                                    self.timeouts.generate_s)
        timings = out.get("timings") or {}
        detail = {"prompt_tokens_engine": timings.get("prompt_n"), "prompt_tokens_workload": len(prompt_ids),
                  "engine_predicted_per_second": timings.get("predicted_per_second"),
                  "engine_prompt_ms": timings.get("prompt_ms"), "total_ms": out.get("total_ms")}
        return Generation(tuple(self.encode("".join(out["pieces"]))), tuple(out["token_ms"]), usage["wall_s"],
                          usage["cpu_s"], detail)

    def close(self) -> str | None:
        page, self.page = self.page, None
        if page is not None:
            try:
                page.call("release", None, 30)
            except Exception:   # the page is closed next either way; a failed exit is not evidence
                pass
            page.close()
        return None
