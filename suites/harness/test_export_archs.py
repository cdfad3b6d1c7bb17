"""The exporters on the architectures beside Llama: Qwen2 (q/k/v projection biases, an untied output
head), Llama with attention biases, Mistral's and Qwen2's sliding windows. Small random models saved
with ``save_pretrained``, exported by ``onnx_export.build`` (the fused graph at fp32, q8 and q4), run
through ``harness.runtime.OrtDecoder`` and compared with PyTorch: a full call, a prefill and one-token
steps on the returned cache (prompts longer than the windows), a left-padded row; the traced exporter
on the same models; unsupported configs refused with the field named; the CI trainer's Qwen2."""

from pathlib import Path

import numpy as np
import pytest

from harness.domain import GRAPH_FILES
from harness.export import fused, matmulnbits, onnx_export, shapes
from harness.runtime import OrtDecoder

VOCAB, LEN, PREFILL = 96, 12, 5
SIZES = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6)
# the shipped campaign's export parameters, without bias correction (it needs a tokenizer and text)
PARAMS = {"graph": "fused", "q4_symmetric": False, "q4_accuracy_level": 4, "q8_accuracy_level": 4,
          "q4_method": "lattice", "q4_head": "q8", "bias_correction": False}
WINDOW = 4


def _config(case: str):
    from transformers import LlamaConfig, MistralConfig, Qwen2Config

    if case == "qwen2":             # q/k/v biases, untied head, grouped-query attention, full attention
        return Qwen2Config(**SIZES, tie_word_embeddings=False, use_sliding_window=False)
    if case == "qwen2-window":      # layer 0 full, layer 1 sliding (max_window_layers = 1)
        return Qwen2Config(**SIZES, tie_word_embeddings=False, use_sliding_window=True, sliding_window=WINDOW,
                           max_window_layers=1)
    if case == "llama-attention-bias":   # q/k/v and o biases, tied head
        return LlamaConfig(**SIZES, attention_bias=True, tie_word_embeddings=True)
    if case == "mistral-window":    # every layer sliding
        return MistralConfig(**SIZES, head_dim=16, sliding_window=WINDOW, tie_word_embeddings=False)
    raise KeyError(case)


CASES = ("qwen2", "qwen2-window", "llama-attention-bias", "mistral-window")


def _model(cfg, seed: int):
    """A random model with weights large enough that attention is far from uniform and every bias
    (zero at transformers' init) moves the logits."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.15 * torch.randn(p.shape, generator=g))
    return model


def _torch_logits(model, ids, mask=None) -> np.ndarray:
    import torch

    with torch.no_grad():
        t = torch.tensor(ids, dtype=torch.long)
        m = torch.ones_like(t) if mask is None else torch.tensor(mask, dtype=torch.long)
        return model(input_ids=t, attention_mask=m, use_cache=False).logits.numpy()


def _rel(got, want) -> float:
    return float(np.abs(np.asarray(got) - want).max() / np.abs(want).max())


def _incremental(dec: OrtDecoder, ids: list[int], prefill: int) -> np.ndarray:
    """The prefill's last row, then one row per one-token step on the returned cache."""
    logits, past = dec.forward(np.asarray([ids[:prefill]]), np.ones((1, prefill)), np.arange(prefill)[None],
                               dec.empty_past(1))
    rows = [logits[0, -1]]
    for t in range(prefill, len(ids)):
        logits, past = dec.forward(np.asarray([[ids[t]]]), np.ones((1, t + 1)), np.asarray([[t]]), past)
        rows.append(logits[0, -1])
    return np.stack(rows)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """``exported(case)``: (PyTorch model, HF directory, export directory, export record), built once."""
    made = {}

    def get(case: str):
        if case not in made:
            root = tmp_path_factory.mktemp(case)
            model = _model(_config(case), seed=CASES.index(case) + 1)
            model.save_pretrained(root / "hf")
            (root / "export").mkdir()
            record = onnx_export.build(root / "hf", root / "export", PARAMS, lambda _msg: None)
            made[case] = (model, root / "hf", root / "export", record)
        return made[case]
    return get


