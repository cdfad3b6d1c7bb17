"""Native throughput: the C++ probe on the ONNX Runtime C API (native/probe/) against a Python
onnxruntime lane on the same graphs, with ORT-GenAI (its own int4 export and generator loop, and the
probe on that graph) and llama.cpp (the original GGUF) as peers in the same run, all on the shared
workload (harness/workload.py). Each test writes one receipt per (lane, variant); the last one measures
every lane side by side in interleaved rounds for the goal ratios. Throughput is recorded, never asserted."""

import json
import re
import time

import pytest

from harness import workload as workloads
from harness.errors import HarnessError
from harness.models import gguf
from harness.throughput import lanes, ortgenai, probe, rule, stats
from harness.session import PEER_GENAI
from harness.verdict import Verdict

TIMING_CAVEAT = ("2 logical CPUs shared with other work (other engineers' runs, builds); the exclusive lock only "
                 "serializes Gatehouse's own timing tests, so timings are noisy")
GOAL_TARGETS = {"vs_ortgenai": 1.0, "vs_llamacpp": 1.3, "probe_vs_ortgenai_tolerance": 0.03}
GENAI_DTYPE = PEER_GENAI


@pytest.fixture(scope="session")
def probe_binary():
    return probe.ensure_built()


def _workload(models, campaign, spec):
    return workloads.build(models.heldout_ids(spec), campaign.policy.get("throughput"))


def _max_seq(work) -> int:
    return max(len(c.prompt_ids) for c in work.cells) + work.new_tokens


def _policy(work, require_parity: bool) -> dict:
    return {"threads": work.threads, "repeats": work.repeats, "max_repeats": work.max_repeats,
            "cv_limit": work.cv_limit, "cells": [c.name for c in work.cells], "require_parity": require_parity}


def _python_reference(models, gatehouse, variant, work):
    """Greedy ids per cell from harness.runtime.OrtDecoder on the same graph (the parity reference)."""
    key = ("throughput-reference", variant.id, work.sha256)
    if key not in gatehouse.memo:
        dec = models.decoder(variant)
        gatehouse.memo[key] = {c.name: dec.greedy(list(c.prompt_ids), work.new_tokens - 1)[0] for c in work.cells}
    return gatehouse.memo[key]


def _record(receipt, lane, work, evidence, extra_notes=None):
    """The notes every lane's receipt carries, and its raw evidence file."""
    receipt.note("lane", lane)
    receipt.note("machine", lanes.machine_load())
    receipt.note("timing_caveat", TIMING_CAVEAT)
    receipt.note("ids_stable", evidence.get("ids_stable"))
    receipt.note("cpu_per_wall", {k: v.get("cpu_per_wall") for k, v in evidence.get("cells", {}).items()})
    for key, value in (extra_notes or {}).items():
        receipt.note(key, value)
    if evidence.get("error"):
        receipt.note("error", evidence["error"])
    (receipt.evidence_dir / f"{re.sub(r'[^a-z0-9]+', '_', lane)}.json").write_text(
        json.dumps({"workload": work.describe(), **evidence}, indent=1))


def _parity(ids, reference):
    return {name: stats.agreement(got, reference[name]) for name, got in ids.items() if name in reference}


def _run_probe(binary, graph, work, **kwargs):
    """The workload through one probe process: (load receipt or None, measured evidence)."""
    try:
        proc = probe.ProbeProcess(binary, graph, work.threads, max_seq=_max_seq(work), **kwargs)
    except HarnessError as exc:
        return None, {"cells": {}, "ids": {}, "raw": {}, "error": str(exc), "ids_stable": {}}
    with proc:
        found = lanes.measure(lambda p, n: proc.generate(p, n, work.threads), work, "native-probe", cpu_s=proc.cpu_s)
    rc = proc.proc.returncode
    if rc not in (0, None) and not found["error"]:
        found["error"] = f"the probe exited with status {rc}: {' | '.join(proc.stderr_lines[-3:])}"
    return proc.load, found


