"""GGUF files from disk: harness/models/gguf_write.py writes Llama/Qwen2 Hugging Face directories as F32/F16
GGUFs and quantizes them with llama.cpp's own quantizer; harness/models/gguf.py inspects a file's header and
refuses what the converter cannot load faithfully.

The checks, on tiny random models built here (a trained byte-level BPE tokenizer, Llama 64 wide like the CI
model with head_dim 16, Llama 256 wide so that k-quant blocks really occur, Qwen2 64 wide):
- the F32 file converts back (``convert``: transformers' GGUF loader) to the same logits and tokenizer;
- llama.cpp runs the F32 file with PyTorch's logits and greedy ids (through ``LlamaCppLane``), and tokenizes
  like the Hugging Face tokenizer; without the q/k rotary permutation it would not;
- every quantized file's converted weights are bit-identical to ggml's own ``dequantize_row_*`` of the same
  tensor (libggml-base as shipped with llama-cpp-python), its logits close to the source model's and to
  llama.cpp's on the same file; the tensor types llama.cpp assigned are the ones expected, and together
  they are exactly ``SUPPORTED_TYPES``;
- an unsupported tensor type or architecture is refused by name, and a truncated, cut, empty or non-GGUF
  file gives an error naming its path.
"""

from __future__ import annotations

import ctypes
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from harness.errors import ArtifactError
from harness.models import gguf as G
from harness.models import gguf_write as W

TEXT = ("The quick brown fox jumps over the lazy dog. Once upon a time, a little robot lived in a small town. "
        "It liked numbers like 12, 345 and 6789, and it said hello to everyone it met.\n") * 20
SAMPLE = "Once upon a time, the little robot said hello. <|im_start|>user\n12 + 345 = ?<|im_end|>\n"
PROMPT = "Once upon a time, the little robot said that the quick brown fox"
SHAPES = {  # name: (architecture, hidden size); 4 heads, 2 KV heads, 2 layers, intermediate = 2 x hidden
    "llama64": ("llama", 64), "llama256": ("llama", 256), "qwen64": ("qwen2", 64)}
THREADS = 1

# (model, file type, the tensor types llama.cpp gives it, max |logits - source logits| allowed).
# "F16" is written by gguf_write.write; everything else by llama.cpp's quantizer from the F32 file.
# 64-wide rows are not whole 256-blocks: llama.cpp writes Q5_0 for Q4_K, Q8_0 for Q6_K there.
CASES = [
    ("llama256", "F16", {"F32", "F16"}, 0.02),
    ("llama256", "BF16", {"F32", "BF16"}, 0.1),
    ("llama256", "Q8_0", {"F32", "Q8_0"}, 0.25),
    ("llama256", "Q6_K", {"F32", "Q6_K"}, 0.5),
    ("llama256", "Q5_0", {"F32", "Q5_0", "Q6_K"}, 1.0),
    ("llama256", "Q5_1", {"F32", "Q5_1", "Q6_K"}, 1.0),
    ("llama256", "Q5_K_M", {"F32", "Q5_K", "Q6_K"}, 1.0),
    ("llama256", "Q4_0", {"F32", "Q4_0", "Q6_K"}, 2.0),
    ("llama256", "Q4_1", {"F32", "Q4_1", "Q6_K"}, 2.0),
    ("llama256", "Q4_K_M", {"F32", "Q4_K", "Q6_K"}, 2.0),
    ("llama256", "Q3_K_M", {"F32", "Q3_K", "Q4_K", "Q5_K", "Q6_K"}, 3.0),
    ("llama256", "Q2_K", {"F32", "Q2_K", "Q3_K", "Q6_K"}, 5.0),
    ("llama64", "Q8_0", {"F32", "Q8_0"}, 0.25),
    ("llama64", "Q6_K", {"F32", "Q8_0"}, 0.25),
    ("llama64", "Q4_0", {"F32", "Q4_0", "Q8_0"}, 2.0),
    ("llama64", "Q4_1", {"F32", "Q4_1", "Q8_0"}, 2.0),
    ("llama64", "Q4_K_M", {"F32", "Q5_0", "Q8_0"}, 1.0),
    ("qwen64", "Q8_0", {"F32", "Q8_0"}, 0.25),
    ("qwen64", "Q4_K_M", {"F32", "Q5_0", "Q8_0"}, 1.0),
]


