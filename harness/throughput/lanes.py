"""The lanes the throughput tests time on the shared workload: each is a ``generate(prompt_ids,
new_tokens) -> {"ids", "token_ms"}`` callable (stamps in ms from the request's start, one per
generated token), driven by :func:`measure` through warm-up, the repeats and the extra repeats the
variation asks for."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..errors import EvidenceError, HarnessError
from ..workload import Workload
from . import stats

Generate = Callable[[list[int], int], dict[str, Any]]


def measure(generate: Generate, workload: Workload, lane: str, *, cpu_s: Callable[[], float | None] = time.process_time,
            progress: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Per cell: ``workload.warmup`` untimed generations, then repeats until :func:`stats.needs_more`
    says enough. Returns {cells: {name: summary}, ids: {name: ids}, raw: {name: [per repeat]}, error}.
    An error stops the lane and is recorded (the rule fails it), never raised."""
    out: dict[str, Any] = {"cells": {}, "ids": {}, "raw": {}, "error": None, "ids_stable": {}}
    try:
        for cell in workload.cells:
            prompt = list(cell.prompt_ids)
            raw: list[dict[str, Any]] = []
            for _ in range(workload.warmup):
                g = generate(prompt, workload.new_tokens)
                raw.append({"warmup": True, "ids": g["ids"], "token_ms": g["token_ms"]})
            measured: list[dict[str, Any]] = []
            seen: list[list[int]] = []
            while stats.needs_more([m["decode_tok_s"] for m in measured], workload.repeats, workload.max_repeats,
                                   workload.cv_limit):
                c0, w0 = cpu_s(), time.perf_counter()
                g = generate(prompt, workload.new_tokens)
                c1, w1 = cpu_s(), time.perf_counter()
                f = stats.figures(g["token_ms"], g["ids"], workload.new_tokens)
                f["cpu_per_wall"] = None if c0 is None or c1 is None else (c1 - c0) / (w1 - w0)
                measured.append(f)
                seen.append(list(g["ids"]))
                raw.append({"warmup": False, **f, "ids": g["ids"], "token_ms": g["token_ms"]})
            summary = stats.summarize(measured)
            cpu = [m["cpu_per_wall"] for m in measured if m["cpu_per_wall"] is not None]
            summary["cpu_per_wall"] = float(np.median(cpu)) if cpu else None
            out["cells"][cell.name] = summary
            out["ids"][cell.name] = seen[-1]
            out["ids_stable"][cell.name] = all(s == seen[0] for s in seen)
            out["raw"][cell.name] = raw
            progress(f"{lane} {cell.name}: {summary['decode_tok_s']:.1f} tok/s pooled over {summary['repeats']} "
                     f"repeats (cv {summary['decode_tok_s_cv'] or 0:.3f}), prefill {summary['prefill_ms_median']:.1f} ms")
    except HarnessError as exc:
        out["error"] = str(exc)
    return out


# -- Python onnxruntime (numpy feeds, the naive loop) ---------------------------------------------
def python_ort(decoder) -> Generate:
    """harness.runtime.OrtDecoder's forward, greedy, numpy feeds and the whole cache returned each step."""
    def generate(prompt: list[int], new_tokens: int) -> dict[str, Any]:
        t0 = time.perf_counter()
        n = len(prompt)
        logits, past = decoder.forward(np.asarray([prompt], np.int64), np.ones((1, n), np.int64),
                                       np.arange(n, dtype=np.int64)[None], decoder.empty_past(1))
        ids = [int(np.argmax(logits[0, -1]))]
        stamps = [(time.perf_counter() - t0) * 1000]
        while len(ids) < new_tokens:
            total = n + len(ids)
            logits, past = decoder.forward(np.asarray([[ids[-1]]], np.int64), np.ones((1, total), np.int64),
                                           np.asarray([[total - 1]], np.int64), past)
            ids.append(int(np.argmax(logits[0, -1])))
            stamps.append((time.perf_counter() - t0) * 1000)
        return {"ids": ids, "token_ms": stamps}
    return generate


# -- ORT-GenAI ----------------------------------------------------------------------------------
def ortgenai_model(model_dir: Path, threads: int):
    """An onnxruntime_genai Model on the built directory, on ``threads`` intra-op threads."""
    import onnxruntime_genai as og

    config = og.Config(str(model_dir))
    config.overlay(json.dumps({"model": {"decoder": {"session_options": {
        "intra_op_num_threads": threads, "inter_op_num_threads": 1}}}}))
    return og.Model(config)


def ortgenai(model) -> Generate:
    """ORT-GenAI's own generator loop: append_tokens (prefill), then generate_next_token per token.

    EOS is not ignorable in its loop: a generation that stops early is refused by the statistics."""
    import onnxruntime_genai as og

    def generate(prompt: list[int], new_tokens: int) -> dict[str, Any]:
        t0 = time.perf_counter()
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(prompt) + new_tokens, do_sample=False)
        ids, stamps = [], []
        try:
            gen = og.Generator(model, params)
            gen.append_tokens(np.asarray(prompt, dtype=np.int32))
            while len(ids) < new_tokens and not gen.is_done():
                gen.generate_next_token()
                ids.append(int(gen.get_next_tokens()[0]))
                stamps.append((time.perf_counter() - t0) * 1000)
            del gen
        except Exception as exc:  # onnxruntime_genai raises plain RuntimeError
            raise EvidenceError(f"onnxruntime_genai: {exc}") from exc
        return {"ids": ids, "token_ms": stamps}
    return generate