@pytest.mark.native
@pytest.mark.exclusive
@pytest.mark.gate("throughput_native", dtypes=("fp32", "q8", "q4"))
def test_throughput_native(variant, models, campaign, gatehouse, receipt, probe_binary):
    work = _workload(models, campaign, variant.model)
    graph, identity = models.graph(variant)
    receipt.pin_identity("graph", identity["path"], identity["sha256"], identity["bytes"])
    reference = _python_reference(models, gatehouse, variant, work)
    require = variant.dtype == "fp32"
    policy = _policy(work, require)
    receipt.set(parameters={"workload": work.describe(), "workload_sha256": work.sha256, "lane": "native-probe",
                            "kv": "auto (the graph's gatehouse.kv metadata; the load receipt's kv_mode)",
                            "probe_sources_sha256": probe.sources_sha256()}, policy=policy)
    load, found = _run_probe(probe_binary, graph, work, kv="auto")
    if load and load.get("graph_sha256") != identity["sha256"] and not found["error"]:
        found["error"] = f"the probe loaded a graph with SHA-256 {load.get('graph_sha256')}, pinned {identity['sha256']}"
    evidence = {"lane": "native-probe", "dtype": variant.dtype, **found, "load": load,
                "parity": _parity(found["ids"], reference) if found["ids"] else None,
                "parity_reference": "the Python onnxruntime greedy ids on the same graph"}
    _record(receipt, "native-probe", work, evidence, {"load_receipt": load, "parity": evidence["parity"]})
    verdict = receipt.decide(rule.decide(evidence, policy))
    assert verdict.passed, verdict.render()


@pytest.mark.native
@pytest.mark.exclusive
@pytest.mark.gate("throughput_python", dtypes=("fp32", "q8", "q4"))
def test_throughput_python(variant, models, campaign, gatehouse, receipt):
    work = _workload(models, campaign, variant.model)
    graph, identity = models.graph(variant)
    receipt.pin_identity("graph", identity["path"], identity["sha256"], identity["bytes"])
    policy = _policy(work, variant.dtype == "fp32")
    receipt.set(parameters={"workload": work.describe(), "workload_sha256": work.sha256, "lane": "python-ort",
                            "feeds": "numpy, the whole cache returned and fed back each step"}, policy=policy)
    import onnxruntime

    from harness.runtime import OrtDecoder

    t0 = time.perf_counter()
    try:
        decoder = OrtDecoder(graph, work.threads)  # a fresh session, so its load is timed too
        load = {"load_ms": (time.perf_counter() - t0) * 1000, "threads": decoder.threads,
                "runtime_version": onnxruntime.__version__}
        found = lanes.measure(lanes.python_ort(decoder), work, "python-ort")
        del decoder
    except HarnessError as exc:
        load, found = None, {"cells": {}, "ids": {}, "raw": {}, "error": str(exc), "ids_stable": {}}
    reference = _python_reference(models, gatehouse, variant, work) if not found["error"] else {}
    evidence = {"lane": "python-ort", "dtype": variant.dtype, **found, "load": load,
                "parity": _parity(found["ids"], reference) if found["ids"] else None,
                "parity_reference": "harness.runtime.OrtDecoder.greedy on the same graph"}
    _record(receipt, "python-ort", work, evidence, {"load_receipt": load, "runtime_library": lanes.loaded_libraries(
        "libonnxruntime")})
    verdict = receipt.decide(rule.decide(evidence, policy))
    assert verdict.passed, verdict.render()