# -- the models and their reference outputs, built once per module ---------------------------------------
@pytest.fixture(scope="module")
def torch_threads():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def models(tmp_path_factory, torch_threads):
    """{name: {"hf": dir, "f32": its F32 GGUF, "ids": prompt ids, "logits": PyTorch's, "model", "tokenizer"}}."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from harness.models.tiny import train_tokenizer

    root = tmp_path_factory.mktemp("gguf-models")
    tokenizer = train_tokenizer(TEXT, 300)
    built = {}
    for seed, (name, (arch, width)) in enumerate(SHAPES.items()):
        torch.manual_seed(seed)
        kw = dict(vocab_size=len(tokenizer), hidden_size=width, intermediate_size=2 * width, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, rope_theta=10000.0,
                  tie_word_embeddings=True, rms_norm_eps=1e-5, initializer_range=0.05,
                  bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                  pad_token_id=tokenizer.pad_token_id)
        model = LlamaForCausalLM(LlamaConfig(**kw)) if arch == "llama" else Qwen2ForCausalLM(Qwen2Config(**kw))
        with torch.no_grad():  # norms away from 1 and biases away from 0, so a misplaced one shows
            for pname, p in model.named_parameters():
                if p.ndim == 1:
                    p.copy_(1.0 + 0.2 * torch.randn_like(p) if "norm" in pname else 0.05 * torch.randn_like(p))
        model.eval()
        hf = root / name
        model.save_pretrained(hf)
        tokenizer.save_pretrained(hf)
        # the tokenizer as transformers makes it of the directory: Qwen2's class imposes its own split
        loaded = AutoTokenizer.from_pretrained(hf)
        ids = loaded(PROMPT)["input_ids"]
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].numpy()
        f32 = root / f"{name}-F32.gguf"
        W.write(hf, f32, "F32", name=f"test-{name}")
        built[name] = {"arch": arch, "hf": hf, "f32": f32, "ids": ids, "logits": logits, "model": model,
                       "tokenizer": loaded}
    return built


def _convert(gguf_path: Path, out: Path):
    """``convert`` into ``out``; the converted model, its tokenizer and its weights as numpy arrays."""
    import torch
    from safetensors.numpy import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    shutil.rmtree(out, ignore_errors=True)
    record = G.convert(gguf_path, out, lambda message: None)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    return record, model, AutoTokenizer.from_pretrained(out), load_file(str(out / "model.safetensors"))


def _logits(model, ids):
    import torch

    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def _llama_cpp_logits(gguf_path: Path, ids: list[int]):
    """llama.cpp's logits at every prompt position, with an F32 KV cache (its default F16 cache alone moves
    F32 logits by ~2e-3)."""
    from llama_cpp import Llama

    llm = Llama(model_path=str(gguf_path), n_ctx=64, n_batch=64, n_ubatch=64, n_threads=THREADS,
                n_threads_batch=THREADS, seed=0, verbose=False, logits_all=True, type_k=0, type_v=0)
    try:
        llm.eval(ids)
        return np.array(llm.scores[:len(ids)], dtype=np.float32)
    finally:
        llm.close()


_GGML = None


def _ggml_dequantize(tensor) -> np.ndarray:
    """ggml's own dequantization (libggml-base of llama-cpp-python) of one ``GGUFReader`` tensor, (rows, cols)."""
    global _GGML
    if _GGML is None:
        import llama_cpp

        _GGML = ctypes.CDLL(str(Path(llama_cpp.__file__).parent / "lib" / "libggml-base.so"))
    name = tensor.tensor_type.name
    raw = np.ascontiguousarray(tensor.data).reshape(-1).view(np.uint8)
    out = np.empty(tensor.n_elements, dtype=np.float32)
    if name == "F32":
        out[:] = raw.view(np.float32)
    else:
        symbol = {"F16": "ggml_fp16_to_fp32_row", "BF16": "ggml_bf16_to_fp32_row"}.get(
            name, "dequantize_row_" + name.lower().replace("_k", "_K"))
        fn = getattr(_GGML, symbol)
        fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64], None
        fn(raw.ctypes.data, out.ctypes.data, tensor.n_elements)
    return out.reshape(tuple(int(d) for d in reversed(tensor.shape.tolist())))


