"""The cache gate on a q8 graph made by ONNX Runtime's dynamic quantizer (issue 35): activations quantized at run
time (DynamicQuantizeLinear, per-tensor scales over the whole activation) round a one-token decode step and a full
recompute differently, so the graph is judged on its full-precision twin (harness/export/dequant_twin.py: the same
graph with each DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul replaced by a float MatMul on the dequantized
weight), its own difference reported as that rounding; without a twin, allowed a multiple of the rounding measured
between two row sets. A real cache bug fails either way.

Each graph is an ``onnx``-source export made here from the CI model's fp32 export (the CI tier's own, from the
artifact store) by ``onnxruntime.quantization.quantize_dynamic`` with its defaults (per-tensor QInt8 weights, QUInt8
activations), edited where a test needs a fault or a pattern the rewrite does not know.
"""

import re
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from harness import campaign as campaign_mod
from harness import gates
from harness.domain import Variant
from harness.evidence import cache as evidence
from harness.export import dequant_twin
from harness.gates import cache as rule
from harness.start import default_with

pytestmark = pytest.mark.ci
PAST = "past_key_values.0.value"


@pytest.fixture(scope="module")
def ci_export(models, campaign) -> Path:
    spec = next(m for m in campaign.models if m.tier == "ci")
    graph, _ = models.graph(Variant(spec, "fp32"))
    return graph.parent.parent