@pytest.mark.native
@pytest.mark.exclusive
@pytest.mark.gate("peer_ortgenai", dtypes=("fp32",))
@pytest.mark.parametrize("lane_name", ("ort-genai", "ort-genai-probe"))
def test_peer_ortgenai(variant, lane_name, models, campaign, gatehouse, receipt, probe_binary):
    """ORT-GenAI's int4 CPU export of the same HF directory: its own generator loop ("ort-genai",
    gate peer_ortgenai) and the probe on its graph ("ort-genai-probe", gate throughput_native), both
    receipts under the variant dtype ort-genai-int4."""
    spec = variant.model
    work = _workload(models, campaign, spec)
    art = models.ortgenai(spec)
    graph, identity = art.file(ortgenai.GRAPH), art.identity(ortgenai.GRAPH)
    receipt.set(gate="peer_ortgenai" if lane_name == "ort-genai" else "throughput_native",
                variant={"dtype": GENAI_DTYPE})
    receipt.pin_identity("graph", identity["path"], identity["sha256"], identity["bytes"])
    data = "model.onnx.data"
    total = identity["bytes"]
    if (art.path / data).is_file():
        d = art.identity(data)
        receipt.pin_identity("graph_data", d["path"], d["sha256"], d["bytes"])
        total += d["bytes"]
    receipt.measure("graph_bytes_total", total, "bytes")  # the graph's weights live in model.onnx.data
    options = ortgenai.probe_options(art.path)
    io = ortgenai.graph_io(art.path)
    own_key = ("ortgenai-own", spec.id, work.sha256)
    require = lane_name == "ort-genai-probe"
    policy = _policy(work, require)
    receipt.set(parameters={"workload": work.describe(), "workload_sha256": work.sha256, "lane": lane_name,
                            "builder": art.manifest.get("builder"),
                            "builder_params": {**ortgenai.DEFAULT_PARAMS, "onnxruntime_genai": ortgenai.version()},
                            "kv": options["kv"]}, policy=policy)
    receipt.note("graph_io", io)
    receipt.note("runtime_decoder_compatible", "position_ids" in io["inputs"])

    def own_loop():
        t0 = time.perf_counter()
        model = lanes.ortgenai_model(art.path, work.threads)
        load = {"load_ms": (time.perf_counter() - t0) * 1000, "threads": work.threads,
                "onnxruntime_genai": ortgenai.version(), "runtime_library": lanes.loaded_libraries("libonnxruntime")}
        return model, load

    if lane_name == "ort-genai":
        try:
            model, load = own_loop()
            found = lanes.measure(lanes.ortgenai(model), work, lane_name)
            del model
        except Exception as exc:  # onnxruntime_genai raises plain RuntimeError
            load, found = None, {"cells": {}, "ids": {}, "raw": {}, "error": f"onnxruntime_genai: {exc}", "ids_stable": {}}
        if not found["error"]:
            gatehouse.memo[own_key] = found["ids"]
        fp32 = _python_reference(models, gatehouse, variant, work)
        parity = _parity(found["ids"], fp32) if found["ids"] else None
        evidence = {"lane": lane_name, "dtype": GENAI_DTYPE, **found, "load": load, "parity": parity,
                    "parity_reference": "our fp32 graph's greedy ids (informational: a different int4 export)"}
        notes = {"load_receipt": load, "agreement_with_fp32": parity}
    else:
        if own_key not in gatehouse.memo:
            try:
                model, _ = own_loop()
                gen = lanes.ortgenai(model)
                gatehouse.memo[own_key] = {c.name: gen(list(c.prompt_ids), work.new_tokens)["ids"] for c in work.cells}
                del model
            except Exception as exc:
                gatehouse.memo[own_key] = {}
                receipt.note("reference_error", f"onnxruntime_genai: {exc}")
        load, found = _run_probe(probe_binary, graph, work, kv=options["kv"], kv_heads=options["kv_heads"],
                                 head_dim=options["head_dim"])
        reference = gatehouse.memo[own_key]
        evidence = {"lane": lane_name, "dtype": GENAI_DTYPE, **found, "load": load,
                    "parity": _parity(found["ids"], reference) if found["ids"] and reference else None,
                    "parity_reference": "ORT-GenAI's own generator loop on the same graph"}
        notes = {"load_receipt": load, "parity": evidence["parity"]}
    _record(receipt, lane_name, work, evidence, notes)
    verdict = receipt.decide(rule.decide(evidence, policy))
    assert verdict.passed, verdict.render()