def _ids(seed: int, n: int = LEN) -> list[int]:
    return np.random.default_rng(seed).integers(0, VOCAB, n).tolist()


@pytest.mark.parametrize("case", CASES)
def test_fused_fp32_matches_pytorch_full_incremental_and_padded(exported, case):
    model, _, out, record = exported(case)
    assert record["graph"]["model_type"] == model.config.model_type
    dec = OrtDecoder(out / GRAPH_FILES["fp32"], threads=1)
    ids = _ids(10)
    want = _torch_logits(model, [ids])[0]
    assert _rel(dec.full(ids), want) < 1e-4
    assert _rel(_incremental(dec, ids, PREFILL), want[PREFILL - 1:]) < 1e-4
    # a left-padded row in a batch: its real positions equal the row alone in PyTorch
    short = _ids(11, 7)
    batch = np.asarray([ids, [0] * (LEN - 7) + short])
    mask = np.asarray([[1] * LEN, [0] * (LEN - 7) + [1] * 7])
    logits, _ = dec.forward(batch, mask, np.clip(np.cumsum(mask, 1) - 1, 0, None), dec.empty_past(2))
    assert _rel(logits[1, LEN - 7:], _torch_logits(model, [short])[0]) < 1e-4


def test_biases_and_untied_head_are_in_the_graph(exported):
    import onnx

    model, _, out, _ = exported("qwen2")
    graph = onnx.load(str(out / GRAPH_FILES["fp32"])).graph
    inits = {t.name for t in graph.initializer}
    assert {"model.layers.0.self_attn.qkv_proj.bias", "lm_head.weight", "model.embed_tokens.weight"} <= inits
    assert "model.layers.0.self_attn.o_proj.bias" not in inits   # Qwen2's o_proj has none
    for dtype in ("q8", "q4"):
        nodes = onnx.load(str(out / GRAPH_FILES[dtype])).graph.node
        out_name = "model.layers.0.self_attn.qkv_proj/out"
        qkv = [n for n in nodes if n.op_type == "MatMulNBits" and n.output[0] == out_name]
        assert len(qkv) == 1 and qkv[0].input[5] == "model.layers.0.self_attn.qkv_proj.bias"
    _, _, out, _ = exported("llama-attention-bias")
    inits = {t.name for t in onnx.load(str(out / GRAPH_FILES["fp32"])).graph.initializer}
    assert {"model.layers.1.self_attn.qkv_proj.bias", "model.layers.1.self_attn.o_proj.bias"} <= inits
    assert "lm_head.weight" not in inits   # tied: the embedding once


def _decoder(graph, path: Path) -> OrtDecoder:
    path.write_bytes(graph.SerializeToString())
    return OrtDecoder(path, threads=1)


def test_the_window_is_the_one_that_matters(exported, tmp_path):
    """A window one key shorter or no window at all is far off: the fp32 comparison has teeth."""
    model, _, _, _ = exported("mistral-window")
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    s = shapes.shapes_of(model.config)
    assert s.windows == (WINDOW, WINDOW)
    ids = _ids(12)
    want = _torch_logits(model, [ids])[0]
    for windows in ((WINDOW - 1,) * 2, (-1, -1)):
        graph, _ = fused.build_graph(state, shapes.Shapes(**{**s.__dict__, "windows": windows}), 32, 32)
        assert _rel(_decoder(graph, tmp_path / "window.onnx").full(ids), want) > 1e-2
    assert shapes.shapes_of(_config("qwen2-window")).windows == (-1, WINDOW)


def _dequantized(model, bits: int, head_bits: int):
    """A copy of ``model`` whose linear weights are what the fused graph stores (blocks of 32, round to
    nearest); the head gets its own Parameter, so a tied embedding keeps its fp32 values."""
    import copy

    import torch

    clone = copy.deepcopy(model)
    with torch.no_grad():
        for name, mod in clone.named_modules():
            width = head_bits if name == "lm_head" else bits
            if isinstance(mod, torch.nn.Linear) and width != 32:
                codes, scale, zero = matmulnbits.quantize_blocks(mod.weight.detach().numpy(), width, 32)
                mod.weight = torch.nn.Parameter(torch.from_numpy(matmulnbits.dequantize_blocks(codes, scale, zero, 32)))
    return clone