@pytest.fixture(scope="module")
def ort_q8(ci_export, tmp_path_factory) -> onnx.ModelProto:
    """The CI model's fp32 graph through ONNX Runtime's dynamic quantizer, as a user would run it (the fused
    graph's contrib operators have no ONNX shape inference: the quantizer needs their outputs' type)."""
    import logging

    from onnxruntime.quantization import quantize_dynamic

    out = tmp_path_factory.mktemp("ortq8") / "model_quantized.onnx"
    logging.getLogger().setLevel(logging.ERROR)
    quantize_dynamic(str(ci_export / "onnx" / "model.onnx"), str(out),
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    return onnx.load(str(out))


def onnx_source(ci_export: Path, tmp_path: Path, model_id: str, q8: onnx.ModelProto):
    """An ``onnx``-source model (through the campaign's door) whose q8 graph is ``q8``; (fp32, q8) variants."""
    d = tmp_path / model_id
    (d / "onnx").mkdir(parents=True)
    for f in ci_export.iterdir():
        if f.is_file() and f.name not in ("artifact.json", "export.json"):
            shutil.copy2(f, d / f.name)
    shutil.copy2(ci_export / "onnx" / "model.onnx", d / "onnx" / "model.onnx")
    onnx.save(q8, str(d / "onnx" / "model_quantized.onnx"))
    path = tmp_path / f"{model_id}.toml"
    path.write_text(default_with(f'[[models]]\nid = "{model_id}"\ntier = "ci"\nsource = "onnx"\npath = "{d}"\n'
                                 f'dtypes = ["fp32", "q8"]\neval_context = 128\n'))
    spec = campaign_mod.load(path).models[0]
    return Variant(spec, "fp32"), Variant(spec, "q8")


def judge(models, campaign, variant):
    gate, policy = gates.get("cache"), campaign.policy["cache"]
    found = evidence.gather(models, variant, policy)
    return found, gate.decide(gate.evidence.pick(found), policy)


def past_fed_wrongly(model: onnx.ModelProto) -> onnx.ModelProto:
    """A cache bug: layer 0's past values reach attention halved (a full recompute has no past: unaffected)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.graph.initializer.append(numpy_helper.from_array(np.array(0.5, np.float32), "fault.half"))
    for node in m.graph.node:
        node.input[:] = [PAST + ".halved" if i == PAST else i for i in node.input]
    m.graph.node.insert(0, helper.make_node("Mul", [PAST, "fault.half"], [PAST + ".halved"], name="fault.halve_past"))
    return m


def weight_through_identity(model: onnx.ModelProto) -> onnx.ModelProto:
    """A pattern the rewrite does not know: one MatMulInteger takes its int8 weight from a node, not an initializer."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    node = next(n for n in m.graph.node if n.op_type == "MatMulInteger")
    weight = node.input[1]
    m.graph.node.insert(0, helper.make_node("Identity", [weight], [weight + ".via"], name="weight.via_identity"))
    node.input[1] = weight + ".via"
    return m


def patterns(g) -> list[dict]:
    """ONNX Runtime's pattern, found independently of the rewrite: per MatMulInteger, its DynamicQuantizeLinear,
    the Cast of its output, the Mul by the scales, the Mul making the scales (activation scale x weight scale)."""
    by_output = {o: n for n in g.node for o in n.output}
    users = {}
    for n in g.node:
        for i in n.input:
            users.setdefault(i, []).append(n)
    found = []
    for mm in (n for n in g.node if n.op_type == "MatMulInteger"):
        cast = users[mm.output[0]][0]
        scale = users[cast.output[0]][0]
        factor = by_output[next(i for i in scale.input if i != cast.output[0])]
        found.append({"dql": by_output[mm.input[0]], "mm": mm, "cast": cast, "scale": scale, "factor": factor})
    return found


def test_the_twin_removes_only_the_activation_quantization(ort_q8, ci_export):
    q8 = ort_q8.graph
    found = patterns(q8)
    dql = [n for n in q8.node if n.op_type == "DynamicQuantizeLinear"]
    assert found and dql
    twin = dequant_twin.derive(ort_q8)
    assert twin.record() == {"nodes": {"DynamicQuantizeLinear": len(dql)}, "rewritten": len(found), "twin": True,
                             "why_no_twin": None}
    g = twin.model.graph
    ops = Counter(n.op_type for n in g.node)
    assert not ops["DynamicQuantizeLinear"] and not ops["MatMulInteger"], ops
    # every other node is kept, byte-identical and in the same order; one float MatMul per MatMulInteger
    gone = {n.name for p in found for n in p.values()}
    assert len(gone) == len(dql) + 4 * len(found)
    kept = [n for n in q8.node if n.name not in gone]
    names = {n.name for n in kept}
    assert [n.SerializeToString() for n in g.node if n.name in names] == [n.SerializeToString() for n in kept]
    added = [n for n in g.node if n.name not in names]
    assert sorted(n.name for n in added) == sorted(p["mm"].name + "_dequantized" for p in found)
    assert {n.op_type for n in added} == {"MatMul"}
    # the twin has the fp32 graph's nodes, and the embedding's int8 weights (weight quantization stays)
    assert ops == Counter(n.op_type for n in onnx.load(str(ci_export / "onnx" / "model.onnx")).graph.node) + \
        Counter(n.op_type for n in q8.node if n.op_type == "DequantizeLinear")
    # every initializer is kept byte-identical but the int8 weights, scales and zero points of the rewritten
    # matmuls, each of which has one float weight instead: (Wq - zero point) * scale, as the quantized graph has it
    inits = {t.name: t for t in q8.initializer}
    theirs = {t.name: t for t in g.initializer}
    used = {i for n in kept for i in n.input}
    assert [theirs[t.name].SerializeToString() for t in q8.initializer if t.name in used] == \
        [t.SerializeToString() for t in q8.initializer if t.name in used]
    removed = set(inits) - set(theirs)
    assert removed == {i for p in found for n in p.values() for i in n.input if i in inits} - used
    assert len(removed) == 3 * len(found)
    array = {k: numpy_helper.to_array(t).astype(np.float32) for k, t in inits.items()}
    for p in found:
        new = next(n for n in added if n.name == p["mm"].name + "_dequantized")
        assert new.input[0] == p["dql"].input[0] and new.output[0] == p["scale"].output[0]
        q, zp = array[p["mm"].input[1]], array[p["mm"].input[3]]
        scale = array[next(i for i in p["factor"].input if i in inits)]
        np.testing.assert_array_equal(numpy_helper.to_array(theirs[new.input[1]]), (q - zp) * scale)
    assert len(g.initializer) == len(q8.initializer) - len(removed) + len(found)


def test_the_gate_passes_on_the_twin_and_says_what_it_measured(ort_q8, ci_export, tmp_path, models, campaign):
    fp32, q8 = onnx_source(ci_export, tmp_path, "ortq8", ort_q8)
    found, verdict = judge(models, campaign, q8)
    assert verdict.passed, verdict.render()
    n = sum(x.op_type == "DynamicQuantizeLinear" for x in ort_q8.graph.node)
    words = verdict.figures["activation_quantization"].value
    m = re.fullmatch(rf"this graph quantizes activations at run time \({n} DynamicQuantizeLinear nodes\): incremental "
                     r"and full logits differ by up to (\S+) from that rounding; on its full-precision twin \(activation "
                     r"quantization removed\) they agree to (\S+): the cache is right", words)
    assert m, words
    rounding, twin = float(m[1]), float(m[2])
    assert rounding > 0.01 and twin < 1e-4, words   # the rounding is real; the twin's cache matches to float rounding
    assert f'{verdict.figures["incremental_vs_full_max_abs_error"].value:.3g}' == m[2]
    assert f'{verdict.figures["incremental_vs_full_ungated_max_abs_error"].value:.3g}' == m[1]
    assert found["activation_quantization"]["twin"] and found["fp32_compute_twin"]
    # the fp32 graph beside it quantizes nothing: judged on itself, with nothing to say of activations
    found, verdict = judge(models, campaign, fp32)
    assert verdict.passed and "activation_quantization" not in verdict.figures
    assert found["activation_quantization"]["nodes"] == {} and not found["fp32_compute_twin"]


def test_a_cache_bug_fails_on_the_twin_and_says_it_is_not_the_rounding(ort_q8, ci_export, tmp_path, models,
                                                                      campaign):
    _, q8 = onnx_source(ci_export, tmp_path, "ortq8-past-halved", past_fed_wrongly(ort_q8))
    _, verdict = judge(models, campaign, q8)
    assert not verdict.passed
    assert any(r.startswith("incremental_vs_full[prompt 7, on the full-precision twin]: max abs error ")
               for r in verdict.reasons), verdict.reasons
    assert re.fullmatch(r"this graph quantizes activations at run time \(\d+ DynamicQuantizeLinear nodes\), but the "
                        r"failures above are on its full-precision twin \(activation quantization removed\), which "
                        r"does not round activations: that rounding does not explain them \(on the graph itself "
                        r"incremental and full logits differ by up to \S+, a left-padded row and the row alone by up "
                        r"to \S+\)", verdict.reasons[-1]), verdict.reasons


def test_the_traced_exports_dynamic_q8_with_a_tracing_bug_fails_on_its_twin(models, campaign):
    """Gatehouse's traced exporter writes q8 with quantize_dynamic too (per-channel weights, in the default
    campaign): the existing fault injection, judged on the twin, fails on the cache check it breaks."""
    spec = next(m for m in campaign.models if m.tier == "ci")
    gate, policy = gates.get("cache"), campaign.policy["cache"]
    found = evidence.gather(models, Variant(spec, "q8"), policy, fault="restart_positions")
    verdict = gate.decide(gate.evidence.pick(found), policy)
    assert found["fp32_compute_twin"] and found["activation_quantization"]["rewritten"] > 0
    assert not verdict.passed
    assert any(r.startswith("incremental_vs_full[") and "on the full-precision twin" in r for r in verdict.reasons)
    assert "that rounding does not explain them" in verdict.reasons[-1]


def test_without_a_twin_the_measured_rounding_is_allowed_and_a_cache_bug_still_fails(ort_q8, ci_export, tmp_path,
                                                                                    models, campaign):
    odd = weight_through_identity(ort_q8)
    first = next(n for n in odd.graph.node if n.op_type == "MatMulInteger")
    why = f"MatMulInteger '{first.name}': its weight, scale or zero point '{first.input[1]}' is not an initializer"
    assert dequant_twin.derive(odd).record()["why_no_twin"] == why
    _, q8 = onnx_source(ci_export, tmp_path, "ortq8-no-twin", odd)
    found, verdict = judge(models, campaign, q8)
    assert verdict.passed, verdict.render()
    assert not found["fp32_compute_twin"]
    rounding = verdict.figures["row_set_rounding_ungated_max_abs_error"].value
    assert rounding > 0.01 and verdict.figures["rounding_allowance"].value == rule.ROUNDING_ALLOWANCE * rounding
    words = verdict.figures["activation_quantization"].value
    assert words.startswith(f"this graph quantizes activations at run time (12 DynamicQuantizeLinear nodes) and no "
                            f"full-precision twin was derived ({why}): full recomputes of the same positions over two "
                            f"row sets differ by up to {rounding:.3g} from that rounding, and each case is allowed "
                            f"{rule.ROUNDING_ALLOWANCE:g} times that; incremental and full logits differ by up to "), words
    assert words.endswith(": within it, the cache is right"), words
    # the same graph with its past fed wrongly: beyond even that allowance
    _, q8 = onnx_source(ci_export, tmp_path, "ortq8-no-twin-past-halved", past_fed_wrongly(odd))
    _, verdict = judge(models, campaign, q8)
    assert not verdict.passed
    assert any(r.startswith("incremental_vs_full[prompt 7]: max abs error ") and
               f"(atol + rtol * max|ref| + {rule.ROUNDING_ALLOWANCE:g} x the measured rounding " in r
               for r in verdict.reasons), verdict.reasons
    assert verdict.reasons[-1].endswith("and the differences above exceed even that"), verdict.reasons


def test_evidence_recorded_before_the_finding_is_judged_as_before():
    policy = rule.CachePolicy(tolerance={"q8": rule.Tolerance(atol=1e-3, rtol=1e-4)})
    cases = [{"check": c, "gated": True, "prompt_tokens": 7, "max_abs_error": 1e-5, "reference_max_abs": 30.0,
              "elements": 9, "greedy_agree": 9, "greedy_total": 9} for c in rule.GATED_CHECKS]
    verdict = rule.decide(rule.CacheEvidence(cases, "q8"), policy)
    assert verdict.passed and "activation_quantization" not in verdict.figures
    # a no-twin record with a rounding measured widens the bound by the allowance, and only then
    wide = cases + [{"check": "row_set_rounding", "gated": False, "prompt_tokens": 7, "max_abs_error": 0.1,
                     "reference_max_abs": 30.0, "elements": 9}]
    wide[0] = {**wide[0], "max_abs_error": 0.25}
    found = {"nodes": {"DynamicQuantizeLinear": 3}, "rewritten": 0, "twin": False, "why_no_twin": "x"}
    assert rule.decide(rule.CacheEvidence(wide, "q8", found), policy).passed
    assert not rule.decide(rule.CacheEvidence(wide, "q8"), policy).passed
    assert not rule.decide(rule.CacheEvidence(wide, "q8", {**found, "twin": True}), policy).passed


def small_graph(kind: str) -> onnx.ModelProto:
    """X [2, 8] -> one fused dynamic-quantized matmul with an int8 weight [8, 4], per-channel scale, zero point
    and bias -> Y: ``DynamicQuantizeMatMul``, or ``MatMulIntegerToFloat`` after a DynamicQuantizeLinear. The weight
    codes keep to 7 bits (ONNX Runtime's ``reduce_range``): on an AVX2 CPU without VNNI the u8 x s8 kernel adds pairs
    of products in int16 and saturates on full-range codes (seen on an AMD EPYC: one output off by 1.06, not rounding)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.integers(-63, 64, (8, 4)).astype(np.int8), "w_quantized"),
             numpy_helper.from_array(rng.uniform(0.01, 0.02, 4).astype(np.float32), "w_scale"),
             numpy_helper.from_array(rng.integers(-3, 4, 4).astype(np.int8), "w_zero_point"),
             numpy_helper.from_array(rng.normal(size=4).astype(np.float32), "bias")]
    if kind == "DynamicQuantizeMatMul":
        nodes = [helper.make_node(kind, ["x", "w_quantized", "w_scale", "w_zero_point", "bias"], ["y"], name="mm",
                                  domain="com.microsoft")]
    else:
        nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"], name="dql"),
                 helper.make_node(kind, ["xq", "w_quantized", "xs", "w_scale", "xz", "w_zero_point", "bias"], ["y"],
                                  name="mm", domain="com.microsoft")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


@pytest.mark.parametrize("kind", ["DynamicQuantizeMatMul", "MatMulIntegerToFloat"])
def test_the_fused_forms_become_a_float_matmul_on_the_dequantized_weight(kind):
    import onnxruntime as ort

    model = small_graph(kind)
    twin = dequant_twin.derive(model)
    assert twin.model is not None and twin.rewritten == 1, twin.record()
    assert [n.op_type for n in twin.model.graph.node] == ["MatMul", "Add"]
    assert {t.name for t in twin.model.graph.initializer} == {"bias", "w_dequantized"}
    x = np.random.default_rng(1).normal(size=(2, 8)).astype(np.float32)
    a = {t.name: numpy_helper.to_array(t).astype(np.float32) for t in model.graph.initializer}
    exact = x @ ((a["w_quantized"] - a["w_zero_point"]) * a["w_scale"]) + a["bias"]
    run = lambda m: ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(run(twin.model), exact, rtol=1e-5, atol=1e-5)
    assert 1e-6 < np.abs(run(model) - exact).max() < 0.1      # the graph itself rounds x


def test_a_quantized_activation_the_rewrite_does_not_know_leaves_no_twin_and_says_which_node():
    model = small_graph("MatMulIntegerToFloat")
    model.graph.node.append(helper.make_node("Identity", ["xq"], ["xq_copy"], name="odd_user"))
    model.graph.output.append(helper.make_tensor_value_info("xq_copy", onnx.TensorProto.UINT8, [2, 8]))
    assert dequant_twin.derive(model).record() == {
        "nodes": {"DynamicQuantizeLinear": 1}, "rewritten": 0, "twin": False,
        "why_no_twin": "DynamicQuantizeLinear 'dql' feeds Identity 'odd_user', which this rewrite does not replace by "
                       "a float MatMul"}
