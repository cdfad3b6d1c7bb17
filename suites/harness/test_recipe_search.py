"""Quantization recipes (harness/recipes.py, harness/export/recipes.py) and the search's early stop
(harness/search.py): campaign parsing with errors naming file, field and value; the rounding methods'
numerics; where recipes are parametrized and how the report qualifies them."""

import re
from pathlib import Path

import numpy as np
import pytest

from harness import campaign, gates, recipes, search
from harness.domain import is_peer_label
from harness.errors import CampaignError
from harness.export import recipes as build

ROOT = Path(__file__).resolve().parents[2]
_SHIPPED = (ROOT / "campaigns" / "default.toml").read_text().replace(
    'suite = "../harness', f'suite = "{ROOT}/harness')
# the shipped campaign without its recipes, [search] and the expectations that name its recipes
_cut = _SHIPPED[_SHIPPED.index("\n# Quantization recipes"):_SHIPPED.index("# bin/gatehouse compare")]
# (and the model's browser list, which names a recipe)
DEFAULT = re.sub(r'\nbrowser = \[[^\n]*"q4-packed-b32"\]\n', "\n", _SHIPPED.replace(_cut, "\n"))
assert "q4-packed-b32" not in DEFAULT


def _load(tmp_path, extra: str):
    path = tmp_path / "c.toml"
    path.write_text(DEFAULT + "\n" + extra)
    return campaign.load(path)


RECIPE = '[[recipes]]\nid = "r1"\nmodels = ["ci-tiny"]\nbits = 4\nmethod = "gptq"\n'


@pytest.mark.parametrize("body, message", [
    ('id = "q4"\nbits = 4\nmethod = "rtn"', r"recipes\[\d+\]\.id: 'q4' is a built-in dtype or peer label"),
    ('id = "a b"\nbits = 4\nmethod = "rtn"', r"recipes\[\d+\]\.id: expected letters, digits"),
    ('id = "x"\nbits = 3\nmethod = "rtn"', r"recipes\[x\]\.bits: expected one of 4, 8, got 3"),
    ('id = "x"\nbits = 4\nmethod = "awq"', r"recipes\[x\]\.method: expected one of .*got 'awq'"),
    ('id = "x"\nbits = 4\nblock_size = 48\nmethod = "rtn"', r"recipes\[x\]\.block_size: expected one of 16, 32, 64, 128, got 48"),
    ('id = "x"\nbits = 8\nmethod = "rtn"\naccuracy_level = 0', r"recipes\[x\]\.accuracy_level: an 8-bit recipe needs accuracy_level 4"),
    ('id = "x"\nbits = 8\nmethod = "ort-hqq"', r"recipes\[x\]\.method: ort-hqq writes 4-bit weights only"),
    ('id = "x"\nbits = 4\nmethod = "lattice"\nsymmetric = true', r"recipes\[x\]\.method: lattice writes asymmetric"),
    ('id = "x"\nbits = 4\nmethod = "gptq"\nbias_correction = true', r"recipes\[x\]\.bias_correction: gptq sets its own"),
    ('id = "x"\nbits = 8\nmethod = "rtn"\nhead = "q4"', r"recipes\[x\]\.head: a 4-bit head under 8-bit layers"),
    ('id = "x"\nbits = 4\nmethod = "rtn"\nmodels = ["nope"]', r"recipes\[x\]\.models\[0\]: expected one of .*got 'nope'"),
    ('id = "x"\nbits = 4\nmethod = "rtn"\nrounding = "up"', r"recipes\[\d+\]: unknown key\(s\) rounding"),
    ('id = "x"\nmethod = "rtn"', r"recipes\[\d+\]: missing required key 'bits'"),
])
def test_bad_recipes_name_file_field_and_value(tmp_path, body, message):
    with pytest.raises(CampaignError, match=message) as info:
        _load(tmp_path, "[[recipes]]\n" + body + "\n")
    assert str(tmp_path / "c.toml") in str(info.value)


def test_duplicate_recipe_ids_are_refused(tmp_path):
    with pytest.raises(CampaignError, match=r"recipes\[1\]\.id: duplicated recipe id 'r1'"):
        _load(tmp_path, RECIPE + RECIPE)


def test_search_table_is_checked(tmp_path):
    with pytest.raises(CampaignError, match=r"search\.screen: 'winrule' does not judge recipes"):
        _load(tmp_path, '[search]\nscreen = ["winrule"]\n')
    with pytest.raises(CampaignError, match=r"search\.early_stop: expected true or false, got 'yes'"):
        _load(tmp_path, '[search]\nearly_stop = "yes"\n')