@pytest.mark.native
@pytest.mark.exclusive
@pytest.mark.gate("peer_llamacpp", dtypes=("fp32",))
def test_peer_llamacpp(variant, models, campaign, gatehouse, receipt):
    """llama.cpp (llama-cpp-python) on the original GGUF the model was converted from."""
    spec = variant.model
    if spec.source != "gguf":
        receipt.set(variant={"dtype": None})  # no llama.cpp variant to attach the skip to
        pytest.skip(f"{spec.id} has no GGUF (source {spec.source!r}): llama.cpp runs the original GGUF only")
    path = gguf.locate(spec.package, spec.file)
    gguf.verify_pin(path, spec.sha256)
    quant = re.search(r"\.(Q\w+|F16|F32|BF16)\.gguf$", spec.file, re.I)
    receipt.set(variant={"dtype": f"gguf-{quant.group(1).lower() if quant else 'unknown'}"})
    receipt.pin_identity("graph", str(path), spec.sha256, path.stat().st_size)
    work = _workload(models, campaign, spec)
    policy = _policy(work, False)
    import llama_cpp

    receipt.set(parameters={"workload": work.describe(), "workload_sha256": work.sha256, "lane": "llama.cpp",
                            "llama_cpp_python": llama_cpp.__version__, "sampler": "greedy (temp 0, top_k 1)",
                            "n_ctx": _max_seq(work) + 64}, policy=policy)
    t0 = time.perf_counter()
    try:
        llm = lanes.llamacpp_model(path, work.threads, _max_seq(work) + 64)
        load = {"load_ms": (time.perf_counter() - t0) * 1000, "threads": work.threads,
                "llama_cpp_python": llama_cpp.__version__, "system_info": llama_cpp.llama_print_system_info().decode()}
        found = lanes.measure(lanes.llamacpp(llm), work, "llama.cpp")
        del llm
    except Exception as exc:  # llama_cpp raises ValueError/RuntimeError
        load, found = None, {"cells": {}, "ids": {}, "raw": {}, "error": f"llama.cpp: {exc}", "ids_stable": {}}
    fp32 = _python_reference(models, gatehouse, variant, work)
    parity = _parity(found["ids"], fp32) if found["ids"] else None
    evidence = {"lane": "llama.cpp", "dtype": "gguf", **found, "load": load, "parity": parity,
                "parity_reference": "our fp32 graph's greedy ids (informational: llama.cpp's own kernels)"}
    _record(receipt, "llama.cpp", work, evidence, {"load_receipt": load, "agreement_with_fp32": parity})
    verdict = receipt.decide(rule.decide(evidence, policy))
    assert verdict.passed, verdict.render()


