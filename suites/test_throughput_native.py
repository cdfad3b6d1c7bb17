"""Native throughput: the C++ probe on the ONNX Runtime C API (native/probe/) against a Python
onnxruntime lane on the same graphs, with ORT-GenAI (its own int4 export and generator loop, and the
probe on that graph) and llama.cpp (the original GGUF) as peers in the same run, all on the shared
workload (harness/workload.py). Each test writes one receipt per (lane, variant); the goal test measures
every lane of a model side by side in interleaved rounds. Throughput is recorded, never asserted."""

import json

import pytest

from harness.domain import PEER_GENAI, PEER_GENAI_BEST, PEER_GGUF, PEERS, Variant
from harness.errors import HarnessError
from harness import progress
from harness.lanes import measure, run_lane
from harness.throughput import lanes, ortgenai, pins, probe, rule, stats

TIMING_CAVEAT = ("2 logical CPUs shared with other work (other engineers' runs, builds); the exclusive lock only "
                 "serializes Gatehouse's own timing tests, so timings are noisy")


@pytest.fixture(scope="session")
def probe_binary():
    return probe.ensure_built()


@pytest.fixture(scope="session")
def ortgenai_ids(models):
    """ORT-GenAI's own loop's greedy ids per workload cell, once per model: the probe's parity reference on
    ORT-GenAI's graph (computed here, never borrowed from another test's result)."""
    def ids(spec, work, kind=PEER_GENAI):
        def make():
            with lanes.OrtGenAILane(models.ortgenai(spec, kind).path, work.threads) as lane:
                lane.load()
                return {c.name: list(lane.generate(c.prompt_ids, work.new_tokens).ids) for c in work.cells}
        return models.memo(("ortgenai-ids", spec.id, kind, work.sha256), make)
    return ids


def _max_seq(work) -> int:
    return max(len(c.prompt_ids) for c in work.cells) + work.new_tokens


def _parity(ids, reference):
    return {name: stats.agreement(got, reference[name]) for name, got in ids.items() if name in reference}


def _record(receipt, lane, work, evidence, notes):
    """The lane's typed per-cell summary (receipt v2), the notes every lane's receipt carries, and its raw
    evidence file."""
    receipt.record_lane(lane, evidence.get("cells") or {}, evidence.get("load"), evidence.get("error"))
    receipt.note("timing_caveat", TIMING_CAVEAT)
    receipt.note("ids_stable", evidence.get("ids_stable"))
    receipt.note("cpu_per_wall", {k: v.get("cpu_per_wall") for k, v in evidence.get("cells", {}).items()})
    for key, value in notes.items():
        receipt.note(key, value)
    if evidence.get("error"):
        receipt.note("error", evidence["error"])
    (receipt.evidence_dir / f"{rule.lane_key(lane)}.json").write_text(
        json.dumps({"workload": work.describe(), **evidence}, indent=1))


def _lane_parameters(receipt, work, lane, **more):
    receipt.set(parameters={"workload": work.describe(), "workload_sha256": work.sha256, "lane": lane, **more})


def _pin_peer_graph(receipt, art, identity):
    total = identity["bytes"]
    if (art.path / "model.onnx.data").is_file():
        d = art.identity("model.onnx.data")
        receipt.pin_identity("graph_data", d["path"], d["sha256"], d["bytes"])
        total += d["bytes"]
    receipt.measure("graph_bytes_total", total, "bytes")  # the graph's weights live in model.onnx.data