def test_recipes_attach_to_their_models_and_parametrize_the_gates_that_judge_them(tmp_path):
    c = _load(tmp_path, RECIPE + '[[recipes]]\nid = "r8"\nmodels = ["ci-tiny"]\nbits = 8\nmethod = "rtn"\n')
    tiny = c.model("ci-tiny")
    assert [r.id for r in tiny.recipes] == ["r1", "r8"]
    assert c.model("smollm2-135m").recipes == ()
    labels = {name: [v.dtype for v in gates.targets(spec, tiny)] for name, spec in gates.GATES.items()}
    assert "r1" in labels["behavior"] and "r1" in labels["quantization"] and "r1" in labels["throughput_native"]
    assert "r8" in labels["cache"] and "r8" in labels["throughput_browser"]
    # a gate that names no recipe (the win rule, the overlays, the Python lane) is not parametrized over them
    for name in ("winrule", "overlay_quality", "throughput_python", "peer_ortgenai"):
        assert "r1" not in labels[name] and "r8" not in labels[name]
    v = next(v for v in gates.targets(gates.GATES["quantization"], tiny) if v.dtype == "r8")
    assert v.policy_dtype == "q8" and v.own and v.as_dict()["recipe"]["policy_dtype"] == "q8"
    required = {s.name for s in gates.qualifying("r1", v.recipe)}
    assert {"cache", "quantization", "behavior", "throughput_native", "throughput_browser"} <= required
    assert not is_peer_label("r1", v.as_dict()["recipe"]) and is_peer_label("r1")


def test_a_models_browser_list_narrows_the_browser_gate_and_what_qualification_needs(tmp_path):
    """A model that names what ships to the browser is timed there for those variants only; the others qualify
    without the browser gate, and their receipts say so (the report reads it from there)."""
    text = DEFAULT.replace('id = "ci-tiny"\n', 'id = "ci-tiny"\nbrowser = ["fp32", "r1"]\n', 1)
    path = tmp_path / "c.toml"
    path.write_text(text + "\n" + RECIPE)
    tiny = campaign.load(path).model("ci-tiny")
    assert tiny.browser == ("fp32", "r1")
    assert [v.dtype for v in gates.targets(gates.GATES["throughput_browser"], tiny)] == ["fp32", "r1"]
    assert [v.dtype for v in gates.targets(gates.GATES["throughput_native"], tiny)][:4] == ["fp32", "q8", "q4", "r1"]
    q4 = next(v for v in gates.targets(gates.GATES["cache"], tiny) if v.dtype == "q4")
    assert q4.as_dict()["browser"] is False
    assert "throughput_browser" not in {s.name for s in gates.qualifying("q4", browser=False)}
    assert "throughput_browser" in {s.name for s in gates.qualifying("q4")}
    # a name that is not one of the model's variants is refused, naming file, field and value
    path.write_text(text.replace('"r1"]', '"q4-typo"]', 1) + "\n" + RECIPE)
    with pytest.raises(CampaignError, match=r"model 'ci-tiny'\.browser: 'q4-typo' is not a variant of this model "
                                            r"\(its dtypes and recipes: fp32, q8, q4, r1\)") as info:
        campaign.load(path)
    assert str(path) in str(info.value)


def test_the_report_needs_the_browser_gate_only_of_variants_delivered_to_the_browser(tmp_path):
    from harness import report
    from harness.receipt import validate

    from test_report_collect import make_receipt, write_run

    def receipts(dtype, browser):
        out = []
        for gate in ("cache", "quantization", "behavior", "throughput_native"):
            data = make_receipt(gate, "m", dtype)
            data["variant"]["browser"] = browser
            out.append(validate(data, data["nodeid"]))
        return out

    rep = report.build(write_run(tmp_path, receipts("q4", False) + receipts("q8", True)))
    rows = {r["dtype"]: r for r in rep["variants"]}
    assert rows["q4"]["passed_all_gates"]
    assert not rows["q8"]["passed_all_gates"]
    assert "throughput_browser: no receipt (incomplete)" in rows["q8"]["blockers"]


def test_recipes_are_parametrized_cheapest_first():
    spec = [recipes.Recipe(id="slow", bits=8), recipes.Recipe(id="lat", method="lattice"),
            recipes.Recipe(id="fast", bits=4, head="q4"), recipes.Recipe(id="acc0", accuracy_level=0)]
    order = [r.id for r in sorted(spec, key=lambda r: r.expected_cost())]
    assert order == ["fast", "lat", "slow", "acc0"]