@pytest.mark.parametrize("bits,head_bits", [(8, 8), (4, 8), (4, 4)])
@pytest.mark.parametrize("case", CASES)
def test_quantized_graph_computes_its_weights_exactly(exported, tmp_path, case, bits, head_bits):
    """At accuracy level 0 (fp32 compute) a MatMulNBits graph is PyTorch on the dequantized weights:
    biases, the head and the windows are wired right at 8 and 4 bits, whatever the rounding costs."""
    model, _, _, _ = exported(case)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    graph, info = fused.build_graph(state, shapes.shapes_of(model.config), bits, head_bits, 32, 0)
    assert info["quantized_weights"] == 4 * 2 + 1
    ids = _ids(17)
    want = _torch_logits(_dequantized(model, bits, head_bits), [ids])[0]
    dec = _decoder(graph, tmp_path / "q.onnx")
    assert _rel(dec.full(ids), want) < 1e-4
    assert _rel(_incremental(dec, ids, PREFILL), want[PREFILL - 1:]) < 1e-4


@pytest.mark.parametrize("dtype,bits,exact_rel,rel", [("q8", 8, 0.05, 0.06), ("q4", 4, 0.08, 0.6)])
@pytest.mark.parametrize("case", CASES)
def test_shipped_quantized_graphs_stay_near_pytorch(exported, case, dtype, bits, exact_rel, rel):
    """The exported q8 and q4 (accuracy level 4: int8 activations, an 8-bit head): near PyTorch on the
    weights they store, bounded against the fp32 model (random weights round badly at 4 bits), and
    the cache path equals the graph's own full call."""
    model, _, out, record = exported(case)
    assert record["quantization"][dtype]["head_bits"] == 8
    dec = OrtDecoder(out / GRAPH_FILES[dtype], threads=1)
    ids = _ids(13)
    full = dec.full(ids)
    assert _rel(full, _torch_logits(_dequantized(model, bits, 8), [ids])[0]) < exact_rel
    want = _torch_logits(model, [ids])[0]
    assert 0 < _rel(full, want) < rel
    if dtype == "q8":
        assert int((full.argmax(-1) == want.argmax(-1)).sum()) >= 9   # greedy ids of 12 positions
    assert _rel(_incremental(dec, ids, PREFILL), full[PREFILL - 1:]) < 1e-4


@pytest.mark.parametrize("bits", [8, 4])
def test_a_bias_and_the_bias_correction_share_one_input(tmp_path, bits):
    """MatMulNBits has one bias input: the layer's bias plus the rounding's mean error, summed."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    rng = np.random.default_rng(bits)
    w = rng.standard_normal((24, 64)).astype(np.float32)
    bias = rng.standard_normal(24).astype(np.float32)
    mean = rng.standard_normal(64).astype(np.float32)
    b = matmulnbits.GraphBuilder(32, accuracy_level=0)
    b.linear("x", w, bits, "w", out="y", stats={"mean": mean}, bias=bias)
    assert [n.op_type for n in b.nodes] == ["MatMulNBits"] and b.nodes[0].input[5] == "w.bias"
    graph = helper.make_graph(b.nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 24])], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(matmulnbits.MS, 1)])
    x = rng.standard_normal((2, 64)).astype(np.float32)
    y = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    deq = matmulnbits.dequantize_blocks(*matmulnbits.quantize_blocks(w, bits, 32), 32)
    want = x @ deq.T + bias + (w - deq) @ mean
    assert np.abs(y - want).max() <= 1e-4 * np.abs(want).max()
    # and at fp32 a bias is one Add after the MatMul
    f = matmulnbits.GraphBuilder(32, accuracy_level=0)
    f.linear("x", w, 32, "w", out="y", bias=bias)
    assert [n.op_type for n in f.nodes] == ["MatMul", "Add"]


def test_a_bias_on_an_exact_q4_1_lattice_weight(tmp_path):
    """A GGUF Q4_1 weight with a bias (a Qwen2 GGUF's q/k/v): the exact lattice node carries the bias."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    rng = np.random.default_rng(9)
    q = rng.integers(0, 16, (24, 2, 32))
    q[..., 0], q[..., 1] = 0, 15
    d = rng.uniform(1e-3, 2e-2, (24, 2, 1)).astype(np.float16).astype(np.float32)
    m = rng.normal(-0.05, 0.05, (24, 2, 1)).astype(np.float16).astype(np.float32)
    w = (d * q + m).reshape(24, 64).astype(np.float32)
    bias = rng.standard_normal(24).astype(np.float32)
    b = matmulnbits.GraphBuilder(32, accuracy_level=0, lattice=True)
    b.linear("x", w, 4, "w", out="y", bias=bias)
    assert b.errors["lattice"] == 1 and b.nodes[0].op_type == "MatMulNBits" and b.nodes[0].input[5] == "w.bias"
    graph = helper.make_graph(b.nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 24])], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(matmulnbits.MS, 1)])
    x = rng.standard_normal((1, 2, 64)).astype(np.float32)
    want = x @ w.T + bias
    y = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    assert np.abs(y - want).max() <= 1e-5 * np.abs(want).max()