_FROM_GGUF = {v: k for k, v in W._LAYER_TENSORS.items()}


def _hf_name(gguf_name: str) -> str:
    top = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
           "output.weight": "lm_head.weight"}
    if gguf_name in top:
        return top[gguf_name]
    _, block, rest = gguf_name.split(".", 2)
    return f"model.layers.{block}.{_FROM_GGUF[rest]}"


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# -- F32: the exact round trip, and llama.cpp ----------------------------------------------------------------
@pytest.mark.parametrize("name", list(SHAPES))
def test_f32_file_converts_back_to_the_same_model_and_tokenizer(models, name, tmp_path):
    m = models[name]
    info = G.inspect(m["f32"])
    n_blocks = 2
    per_block = 9 + (3 if m["arch"] == "qwen2" else 0)  # norms, q k v o, gate up down (+ q k v biases)
    assert info["architecture"] == m["arch"] and info["name"] == f"test-{name}"
    assert info["tensor_types"] == {"F32": 2 + n_blocks * per_block} == {"F32": info["tensors"]}
    assert info["file_type"] == "ALL_F32" and info["tokenizer"] == "gpt2" and info["vocab"] == len(m["tokenizer"])
    G.check_supported(m["f32"], info)

    record, model, tokenizer, _ = _convert(m["f32"], tmp_path / "hf")
    assert record["model_type"] == m["arch"]
    diff = float(np.abs(_logits(model, m["ids"]) - m["logits"]).max())
    assert diff <= 1e-5, f"{name}: converted F32 logits differ by {diff}"

    source = m["tokenizer"]
    ids = source(SAMPLE)["input_ids"]
    assert tokenizer(SAMPLE)["input_ids"] == ids
    assert tokenizer.decode(ids) == source.decode(ids) == SAMPLE
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token) == ("<|im_start|>", "<|im_end|>",
                                                                              "<|endoftext|>")
    messages = [{"role": "user", "content": "hi"}]
    assert (tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            == source.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))


@pytest.mark.parametrize("name", list(SHAPES))
def test_llama_cpp_runs_the_f32_file_like_pytorch(models, name):
    import torch
    from llama_cpp import Llama

    from harness.throughput.lanes import LlamaCppLane

    m = models[name]
    llm = Llama(model_path=str(m["f32"]), n_ctx=64, vocab_only=True, verbose=False)
    try:
        assert llm.tokenize(SAMPLE.encode(), add_bos=False, special=True) == m["tokenizer"](SAMPLE)["input_ids"]
    finally:
        llm.close()

    diff = float(np.abs(_llama_cpp_logits(m["f32"], m["ids"]) - m["logits"]).max())
    assert diff <= 1e-4, f"{name}: llama.cpp's F32 logits differ from PyTorch's by {diff}"

    n = 8
    with torch.no_grad():
        expected = m["model"].generate(torch.tensor([m["ids"]]), max_new_tokens=n, do_sample=False,
                                       pad_token_id=m["tokenizer"].pad_token_id)[0, len(m["ids"]):].tolist()
    lane = LlamaCppLane(m["f32"], threads=THREADS, n_ctx=64)
    try:
        lane.load()
        got = list(lane.generate(m["ids"], n).ids)
    finally:
        lane.close()
    assert got == expected, f"{name}: llama.cpp greedy {got}, PyTorch {expected}"