def test_early_stop_names_the_first_failed_screening_gate():
    policy = search.SearchPolicy()
    assert search.stop_reason({}, policy) is None
    assert search.stop_reason({"quantization": ("pass", "")}, policy) is None
    why = search.stop_reason({"behavior": ("fail", "greedy.agreement: 0.16 is below"), "cache": ("error", "boom")},
                             policy)
    assert why == "early stop: cache errored (boom)"
    assert search.stop_reason({"behavior": ("fail", "x")}, search.SearchPolicy(early_stop=False)) is None
    items = ["a", "S1", "b", "S2"]
    assert search.order(items, lambda i: i.startswith("S")) == ["S1", "S2", "a", "b"]


# -- rounding numerics -----------------------------------------------------------------------------------------
def _deq(codes, scale, zero, block):
    from harness.export.matmulnbits import dequantize_blocks

    return dequantize_blocks(codes, scale, zero, block)


@pytest.fixture(scope="module")
def layer():
    rng = np.random.default_rng(7)
    w = rng.standard_normal((48, 128)) * 0.05
    x = rng.standard_normal((512, 128)) * np.linspace(0.2, 3.0, 128)   # unequal column importance
    x[:, 5] += 4.0                                                     # a column with a large mean
    return w, x, (x.T @ x) / len(x)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("symmetric", [False, True])
def test_rtn_codes_fit_the_lattice_and_round_to_nearest(layer, bits, symmetric):
    w, _, _ = layer
    codes, scale, zero = build.rtn(w, bits, 32, symmetric)
    assert codes.dtype == np.uint8 and codes.max() <= (1 << bits) - 1
    err = np.abs(_deq(codes, scale, zero, 32) - w).reshape(48, 4, 32)
    # every weight within half a step of its block's lattice (the clipped extreme of a symmetric block: one step)
    assert (err <= np.abs(scale)[..., None] * (1.0 if symmetric else 0.5) + 1e-7).all()
    if symmetric:
        assert (zero == 1 << (bits - 1)).all()


def test_lsq_and_gptq_lower_the_output_error_on_calibration_inputs(layer):
    w, x, h = layer
    out = {}
    for name, (c, s, z) in {"rtn": build.rtn(w, 4, 32), "lsq": build.lsq(w, 4, 32, False, np.diag(h)),
                            "gptq": build.gptq(w, 4, 32, False, h)}.items():
        out[name] = float(np.mean((x @ (_deq(c, s, z, 32) - w).T) ** 2))
    assert out["lsq"] < out["rtn"]
    assert out["gptq"] < out["lsq"]


def test_gptq_of_an_exact_lattice_is_exact():
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 16, (16, 64))
    w = (codes - 8) * 0.01                       # every block on one symmetric lattice with an integer zero point
    h = np.eye(64) + 0.1
    c, s, z = build.gptq(w, 4, 32, False, h)
    assert np.abs(_deq(c, s, z, 32) - w).max() < 1e-6


def test_a_recipe_round_trips_through_a_receipt():
    r = recipes.Recipe(id="q4-x", method="lsq", models=("m",))
    back = recipes.from_dict(r.as_dict())
    assert back == r and back.policy_dtype == "q4" and r.as_dict()["policy_dtype"] == "q4"
    assert set(r.build_params()) == {"bits", "block_size", "symmetric", "accuracy_level", "head",
                                     "head_accuracy_level", "method", "bias_correction", "damp"}


