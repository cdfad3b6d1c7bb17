"""Browser throughput: onnxruntime-web (wasm, threads, SIMD) in headless Debian chromium, cross-origin
isolated, against transformers.js on the same exported directory, on the shared throughput workload."""

import json

import pytest

from harness.browser import lane, rule
from harness.domain import Variant
from harness.throughput import stats


STEP = {"decode_step_ms": "step_ms", "session_run_ms": "session_run_ms", "feed_build_ms": "feed_build_ms",
        "kv_copy_floor_ms": "kv_copy_floor_ms_last_step", "kv_bytes": "kv_bytes_last_step",
        "browser_cpu_per_wall": "browser_cpu_per_wall"}


def _page_errors(chromium, since: int) -> list:
    """The browser's console errors, page errors, failed requests and HTTP errors since event ``since``."""
    return [e for e in chromium.events[since:] if e["type"] in ("console.error", "pageerror", "requestfailed", "http")]


def _typed_cells(evidence, probe_cell):
    """The loop's cell summaries with the page's account of a step, the thread scaling and the profiled
    generation, for the receipt's typed lane block (the names the measurements below spell per cell)."""
    out = {}
    for name, summary in evidence["cells"].items():
        b = evidence["breakdown"].get(name, {})
        cell = {**summary, "step": {k: b.get(v) for k, v in STEP.items()}}
        if "thread_probe" in evidence and name == probe_cell:
            cell["step"]["thread_speedup"] = summary["decode_tok_s"] / evidence["thread_probe"]["cells"][name]["decode_tok_s"]
        p = evidence.get("profiles", {}).get(name) or {}
        if p.get("decode_runs"):
            cell["profile"] = {"kernel_ms": p["kernel_ms"], "model_run_ms": p["model_run_ms"],
                               "outside_model_run_ms": p.get("outside_model_run_ms"), "decode_runs": p["decode_runs"],
                               "top_kernels_ms": {op: p["kernel_ms_by_op"][op] for op in p["top_ops"][:4]}}
        out[name] = cell
    return out