def test_llama_needs_the_rotary_permutation(models, tmp_path, monkeypatch):
    """The control: written without the q/k permutation, llama.cpp's logits are far from PyTorch's."""
    m = models["llama64"]
    monkeypatch.setattr(W, "rope_permute", lambda w, n_head: w)
    unpermuted = W.write(m["hf"], tmp_path / "unpermuted.gguf", "F32")["path"]
    diff = float(np.abs(_llama_cpp_logits(Path(unpermuted), m["ids"]) - m["logits"]).max())
    assert diff > 0.05, f"without the permutation llama.cpp's logits still match (max diff {diff})"


# -- quantized files --------------------------------------------------------------------------------------
def test_the_cases_cover_exactly_the_supported_types():
    assert set().union(*(types for _, _, types, _ in CASES)) == G.SUPPORTED_TYPES


@pytest.mark.parametrize("name,ftype,types,bound", CASES, ids=[f"{n}-{f}" for n, f, _, _ in CASES])
def test_quantized_file_loads_with_llama_cpps_values(models, name, ftype, types, bound, tmp_path, record_property):
    from gguf import GGUFReader

    m = models[name]
    path = tmp_path / f"{name}-{ftype}.gguf"
    if ftype == "F16":
        info = W.write(m["hf"], path, "F16")
    else:
        info = W.quantize(m["f32"], path, ftype, threads=THREADS)
    assert info == {**G.inspect(path), "source": info["source"], "ftype": ftype}
    assert set(info["tensor_types"]) == types, f"{name} {ftype}: llama.cpp wrote {info['types']}"
    assert all(info["types"][t] == "F32" for t in info["types"] if t.endswith("norm.weight") or t.endswith(".bias"))
    G.check_supported(path, info)

    _, model, _, weights = _convert(path, tmp_path / "hf")
    config = json.loads((m["hf"] / "config.json").read_text())
    for tensor in GGUFReader(path).tensors:
        reference = _ggml_dequantize(tensor)
        if m["arch"] == "llama" and ".attn_q." in tensor.name:
            reference = _unpermute(reference, config["num_attention_heads"])
        elif m["arch"] == "llama" and ".attn_k." in tensor.name:
            reference = _unpermute(reference, config["num_key_value_heads"])
        converted = weights[_hf_name(tensor.name)]
        assert converted.shape == reference.shape and np.array_equal(converted, reference), (
            f"{tensor.name} ({tensor.tensor_type.name}): transformers' weights differ from ggml's dequantization "
            f"by {np.abs(converted - reference).max()}")

    logits = _logits(model, m["ids"])
    to_source = float(np.abs(logits - m["logits"]).max())
    to_llama_cpp = float(np.abs(_llama_cpp_logits(path, m["ids"]) - logits).max())
    record_property("max_abs_logit_diff_to_source", to_source)
    record_property("max_abs_logit_diff_to_llama_cpp", to_llama_cpp)
    print(f"{name} {ftype}: types {info['tensor_types']}; max |logits - source| {to_source:.4g}, "
          f"max |logits - llama.cpp on the same file| {to_llama_cpp:.4g}")
    assert to_source <= bound, f"{name} {ftype}: converted logits differ from the source's by {to_source}"
    # llama.cpp quantizes activations for its quantized products (Q8_0/Q8_K): that is most of this difference
    assert to_llama_cpp <= 0.25, f"{name} {ftype}: transformers and llama.cpp differ by {to_llama_cpp}"


# -- refusals ---------------------------------------------------------------------------------------------
def test_an_unsupported_tensor_type_is_refused_by_name(models, tmp_path):
    path = tmp_path / "iq4.gguf"
    info = W.quantize(models["llama64"]["f32"], path, "IQ4_NL", threads=THREADS)
    assert "IQ4_NL" in info["tensor_types"] and "IQ4_NL" not in G.SUPPORTED_TYPES
    first = info["first_tensor_of_type"]["IQ4_NL"]
    with pytest.raises(ArtifactError) as caught:
        G.check_supported(path, info)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and "tensor type IQ4_NL is not supported" in message
    assert f"{info['tensor_types']['IQ4_NL']} tensors, first {first!r}" in message
    assert "architecture" not in message and "Q8_0 is not supported" not in message
    with pytest.raises(ArtifactError, match="IQ4_NL"):
        G.check_supported(path)