def test_the_odd_block_quantizer_bug_is_named(monkeypatch):
    """ONNX Runtime 1.32's k-quant fails when K / block is odd: the error says which recipe and what to use."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((192, 16)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 192])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    bad = recipes.Recipe(id="k64", method="ort-kquant", block_size=64)     # 192 / 64 = 3 blocks
    with pytest.raises(ValueError, match=re.escape("ort-kquant quantizer failed at block size 64")):
        build.ort_quantize(model, bad, set())
    good, _ = build.ort_quantize(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                                 recipes.Recipe(id="k32", method="ort-kquant", block_size=32, accuracy_level=4), set())
    node = next(n for n in good.graph.node if n.op_type == "MatMulNBits")
    assert {a.name: a.i for a in node.attribute}["accuracy_level"] == 4


def test_lattice_zp_keeps_a_q4_1_blocks_codes_and_shifts_it_by_at_most_half_a_step():
    rng = np.random.default_rng(5)
    q = rng.integers(0, 16, (8, 64)).astype(np.float64)
    d = rng.uniform(0.01, 0.02, (8, 2))
    m = -rng.uniform(0.0, 15.0, (8, 2)) * d                  # offsets a zero point in 0..15 can nearly reach
    m[0, 0] = 0.5                                            # row 0 block 0: all positive, no zero point fits
    w = (q.reshape(8, 2, 32) * d[..., None] + m[..., None]).reshape(8, 64)
    c, s, z = build.lattice_zp(w, 4, 32)
    err = np.abs(_deq(c, s, z, 32) - w).reshape(8, 2, 32)
    on = np.ones((8, 2), bool)
    on[0, 0] = False
    assert (err[on].max(axis=-1) <= s[on] / 2 + 1e-6).all()        # a constant shift within half a step
    assert (np.ptp((_deq(c, s, z, 32) - w).reshape(8, 2, 32)[on], axis=-1) < 1e-5).all()   # the same for the block
    assert build.lattice_zp(rng.standard_normal((4, 64)), 4, 32) is None   # not a lattice


def test_the_report_qualifies_a_recipe_like_a_dtype_and_tables_the_search(tmp_path):
    """A recipe's receipts carry its block: it is Gatehouse's own (never a peer blocker), it needs every gate that
    judges recipes, and the "Recipe search" section names the first gate it failed with the reason."""
    from harness import report
    from harness.receipt import validate

    from test_report_collect import make_receipt, write_run

    block = {**recipes.Recipe(id="q4-x", method="gptq").as_dict()}

    def mine(gate, **kw):
        data = make_receipt(gate, "m", "q4-x", **kw)
        data["variant"]["recipe"] = block
        return validate(data, data["nodeid"])

    run = write_run(tmp_path, [
        mine("quantization", measurements={"relative_increase": 0.021}),
        mine("behavior", outcome="fail", reasons=["greedy.agreement: 0.1625 is below reference 1.0000 - margin 0.5"]),
        mine("throughput_native", outcome="skip", reasons=["early stop: behavior failed (greedy.agreement ...): not timed"]),
    ])
    rep = report.build(run)
    row = next(r for r in rep["variants"] if r["dtype"] == "q4-x")
    assert row["own"] and row["recipe"]["method"] == "gptq" and not row["qualified"]
    assert not any("peer graph" in b for b in row["blockers"])
    assert "cache: no receipt (incomplete)" in row["blockers"]
    assert any(b.startswith("throughput_native: skipped, not measured (incomplete): early stop: behavior failed")
               for b in row["blockers"])
    report.rebuild(run.path)
    md = run.report_md.read_text()
    section = md[md.index("## Recipe search"):]
    assert "gptq, 4-bit b32 asym, level 4, head q8" in section
    assert "**behavior**: greedy.agreement: 0.1625 is below reference" in section
    assert "1 timed test(s) were skipped" in section


def test_browser_goals_read_qualified_lanes_downloads_and_the_wllama_peer():
    import dataclasses

    from harness import fmt
    from harness.gates import throughput_browser
    from harness.view import ReceiptView
    from test_report_collect import make_receipt

    def lane(name, dtype, short, passed, download=None, gate="throughput_browser"):
        m = {"decode_tok_s_short": short, "prefill_ms_short": 100.0, **({"download_bytes": download} if download else {})}
        v = ReceiptView(make_receipt(gate, "m", dtype, extra={"lane": name}, measurements=m,
                                     nodeid=f"suites/t.py::t[m-{dtype}-{name}]"))
        return dataclasses.replace(v, variant_passed=passed)

    views = [lane("ort-web", "fp32", 38.0, True, 540e6), lane("ort-web", "q4", 3.7, True, 230e6),
             lane("ort-web", "q4-packed-b32", 37.0, True, 100e6), lane("ort-web", "q8", 50.0, False, 270e6),
             lane("wllama", "gguf-q4_1", 21.0, None, gate="peer_wllama"),
             lane("native-probe", "q4", 140.0, True, gate="throughput_native")]
    rows = {r["ratio"]: r for r in throughput_browser.browser_goals(views)}
    assert rows["fastest qualified browser variant / wllama"]["numerator"] == (38.0, "fp32")   # q8 is not qualified
    small = rows["fastest qualified variant downloading at most half of fp32 / wllama"]
    assert small["numerator"] == (37.0, "q4-packed-b32") and abs(small["value"] - 37 / 21) < 1e-9
    assert abs(rows["fastest qualified browser variant / fastest qualified native variant"]["value"] - 38 / 140) < 1e-9
    assert "## Browser goals" in "\n".join(fmt.markdown_of(throughput_browser.section(views)))
    assert small["target"] == 1.0 and rows["fastest qualified browser variant / fastest qualified native variant"][
        "target"] == 0.5                                             # the policy's defaults without a goal receipt
    goal = ReceiptView(make_receipt("throughput_goal", "m", "fp32", policy={"browser_over_peer": 2.5,
                                                                             "browser_over_native": 0.25}))
    rows = {r["ratio"]: r for r in throughput_browser.browser_goals(views + [goal])}
    assert [r["target"] for r in rows.values()] == [2.5, 2.5, 0.25]   # [policy.throughput_goal] as the run recorded it