@pytest.mark.browser
@pytest.mark.exclusive
@pytest.mark.gate("throughput_browser")
@pytest.mark.parametrize("lane_name", lane.LANES)
def test_throughput_browser(variant, lane_name, models, gate, policy, receipt, web_server, chromium, browser_target):
    work = models.workload(variant.model)
    target, identity = browser_target(variant)
    if lane_name == "transformers.js" and lane.tfjs_dtype(target.graph_file) is None:
        pytest.skip(f"{target.graph_file} is not in the transformers.js layout (onnx/model*.onnx): transformers.js "
                    f"cannot pick it")
    models.pin_graph(receipt, variant)
    probe_cfg = policy.thread_probe
    receipt.set(parameters={"workload": work.describe(), "workload_sha256": work.sha256, "lane": lane_name,
                            "page": lane.PAGES[lane_name], "backend": "wasm"})
    events_before = len(chromium.events)

    diagnosed = lane_name == "ort-web" and policy.diagnosed(variant.model.id, variant.dtype, variant.recipe)
    covers = f"the {lane_name} page" + (": the lane, its 1-thread probe and profiled generations" if diagnosed else "")
    try:
        fp32_ids = models.reference_ids(Variant(variant.model, "fp32"), work) if lane_name == "ort-web" else None
        with receipt.sampling(covers):   # chromium is a child of this process: its CPU is ours, not foreign
            evidence = lane.run(chromium, web_server, lane_name, target, work, teacher=fp32_ids)
            if diagnosed:
                # where the time goes (the fixed dtypes, or those [policy.throughput_browser] diagnose lists; a recipe
                # is timed, not diagnosed, to keep the search short): the same page on one thread (thread scaling)
                probe = lane.run(chromium, web_server, lane_name, target, work, threads=probe_cfg.threads,
                                 cells=(probe_cfg.cell,), repeats=probe_cfg.repeats, max_repeats=probe_cfg.repeats)
                evidence["thread_probe"] = {"threads": probe_cfg.threads, "load": probe["load"],
                                            "cells": probe["cells"], "breakdown": probe["breakdown"]}
                # where a step's time goes, per cell: kernels by op type, and session.run beyond the runtime's
                # own run (feeds into and outputs out of the wasm heap; the long cell moves the larger cache)
                evidence["profiles"] = lane.profile(chromium, web_server, target, work,
                                                    cells=tuple(c.name for c in work.cells))
        reference = models.reference_ids(variant, work)
        evidence["parity"] = {name: stats.agreement(ids, reference[name]) for name, ids in evidence["ids"].items()}
        if evidence.get("teacher_forced_top1"):
            # the same positions teacher-forced natively on the same graph (Python onnxruntime): the browser must
            # predict the native fp32 graph's continuation as well as the graph itself does natively
            native = models.decoder(variant)
            forced = {}
            for c in work.cells:
                if c.name not in evidence["teacher_forced_top1"]:
                    continue
                seq, start = lane.teacher_sequence(c.prompt_ids, fp32_ids[c.name])
                here = [int(i) for i in native.full(seq)[start - 1:].argmax(axis=-1)]
                forced[c.name] = {"browser": stats.agreement(evidence["teacher_forced_top1"][c.name], fp32_ids[c.name]),
                                  "native": stats.agreement(here, fp32_ids[c.name])}
            evidence["teacher_forced"] = forced
            receipt.note("teacher_forced", forced)
    finally:
        errors = _page_errors(chromium, events_before)
        receipt.note("console_errors", errors[:50])
        receipt.note("console_error_count", len(errors))

    (receipt.evidence_dir / "browser.json").write_text(json.dumps(evidence, indent=1))
    load = evidence["load"]
    env = load["env"]
    receipt.note("crossOriginIsolated", env["crossOriginIsolated"])
    receipt.note("simd", env["simd"])
    receipt.note("ort_web_version", load["ort_version"])
    if load.get("download_bytes"):   # what the page fetched from the artifact store: graph, weights or pack
        receipt.measure("download_bytes", load["download_bytes"], "bytes")
    if load.get("packed"):
        receipt.note("packed", load["packed"])
        receipt.measure("pack_expand_ms", load["packed"]["expand_ms"], "ms")
    receipt.note("ort_web_wasm_binaries", load["wasm_binaries"])
    receipt.note("browser_version", chromium.version)
    receipt.note("user_agent", env["userAgent"])
    receipt.note("hardware_concurrency", env["hardwareConcurrency"])
    receipt.note("num_threads_effective", load["num_threads_effective"])
    receipt.note("workers_started", load["workers_started"])
    receipt.note("breakdown", evidence["breakdown"])
    receipt.note("parity", evidence["parity"])
    receipt.note("timing_caveat", "2 shared cores; other work ran on the machine, timings are noisy")
    for name, b in evidence["breakdown"].items():
        receipt.measure(f"decode_step_ms_{name}", b["step_ms"], "ms")
        if b["session_run_ms"] is not None:
            receipt.measure(f"session_run_ms_{name}", b["session_run_ms"], "ms")
            receipt.measure(f"feed_build_ms_{name}", b["feed_build_ms"], "ms")
        if b["kv_copy_floor_ms_last_step"] is not None:
            receipt.measure(f"kv_copy_floor_ms_{name}", b["kv_copy_floor_ms_last_step"], "ms")
            receipt.measure(f"kv_bytes_{name}", b["kv_bytes_last_step"], "bytes")
        if b["browser_cpu_per_wall"] is not None:
            receipt.measure(f"browser_cpu_per_wall_{name}", b["browser_cpu_per_wall"], "ratio")
    if "thread_probe" in evidence:
        p = evidence["thread_probe"]
        cell = probe_cfg.cell
        one = p["cells"][cell]["decode_tok_s"]
        receipt.note("thread_probe", p)
        receipt.measure(f"decode_tok_s_{cell}_1thread", one, "tokens/s", p["cells"][cell]["repeats"])
        receipt.measure(f"thread_speedup_{cell}", evidence["cells"][cell]["decode_tok_s"] / one, "ratio")
    for name, p in evidence.get("profiles", {}).items():
        if not p.get("decode_runs"):
            continue
        receipt.note(f"profile_{name}", p)
        receipt.measure(f"profile_model_run_ms_{name}", p["model_run_ms"], "ms", p["decode_runs"])
        receipt.measure(f"profile_kernel_ms_{name}", p["kernel_ms"], "ms", p["decode_runs"])
        if p.get("outside_model_run_ms") is not None:
            receipt.measure(f"profile_outside_model_run_ms_{name}", p["outside_model_run_ms"], "ms", p["decode_runs"])
        for op in p["top_ops"][:4]:
            receipt.measure(f"profile_kernel_ms_{name}_{op.lower()}", p["kernel_ms_by_op"][op], "ms", p["decode_runs"])
    receipt.record_lane(lane_name, _typed_cells(evidence, probe_cfg.cell), load, threads=rule.threads_used(load))
    evidence["workload"] = work.describe()
    verdict = receipt.decide(gate.decide(gate.evidence.pick(evidence), policy))
    assert verdict.passed, verdict.render()