@pytest.mark.parametrize("head_bits", [32, 8, 4])
def test_untied_head_at_every_width(exported, tmp_path, head_bits):
    """q4's head may be 4-bit, 8-bit or fp32 (q4_head): the untied lm_head.weight at each width."""
    model, _, _, _ = exported("qwen2")
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    graph, info = fused.build_graph(state, shapes.shapes_of(model.config), 4, head_bits, 32, 0)
    names = {t.name for t in graph.graph.initializer}
    assert ("lm_head.weight" in names) == (head_bits == 32) and ("lm_head.qweight" in names) == (head_bits != 32)
    assert "Transpose" not in info["op_types"]   # never the embedding's transpose
    ids = _ids(14)
    want = _torch_logits(_dequantized(model, 4, head_bits), [ids])[0]
    assert _rel(_decoder(graph, tmp_path / "head.onnx").full(ids), want) < 1e-4


@pytest.mark.parametrize("case", CASES)
def test_traced_exporter_matches_pytorch(exported, tmp_path, case):
    """graph = "traced": KVDecoder runs the model's own projections (biases included) and head, and
    spells the windows into its mask; q8 and q4 are ONNX Runtime's quantizers on that graph."""
    model, hf, _, _ = exported(case)
    record = onnx_export.build(hf, tmp_path, {"graph": "traced"}, lambda _msg: None)
    assert record["graph"]["model_type"] == model.config.model_type
    ids = _ids(15)
    want = _torch_logits(model, [ids])[0]
    dec = OrtDecoder(tmp_path / GRAPH_FILES["fp32"], threads=1)
    assert _rel(dec.full(ids), want) < 1e-4
    assert _rel(_incremental(dec, ids, PREFILL), want[PREFILL - 1:]) < 1e-4
    for dtype, rel in (("q8", 0.1), ("q4", 0.6)):
        assert 0 < _rel(OrtDecoder(tmp_path / GRAPH_FILES[dtype], threads=1).full(ids), want) < rel


def _unsupported(kind: str):
    import transformers as tf

    if kind == "qwen3":           # q/k norms: an architecture neither exporter spells out
        return tf.Qwen3Config(**SIZES, head_dim=16)
    if kind == "mistral-window-0":
        return tf.MistralConfig(**SIZES, sliding_window=0)
    if kind == "qwen2-chunked":
        return tf.Qwen2Config(**SIZES, use_sliding_window=True, sliding_window=4,
                              layer_types=["full_attention", "chunked_attention"])
    changes = {"mlp-bias": {"mlp_bias": True}, "gelu": {"hidden_act": "gelu"},
               "rope-linear": {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}}}[kind]
    return tf.LlamaConfig(**SIZES, **changes)