@pytest.mark.native
@pytest.mark.exclusive
@pytest.mark.gate("throughput_native")
def test_throughput_native(variant, models, gate, policy, receipt, probe_binary, ortgenai_ids):
    """The probe on each variant's graph (parity against Python onnxruntime on it) and on ORT-GenAI's int4
    graph (parity against ORT-GenAI's own loop on it)."""
    work = models.workload(variant.model)
    if variant.peer:
        art = models.ortgenai(variant.model, variant.peer)
        graph, identity = art.file(ortgenai.GRAPH), art.identity(ortgenai.GRAPH)
        options = ortgenai.probe_options(art.path)
        kwargs = {"kv": options["kv"], "kv_heads": options["kv_heads"], "head_dim": options["head_dim"]}
        lane, reference_name = "ort-genai-probe", "ORT-GenAI's own generator loop on the same graph"
        receipt.pin_identity("graph", identity["path"], identity["sha256"], identity["bytes"])
        _pin_peer_graph(receipt, art, identity)
        receipt.note("graph_io", ortgenai.graph_io(art.path))
    else:
        graph, identity = models.graph(variant)
        kwargs = {"kv": "auto"}
        lane, reference_name = "native-probe", "the Python onnxruntime greedy ids on the same graph"
        models.pin_graph(receipt, variant)
    _lane_parameters(receipt, work, lane, kv=kwargs["kv"], probe_sources_sha256=probe.sources_sha256())
    with receipt.sampling(f"the {lane} lane: load, warm-up and repeats"):
        load, found = run_lane(lanes.ProbeLane(probe_binary, graph, work.threads, name=lane, max_seq=_max_seq(work),
                                               **kwargs), work, progress=progress.emit)
    pins.pin_runtime(receipt, probe_binary=probe_binary, probe_load=load)
    if load and load.get("graph_sha256") != identity["sha256"] and not found["error"]:
        found["error"] = f"the probe loaded a graph with SHA-256 {load.get('graph_sha256')}, pinned {identity['sha256']}"
    reference = {}
    if found["ids"]:
        try:
            reference = ortgenai_ids(variant.model, work, variant.peer) if variant.peer else \
                models.reference_ids(variant, work)
        except Exception as exc:  # onnxruntime_genai raises plain RuntimeError
            receipt.note("reference_error", f"{type(exc).__name__}: {exc}")
    evidence = {"lane": lane, "dtype": variant.dtype, "workload": work.describe(), **found, "load": load,
                "parity": _parity(found["ids"], reference) if found["ids"] and reference else None,
                "parity_reference": reference_name}
    _record(receipt, lane, work, evidence, {"load_receipt": load, "parity": evidence["parity"]})
    verdict = receipt.decide(gate.decide(gate.evidence.pick(evidence), policy))
    assert verdict.passed, verdict.render()


@pytest.mark.native
@pytest.mark.exclusive
@pytest.mark.gate("throughput_python")
def test_throughput_python(variant, models, gate, policy, receipt):
    work = models.workload(variant.model)
    graph, identity = models.graph(variant)
    models.pin_graph(receipt, variant)
    _lane_parameters(receipt, work, "python-ort", feeds="numpy, the whole cache returned and fed back each step")
    with receipt.sampling("the python-ort lane: load, warm-up and repeats"):
        # a fresh session: its load is timed too
        load, found = run_lane(lanes.PythonOrtLane(graph, work.threads), work, progress=progress.emit)
    if load is not None:   # the engine ran: pin what it ran on
        pins.pin_runtime(receipt, in_process=("onnxruntime",))
    reference = models.reference_ids(variant, work) if not found["error"] else {}
    evidence = {"lane": "python-ort", "dtype": variant.dtype, "workload": work.describe(), **found, "load": load,
                "parity": _parity(found["ids"], reference) if found["ids"] else None,
                "parity_reference": "harness.runtime.OrtDecoder.greedy on the same graph"}
    _record(receipt, "python-ort", work, evidence,
            {"load_receipt": load, "runtime_library": lanes.loaded_libraries("libonnxruntime")})
    verdict = receipt.decide(gate.decide(gate.evidence.pick(evidence), policy))
    assert verdict.passed, verdict.render()


@pytest.mark.native
@pytest.mark.exclusive
@pytest.mark.gate("peer_ortgenai")
def test_peer_ortgenai(variant, models, gate, policy, receipt):
    """ORT-GenAI's int4 CPU export of the same HF directory (its defaults, and its best documented quality
    settings), through its own generator loop."""
    spec = variant.model
    work = models.workload(spec)
    art = models.ortgenai(spec, variant.peer)
    identity = art.identity(ortgenai.GRAPH)
    receipt.pin_identity("graph", identity["path"], identity["sha256"], identity["bytes"])
    _pin_peer_graph(receipt, art, identity)
    io = ortgenai.graph_io(art.path)
    _lane_parameters(receipt, work, "ort-genai", builder=art.manifest.get("builder"),
                     builder_params={**ortgenai.BUILDS[variant.peer], "onnxruntime_genai": ortgenai.version()},
                     kv=ortgenai.probe_options(art.path)["kv"])
    receipt.note("graph_io", io)
    receipt.note("runtime_decoder_compatible", "position_ids" in io["inputs"])
    evidence = _peer_lane(receipt, models, variant, work, lanes.OrtGenAILane(art.path, work.threads), "ort-genai",
                          "a different int4 export", "onnxruntime_genai")
    verdict = receipt.decide(gate.decide(gate.evidence.pick(evidence), policy))
    assert verdict.passed, verdict.render()