def test_a_crafted_file_is_refused_for_its_architecture_and_type(tmp_path):
    import gguf

    path = tmp_path / "crafted.gguf"
    writer = gguf.GGUFWriter(path, "phi2")
    writer.add_name("crafted")
    writer.add_tensor("token_embd.weight", np.zeros((4, 32), dtype=np.float32))
    block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.TQ2_0]
    raw = np.random.default_rng(0).integers(0, 255, size=(8, 256 // block * size), dtype=np.uint8)
    writer.add_tensor("blk.0.attn_q.weight", raw, raw_dtype=gguf.GGMLQuantizationType.TQ2_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    info = G.inspect(path)
    assert info["tensor_types"] == {"F32": 1, "TQ2_0": 1} and info["architecture"] == "phi2"
    with pytest.raises(ArtifactError) as caught:
        G.check_supported(path, info)
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    assert "architecture 'phi2' is not supported" in message
    assert "tensor type TQ2_0 is not supported (1 tensor, first 'blk.0.attn_q.weight')" in message


def test_a_llama_file_named_mistral_is_refused():
    info = {"architecture": "llama", "name": "mistral", "tensor_types": {"F32": 3}, "first_tensor_of_type": {}}
    with pytest.raises(ArtifactError, match=r"^x\.gguf: general\.name 'mistral'"):
        G.check_supported(Path("x.gguf"), info)


def test_broken_files_are_named(models, tmp_path):
    data = models["llama256"]["f32"].read_bytes()
    cases = {
        "one-byte-short.gguf": (data[:-1], "truncated GGUF"),
        "half.gguf": (data[: len(data) // 2], "truncated GGUF"),
        "header-cut.gguf": (data[:100], "truncated or corrupt GGUF header"),
        "magic-only.gguf": (b"GGUF", "truncated or corrupt GGUF header"),
        "wrong-version.gguf": (b"GGUF" + bytes(range(256)) * 2, "truncated or corrupt GGUF header"),
        "text.gguf": (b"not a model\n" * 20, "not a GGUF file"),
        "empty.gguf": (b"", "not a GGUF file"),
    }
    for file_name, (content, what) in cases.items():
        path = tmp_path / file_name
        path.write_bytes(content)
        for call in (G.inspect, G.check_supported):
            with pytest.raises(ArtifactError) as caught:
                call(path)
            assert str(caught.value).startswith(f"{path}: {what}"), str(caught.value)
    with pytest.raises(ArtifactError, match="no such GGUF file"):
        G.inspect(tmp_path / "missing.gguf")
    with pytest.raises(ArtifactError, match="is not one of"):
        W.quantize(models["llama64"]["f32"], tmp_path / "x.gguf", "Q9_9")
    with pytest.raises(ArtifactError, match=r"truncated GGUF"):
        W.quantize(tmp_path / "half.gguf", tmp_path / "x.gguf", "Q8_0")
    assert not (tmp_path / "x.gguf").exists()


def test_write_refuses_what_it_cannot_write(models, tmp_path):
    hf = tmp_path / "hf"
    shutil.copytree(models["llama64"]["hf"], hf)
    config = json.loads((hf / "config.json").read_text())
    (hf / "config.json").write_text(json.dumps({**config, "rope_parameters": {"rope_type": "llama3",
                                                                               "rope_theta": 10000.0}}))
    with pytest.raises(ArtifactError, match=r"config\.json: rope type 'llama3' is not supported"):
        W.write(hf, tmp_path / "x.gguf", "F32")
    (hf / "config.json").write_text(json.dumps({**config, "architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(ArtifactError, match=r"config\.json: architectures \['GPT2LMHeadModel'\]"):
        W.write(hf, tmp_path / "x.gguf", "F32")
    with pytest.raises(ArtifactError, match="Q8_0"):
        W.write(models["llama64"]["hf"], tmp_path / "x.gguf", "Q8_0")
    assert not (tmp_path / "x.gguf").exists()