def loaded_libraries(fragment: str) -> list[str]:
    """Shared objects of this process whose path contains ``fragment`` (from /proc/self/maps)."""
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return []
    return sorted({l.split()[-1] for l in lines if fragment in l and "/" in l.split()[-1]})


# -- llama.cpp ----------------------------------------------------------------------------------
def llamacpp_model(gguf_path: Path, threads: int, n_ctx: int):
    from llama_cpp import Llama

    return Llama(model_path=str(gguf_path), n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_threads=threads,
                 n_threads_batch=threads, seed=0, verbose=False, logits_all=False)


def llamacpp(llm) -> Generate:
    """llama-cpp-python's generate loop with the greedy sampler; the cache reset before each
    generation so the prompt is evaluated in full every time (no prefix reuse)."""
    def generate(prompt: list[int], new_tokens: int) -> dict[str, Any]:
        llm.reset()
        t0 = time.perf_counter()
        ids, stamps = [], []
        try:
            for tok in llm.generate(list(prompt), top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0,
                                    reset=True):
                ids.append(int(tok))
                stamps.append((time.perf_counter() - t0) * 1000)
                if len(ids) >= new_tokens:
                    break
        except Exception as exc:  # llama_cpp raises ValueError/RuntimeError
            raise EvidenceError(f"llama.cpp: {exc}") from exc
        return {"ids": ids, "token_ms": stamps}
    return generate


def failed(error: str) -> dict[str, Any]:
    """A lane that gave no result: the evidence shape every rule reads, with the error that stopped it."""
    return {"cells": {}, "ids": {}, "raw": {}, "error": error, "ids_stable": {}}


def measure_interleaved(generators: dict[str, Generate], workload: Workload, *,
                        cpu_s: dict[str, Callable[[], float | None]] | None = None,
                        progress: Callable[[str], None] = lambda s: None) -> dict[str, dict[str, Any]]:
    """Several lanes side by side: per cell, each lane's warm-up, then rounds of one generation per
    lane (the order rotated each round, so drift in the machine's load falls on every lane alike),
    until no lane needs more (the same bound as :func:`measure`). Returns {lane: evidence} shaped
    like :func:`measure`'s; a lane that errs is recorded and dropped from later rounds."""
    names = list(generators)
    out = {n: {"cells": {}, "ids": {}, "raw": {}, "error": None, "ids_stable": {}} for n in names}
    cpu_s = cpu_s or {}
    for cell in workload.cells:
        prompt = list(cell.prompt_ids)
        live = [n for n in names if not out[n]["error"]]
        measured: dict[str, list[dict[str, Any]]] = {n: [] for n in live}
        seen: dict[str, list[list[int]]] = {n: [] for n in live}
        for n in live:
            out[n]["raw"][cell.name] = []
            try:
                for _ in range(workload.warmup):
                    generators[n](prompt, workload.new_tokens)
            except HarnessError as exc:
                out[n]["error"] = str(exc)
        rnd = 0
        while True:
            live = [n for n in measured if not out[n]["error"]]
            if not live or not any(stats.needs_more([m["decode_tok_s"] for m in measured[n]], workload.repeats,
                                                    workload.max_repeats, workload.cv_limit) for n in live):
                break
            order = live[rnd % len(live):] + live[:rnd % len(live)]
            rnd += 1
            for n in order:
                clock = cpu_s.get(n, time.process_time)
                try:
                    c0, w0 = clock(), time.perf_counter()
                    g = generators[n](prompt, workload.new_tokens)
                    c1, w1 = clock(), time.perf_counter()
                    f = stats.figures(g["token_ms"], g["ids"], workload.new_tokens)
                except HarnessError as exc:
                    out[n]["error"] = str(exc)
                    continue
                f["cpu_per_wall"] = None if c0 is None or c1 is None else (c1 - c0) / (w1 - w0)
                f["round"] = rnd
                measured[n].append(f)
                seen[n].append(list(g["ids"]))
                out[n]["raw"][cell.name].append({**f, "ids": g["ids"], "token_ms": g["token_ms"]})
        for n, reps in measured.items():
            if out[n]["error"] or not reps:
                continue
            summary = stats.summarize(reps)
            cpu = [m["cpu_per_wall"] for m in reps if m["cpu_per_wall"] is not None]
            summary["cpu_per_wall"] = float(np.median(cpu)) if cpu else None
            out[n]["cells"][cell.name] = summary
            out[n]["ids"][cell.name] = seen[n][-1]
            out[n]["ids_stable"][cell.name] = all(s == seen[n][0] for s in seen[n])
            progress(f"{n} {cell.name}: {summary['decode_tok_s']:.1f} tok/s over {summary['repeats']} interleaved repeats")
    return out