def _lane_key(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


@pytest.mark.native
@pytest.mark.exclusive
@pytest.mark.gate("throughput_goal", dtypes=("fp32",))
def test_throughput_goal(variant, models, campaign, gatehouse, receipt, probe_binary):
    """The goal ratios, measured side by side: every lane of the model loaded at once and timed in
    interleaved rounds (one generation per lane per round, order rotated), so the machine's drifting
    load falls on all of them alike. Records each of our variants on the probe against ORT-GenAI's own
    loop and llama.cpp, and the probe on the ORT-GenAI graph against that loop (a benchmark: ratios
    are recorded, never asserted; the verdict fails only when a lane gave no valid result or the
    probe's ids on the ORT-GenAI graph differ from ORT-GenAI's)."""
    spec = variant.model
    work = _workload(models, campaign, spec)
    receipt.set(variant={"dtype": None}, parameters={"workload": work.describe(), "workload_sha256": work.sha256,
                                                     "targets": GOAL_TARGETS, "method": "interleaved rounds"},
                policy={"targets": GOAL_TARGETS})
    gens, clocks, closers, loads, errors = {}, {}, [], {}, []
    try:
        for dtype in spec.dtypes:
            graph, _ = models.graph(type(variant)(spec, dtype))
            try:
                p = probe.ProbeProcess(probe_binary, graph, work.threads, kv="auto", max_seq=_max_seq(work))
            except HarnessError as exc:
                errors.append(f"probe {dtype}: {exc}")
                continue
            closers.append(p.close)
            gens[dtype] = (lambda p: lambda ids, n: p.generate(ids, n, work.threads))(p)
            clocks[dtype] = p.cpu_s
            loads[dtype] = p.load
        art = models.ortgenai(spec)
        options = ortgenai.probe_options(art.path)
        try:
            model = lanes.ortgenai_model(art.path, work.threads)
            gens["ort-genai"] = lanes.ortgenai(model)
        except Exception as exc:
            errors.append(f"ort-genai: {exc}")
        try:
            p = probe.ProbeProcess(probe_binary, art.file(ortgenai.GRAPH), work.threads, max_seq=_max_seq(work),
                                   kv=options["kv"], kv_heads=options["kv_heads"], head_dim=options["head_dim"])
            closers.append(p.close)
            gens["ort-genai-probe"] = (lambda p: lambda ids, n: p.generate(ids, n, work.threads))(p)
            clocks["ort-genai-probe"] = p.cpu_s
            loads["ort-genai-probe"] = p.load
        except HarnessError as exc:
            errors.append(f"ort-genai-probe: {exc}")
        if spec.source == "gguf":
            try:
                llm = lanes.llamacpp_model(gguf.locate(spec.package, spec.file), work.threads, _max_seq(work) + 64)
                gens["llama.cpp"] = lanes.llamacpp(llm)
            except Exception as exc:
                errors.append(f"llama.cpp: {exc}")
        found = lanes.measure_interleaved(gens, work, cpu_s=clocks)
    finally:
        for close in closers:
            close()
    rates = {name: {c: e["cells"].get(c, {}).get("decode_tok_s") for c in (x.name for x in work.cells)}
             for name, e in found.items() if not e["error"]}
    errors += [f"{name}: {e['error']}" for name, e in found.items() if e["error"]]
    result = rule.goal(rates, GOAL_TARGETS)
    parity = None
    if "ort-genai" in rates and "ort-genai-probe" in rates:
        parity = _parity(found["ort-genai-probe"]["ids"], found["ort-genai"]["ids"])
        errors += [f"ort-genai-probe: greedy ids differ from ORT-GenAI's own loop in cell {c}: first divergence at "
                   f"token {a['first_divergence']}" for c, a in parity.items() if not a["identical"]]
    (receipt.evidence_dir / "interleaved.json").write_text(json.dumps({"workload": work.describe(), "lanes": found,
                                                                       "loads": loads}, indent=1))
    receipt.note("goal", result)
    receipt.note("rates", rates)
    receipt.note("lanes", sorted(gens))
    receipt.note("probe_loads", loads)
    receipt.note("ortgenai_probe_parity", parity)
    receipt.note("cpu_per_wall", {n: {c: s.get("cpu_per_wall") for c, s in e["cells"].items()} for n, e in found.items()})
    receipt.note("machine", lanes.machine_load())
    receipt.note("timing_caveat", TIMING_CAVEAT)
    for name, cells in rates.items():
        for cell, rate in cells.items():
            e = found[name]["cells"][cell]
            receipt.measure(f"decode_tok_s_{_lane_key(name)}_{cell}", rate, "tokens/s", e["repeats"])
            receipt.measure(f"decode_tok_s_{_lane_key(name)}_{cell}_cv", e["decode_tok_s_cv"], "ratio", e["repeats"])
    for dtype, cells in result["variants"].items():
        for cell, r in cells.items():
            receipt.measure(f"{dtype}_over_ortgenai_{cell}", r["vs_ortgenai"], "ratio")
            receipt.measure(f"{dtype}_over_llamacpp_{cell}", r["vs_llamacpp"], "ratio")
    for cell, r in result["probe_on_ortgenai_graph"].items():
        receipt.measure(f"probe_on_ortgenai_graph_over_own_loop_{cell}", r["ratio"], "ratio")
    # paired per round (drift cancels): the figures to read the goal from on a shared machine
    paired = {}
    pairs = [("ort-genai-probe", "ort-genai")] + [(d, peer) for d in spec.dtypes for peer in ("ort-genai", "llama.cpp")]
    for a, b in pairs:
        if a not in rates or b not in rates:
            continue
        for cell in (c.name for c in work.cells):
            ra, rb = found[a]["raw"].get(cell, []), found[b]["raw"].get(cell, [])
            p = stats.paired_ratio(ra, rb)
            paired.setdefault(f"{a}/{b}", {})[cell] = p
            receipt.measure(f"paired_{_lane_key(a)}_over_{_lane_key(b)}_{cell}", p["median"], "ratio", p["rounds"])
            receipt.measure(f"paired_{_lane_key(a)}_over_{_lane_key(b)}_{cell}_iqr", p["iqr"], "ratio", p["rounds"])
    receipt.note("paired_ratios", paired)
    verdict = receipt.decide(Verdict.from_checks(errors))
    assert verdict.passed, verdict.render()