@pytest.mark.browser
@pytest.mark.exclusive
@pytest.mark.gate("peer_wllama")
def test_peer_wllama(variant, models, gate, policy, receipt, web_server, chromium):
    """wllama (llama.cpp in WebAssembly) on the original GGUF, in the same Chromium, on the shared workload: the
    browser peer the onnxruntime-web lanes are compared with. Its prompt is the workload's ids decoded to text
    (wllama takes text); the engine's prompt token count is checked against the ids."""
    from harness import progress
    from harness.domain import Variant
    from harness.lanes import run_lane

    spec = variant.model
    path = models.gguf_path(spec)
    receipt.pin_identity("graph", str(path), spec.sha256, path.stat().st_size)
    work = models.workload(spec)
    tok = models.tokenizer(spec)
    n_ctx = max(len(c.prompt_ids) for c in work.cells) + work.new_tokens + 64
    receipt.set(parameters={"workload": work.describe(), "workload_sha256": work.sha256, "lane": "wllama",
                            "page": lane.PAGES["wllama"], "n_ctx": n_ctx, "sampler": "temperature 0, EOS ignored",
                            "prompt": "the workload's ids decoded to text (wllama takes text)"})
    events_before = len(chromium.events)
    peer = lane.WllamaLane(chromium, web_server, web_server.url(f"gguf/{spec.id}/{path.name}"), work.threads, n_ctx,
                           decode=lambda ids: tok.decode(ids), encode=lambda text: tok(text, add_special_tokens=False)["input_ids"])
    try:
        with receipt.sampling("the wllama page: load, warm-up and repeats"):
            load, found = run_lane(peer, work, progress=progress.emit)
    finally:
        receipt.note("console_errors", _page_errors(chromium, events_before)[:50])
    fp32 = models.reference_ids(Variant(spec, "fp32"), work)
    parity = {name: stats.agreement(ids, fp32[name]) for name, ids in found["ids"].items()} if found["ids"] else None
    prompt_counts = {c: sorted({(r.get("prompt_tokens_engine"), r.get("prompt_tokens_workload"))
                                for r in raw if r.get("prompt_tokens_engine") is not None})
                     for c, raw in (found.get("raw") or {}).items()}
    receipt.note("prompt_tokens_engine_vs_workload", prompt_counts)
    receipt.note("agreement_with_fp32", parity)
    receipt.note("browser_version", chromium.version)
    if load:
        receipt.note("wllama_load", load)
    evidence = {"lane": "wllama", "dtype": variant.dtype, "workload": work.describe(), **found, "load": load,
                "parity": parity, "parity_reference": "our fp32 graph's greedy ids (informational: llama.cpp's kernels "
                                                      "on the GGUF, ids re-tokenized from wllama's text)"}
    (receipt.evidence_dir / "wllama.json").write_text(json.dumps(evidence, indent=1, default=str))
    receipt.record_lane("wllama", found.get("cells") or {}, load, found.get("error"))
    verdict = receipt.decide(gate.decide(gate.evidence.pick(evidence), policy))
    assert verdict.passed, verdict.render()