def _peer_lane(receipt, models, variant, work, peer_lane, name, why, engine) -> dict:
    """Measure a peer tool's lane and its greedy agreement with our fp32 graph (informational: ``why``); pin the
    ``engine``'s libraries (:data:`harness.throughput.pins.ENGINES`)."""
    with receipt.sampling(f"the {name} lane: load, warm-up and repeats"):
        load, found = run_lane(peer_lane, work, progress=progress.emit)
    if load is not None:   # the engine ran: pin what it ran on
        pins.pin_runtime(receipt, in_process=(engine,))
    fp32 = models.reference_ids(Variant(variant.model, "fp32"), work)
    parity = _parity(found["ids"], fp32) if found["ids"] else None
    evidence = {"lane": name, "dtype": variant.dtype, "workload": work.describe(), **found, "load": load,
                "parity": parity, "parity_reference": f"our fp32 graph's greedy ids (informational: {why})"}
    _record(receipt, name, work, evidence, {"load_receipt": load, "agreement_with_fp32": parity})
    return evidence


@pytest.mark.native
@pytest.mark.exclusive
@pytest.mark.gate("peer_llamacpp")
def test_peer_llamacpp(variant, models, gate, policy, receipt):
    """llama.cpp (llama-cpp-python) on the original GGUF the model was converted from."""
    spec = variant.model
    path = models.gguf_path(spec)
    receipt.pin_identity("graph", str(path), spec.sha256, path.stat().st_size)
    work = models.workload(spec)
    import llama_cpp

    _lane_parameters(receipt, work, "llama.cpp", llama_cpp_python=llama_cpp.__version__,
                     sampler="greedy (temp 0, top_k 1)", n_ctx=_max_seq(work) + 64)
    evidence = _peer_lane(receipt, models, variant, work, lanes.LlamaCppLane(path, work.threads, _max_seq(work) + 64),
                          "llama.cpp", "llama.cpp's own kernels", "llama_cpp")
    verdict = receipt.decide(gate.decide(gate.evidence.pick(evidence), policy))
    assert verdict.passed, verdict.render()


def _timed_recipes(models, spec) -> tuple[list[Variant], dict[str, str]]:
    """The model's recipes the goal test times: those the early stop has not stopped (harness/search.py), and
    why each other one is left out."""
    kept, left = [], {}
    for r in spec.recipes:
        v = Variant(spec, r.id, recipe=r)
        why = models.s.stop_reason(v)
        if why:
            left[r.id] = why
        else:
            kept.append(v)
    return kept, left


def _start_lanes(models, spec, work, binary, recipes=()):
    """Every lane of a model, each loaded: (lanes, the probes' load receipts, setup errors)."""
    wanted = [lanes.ProbeLane(binary, models.graph(Variant(spec, dtype))[0], work.threads, name=dtype,
                              max_seq=_max_seq(work)) for dtype in spec.dtypes]
    wanted += [lanes.ProbeLane(binary, models.graph(v)[0], work.threads, name=v.dtype, max_seq=_max_seq(work))
               for v in recipes]
    # the model's peers (its peers key; ORT-GenAI builds from the HF weights, which an onnx source alone lacks)
    if PEERS[PEER_GENAI].label(spec):
        art = models.ortgenai(spec)
        options = ortgenai.probe_options(art.path)
        wanted.append(lanes.OrtGenAILane(art.path, work.threads))
        wanted.append(lanes.ProbeLane(binary, art.file(ortgenai.GRAPH), work.threads, name="ort-genai-probe",
                                      max_seq=_max_seq(work), kv=options["kv"], kv_heads=options["kv_heads"],
                                      head_dim=options["head_dim"]))
    if PEERS[PEER_GENAI_BEST].label(spec):
        best = models.ortgenai(spec, PEER_GENAI_BEST)   # the same builder at its best documented quality settings
        wanted.append(lanes.OrtGenAILane(best.path, work.threads, name="ort-genai-kquant"))
    if PEERS[PEER_GGUF].label(spec):
        wanted.append(lanes.LlamaCppLane(models.gguf_path(spec), work.threads, _max_seq(work) + 64))
    started, loads, errors = {}, {}, []
    for lane in wanted:
        try:
            load = lane.load()
        except HarnessError as exc:
            lane.close()
            errors.append(f"{lane.name}: {exc}")
            continue
        started[lane.name] = lane
        if isinstance(lane, lanes.ProbeLane):
            loads[lane.name] = load
    return started, loads, errors