@pytest.mark.parametrize("kind,match", [
    ("mlp-bias", r"config mlp_bias = True"),
    ("rope-linear", r"config rope_parameters.rope_type = 'linear'"),
    ("gelu", r"config hidden_act = 'gelu'"),
    ("qwen3", r"config model_type = 'qwen3'"),
    ("mistral-window-0", r"config sliding_window = 0"),
    ("qwen2-chunked", r"config layer_types = 'chunked_attention'"),
])
def test_unsupported_configs_are_refused_naming_the_field(kind, match):
    with pytest.raises(ValueError, match=match):
        shapes.shapes_of(_unsupported(kind))


def test_windows_follow_transformers_per_architecture():
    from transformers import LlamaConfig, MistralConfig, Qwen2Config

    llama = LlamaConfig(**SIZES)
    llama.sliding_window = 4                      # transformers' Llama ignores the field
    assert shapes.attention_windows(llama) == (None, None)
    assert shapes.attention_windows(Qwen2Config(**SIZES, sliding_window=4)) == (None, None)   # not use_sliding_window
    assert shapes.attention_windows(MistralConfig(**SIZES, sliding_window=64)) == (None, None)  # >= max positions
    assert shapes.attention_windows(MistralConfig(**SIZES, sliding_window=None)) == (None, None)
    assert shapes.attention_windows(MistralConfig(**SIZES, sliding_window=8)) == (8, 8)


def test_unknown_parameters_and_unsupported_models_are_refused(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from harness.export.graph import KVDecoder

    model = _model(_config("qwen2"), seed=5)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"lm_head.bias"):   # a weight the graph would drop
        fused.build_graph({**state, "lm_head.bias": np.zeros(VOCAB, np.float32)}, shapes.shapes_of(model.config), 32, 32)
    # end to end: a saved Llama with MLP biases, through the fused build
    _model(_unsupported("mlp-bias"), seed=6).save_pretrained(tmp_path / "hf")
    (tmp_path / "out").mkdir()
    with pytest.raises(ValueError, match=r"mlp_bias = True"):
        onnx_export.build(tmp_path / "hf", tmp_path / "out", PARAMS, lambda _msg: None)
    # the traced exporter refuses an architecture it does not spell out
    torch.manual_seed(0)
    with pytest.raises(ValueError, match=r"model_type = 'qwen3'"):
        KVDecoder(AutoModelForCausalLM.from_config(_unsupported("qwen3")))


def test_ci_trainer_builds_a_qwen2_the_fused_export_matches(tmp_path):
    import json

    import torch
    from transformers import AutoModelForCausalLM

    from harness.models import tiny

    text = Path("/usr/share/common-licenses/Apache-2.0").read_text()
    params = {"architecture": "qwen2", "vocab_size": 300, "steps": 5, "seq_len": 32, "batch_size": 4,
              "eval_tokens": 256, "log_every": 1}
    with pytest.raises(ValueError, match="'gemma'"):
        tiny.build(tmp_path, text, text, {**params, "architecture": "gemma"}, 1, 1, lambda _msg: None)
    hf = tmp_path / "hf"
    hf.mkdir()
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    try:
        tiny.build(hf, text[:8000], text[8000:], params, 1, 1, lambda _msg: None)
    finally:   # the trainer sets both for the process
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)
    config = json.loads((hf / "config.json").read_text())
    assert config["model_type"] == "qwen2" and config["tie_word_embeddings"] is False
    assert json.loads((hf / "training.json").read_text())["params"]["architecture"] == "qwen2"
    model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
    assert model.model.layers[0].self_attn.q_proj.bias is not None
    assert not torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)
    out = tmp_path / "export"
    out.mkdir()
    # the shipped export parameters, bias correction included (q/k/v bias + correction in one input)
    onnx_export.build(hf, out, {**PARAMS, "bias_correction": True}, lambda _msg: None, calibration_texts=[text])
    ids = np.random.default_rng(16).integers(0, config["vocab_size"], 20).tolist()
    want = _torch_logits(model, [ids])[0]
    fp32 = OrtDecoder(out / GRAPH_FILES["fp32"], threads=1)
    assert _rel(fp32.full(ids), want) < 1e-4
    assert _rel(_incremental(fp32, ids, 9), want[8:]) < 1e-4
    assert _rel(OrtDecoder(out / GRAPH_FILES["q4"], threads=1).full(ids), want) < 0.25