@pytest.mark.native
@pytest.mark.exclusive
@pytest.mark.gate("throughput_goal")
def test_throughput_goal(variant, models, gate, policy, receipt, probe_binary):
    """The goal ratios, measured side by side: every lane of the model loaded at once and timed in
    interleaved rounds (one generation per lane per round, order rotated), so the machine's drifting
    load falls on all of them alike."""
    spec = variant.model
    work = models.workload(spec)
    receipt.set(parameters={"workload": work.describe(), "workload_sha256": work.sha256, "method": "interleaved rounds"},
                policy={"targets": policy.rule_targets()})
    recipes, left_out = _timed_recipes(models, spec)
    receipt.note("recipes_timed", [v.dtype for v in recipes])
    receipt.note("recipes_not_timed", left_out)
    started, loads, errors = _start_lanes(models, spec, work, probe_binary, recipes)
    try:
        with receipt.sampling(f"interleaved rounds of {', '.join(started)}"):
            found = measure(started, work, "interleaved", progress=progress.emit)
    finally:
        for lane in started.values():
            lane.close()
    engines = [e for e, kind in (("onnxruntime_genai", lanes.OrtGenAILane), ("llama_cpp", lanes.LlamaCppLane))
               if any(isinstance(lane, kind) for lane in started.values())]
    pins.pin_runtime(receipt, probe_binary=probe_binary if loads else None, probe_load=next(iter(loads.values()), None),
                     in_process=engines)
    rates = {name: {c: e["cells"].get(c, {}).get("decode_tok_s") for c in (x.name for x in work.cells)}
             for name, e in found.items() if not e["error"]}
    result = rule.goal(rates, policy.rule_targets())
    parity = None
    if "ort-genai" in rates and "ort-genai-probe" in rates:
        parity = _parity(found["ort-genai-probe"]["ids"], found["ort-genai"]["ids"])
    (receipt.evidence_dir / "interleaved.json").write_text(json.dumps({"workload": work.describe(), "lanes": found,
                                                                       "loads": loads}, indent=1))
    receipt.note("goal", result)
    receipt.note("rates", rates)
    receipt.note("lanes", sorted(started))
    receipt.note("probe_loads", loads)
    receipt.note("ortgenai_probe_parity", parity)
    receipt.note("cpu_per_wall", {n: {c: s.get("cpu_per_wall") for c, s in e["cells"].items()} for n, e in found.items()})
    receipt.note("timing_caveat", TIMING_CAVEAT)
    for name, cells in rates.items():
        for cell, rate in cells.items():
            e = found[name]["cells"][cell]
            receipt.measure(f"decode_tok_s_{rule.lane_key(name)}_{cell}", rate, "tokens/s", e["repeats"])
            receipt.measure(f"decode_tok_s_{rule.lane_key(name)}_{cell}_cv", e["decode_tok_s_cv"], "ratio", e["repeats"])
    for dtype, cells in result["variants"].items():
        for cell, r in cells.items():
            receipt.measure(f"{rule.lane_key(dtype)}_over_ortgenai_{cell}", r["vs_ortgenai"], "ratio")
            receipt.measure(f"{rule.lane_key(dtype)}_over_llamacpp_{cell}", r["vs_llamacpp"], "ratio")
    for cell, r in result["probe_on_ortgenai_graph"].items():
        receipt.measure(f"probe_on_ortgenai_graph_over_own_loop_{cell}", r["ratio"], "ratio")
    # paired per round (drift cancels): the figures to read the goal from on a shared machine
    paired = {}
    peers = ("ort-genai", "ort-genai-kquant", "llama.cpp")
    pairs = [("ort-genai-probe", "ort-genai")] + [(d, peer) for d in (*spec.dtypes, *(v.dtype for v in recipes))
                                                  for peer in peers]
    for a, b in pairs:
        if a not in rates or b not in rates:
            continue
        for cell in (c.name for c in work.cells):
            p = stats.paired_ratio(found[a]["raw"].get(cell, []), found[b]["raw"].get(cell, []))
            paired.setdefault(f"{a}/{b}", {})[cell] = p
            receipt.measure(f"paired_{rule.lane_key(a)}_over_{rule.lane_key(b)}_{cell}", p["median"], "ratio", p["rounds"])
            receipt.measure(f"paired_{rule.lane_key(a)}_over_{rule.lane_key(b)}_{cell}_iqr", p["iqr"], "ratio", p["rounds"])
    receipt.note("paired_ratios", paired)
    verdict = receipt.decide(gate.decide(gate.evidence(tuple(errors), found, parity), policy))
    assert verdict.passed, verdict.render()
