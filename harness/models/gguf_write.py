"""Writing GGUF files: a Llama-family (or Qwen2) Hugging Face directory at F32/F16 with gguf-py's
``GGUFWriter``, and quantizing such a file with llama.cpp's own quantizer (llama-cpp-python).

The layout follows what llama.cpp's ``convert_hf_to_gguf.py`` writes for these architectures, so that
both llama.cpp (running the file) and transformers' GGUF loader (``harness.models.gguf.convert``)
read it back as the same model:

- Llama's q/k projection rows are permuted from Hugging Face's rotate-half rotary layout to ggml's
  interleaved (``LLAMA_ROPE_TYPE_NORM``) one, per head: row ``(h, half, i)`` goes to ``(h, i, half)``.
  transformers' loader undoes exactly this for architecture ``llama`` (``LlamaTensorProcessor``).
  Qwen2 runs with NEOX rotary in llama.cpp, the Hugging Face layout, so nothing is permuted.
- 1-D tensors (norms, biases) stay F32 in an F16 file; a tied output head is not written
  (llama.cpp falls back to ``token_embd``; transformers sets ``tie_word_embeddings`` from its absence).
- The byte-level BPE tokenizer is ``tokenizer.ggml.model = "gpt2"`` with the vocabulary spelled in
  the byte alphabet, the merges as ``"a b"`` strings, token types (special added tokens CONTROL,
  other added tokens USER_DEFINED, padding rows UNUSED) and the pre-tokenizer's llama.cpp name, all
  read from the tokenizer as transformers loads the directory (a tokenizer class may impose its own
  pre-tokenizer: Qwen2's always splits digits singly, whatever tokenizer.json says).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import ArtifactError

ARCHITECTURES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2"}
FTYPES = ("F32", "F16")
# llama.cpp file types this module asks the quantizer for (llama.h ``LLAMA_FTYPE_MOSTLY_<name>``).
QUANT_FTYPES = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K",
                "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "IQ4_NL", "TQ1_0", "TQ2_0", "BF16", "F16")

# The GPT-2 split (``tokenizers``' ByteLevel with use_regex=True); llama.cpp's pre-tokenizer "gpt-2".
_GPT2_PRE = "gpt-2"
# Qwen2's split, as its tokenizer.json spells it; llama.cpp's pre-tokenizer "qwen2".
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")

_LAYER_TENSORS = {  # Hugging Face name inside model.layers.N -> GGUF name inside blk.N
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def rope_permute(weight, n_head: int):
    """Hugging Face rotate-half rows -> ggml interleaved rows, head by head (weights or biases)."""
    shape = weight.shape
    half = shape[0] // n_head // 2
    return weight.reshape(n_head, 2, half, *shape[1:]).swapaxes(1, 2).reshape(shape)


def _hparams(hf_dir: Path) -> tuple[str, dict[str, Any]]:
    where = hf_dir / "config.json"
    try:
        config = json.loads(where.read_text())
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"{where}: cannot read the model config: {exc}") from None
    archs = config.get("architectures") or []
    if len(archs) != 1 or archs[0] not in ARCHITECTURES:
        raise ArtifactError(f"{where}: architectures {archs!r} cannot be written as GGUF here "
                            f"(supported: {', '.join(sorted(ARCHITECTURES))})")
    arch = ARCHITECTURES[archs[0]]
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise ArtifactError(f"{where}: rope type {rope.get('rope_type', rope.get('type'))!r} is not supported "
                            f"(only the default rotary)")
    if config.get("hidden_act", "silu") != "silu":
        raise ArtifactError(f"{where}: hidden_act {config.get('hidden_act')!r} is not supported (only silu)")
    if config.get("mlp_bias"):
        raise ArtifactError(f"{where}: mlp_bias = true is not supported")
    if arch == "llama" and config.get("attention_bias"):
        raise ArtifactError(f"{where}: attention_bias = true is not supported for llama (transformers' GGUF "
                            f"loader does not restore it)")
    if arch == "qwen2" and config.get("use_sliding_window"):
        raise ArtifactError(f"{where}: use_sliding_window = true is not supported")

    def need(key: str):
        if not isinstance(config.get(key), (int, float)) or isinstance(config.get(key), bool):
            raise ArtifactError(f"{where}: {key} is {config.get(key)!r}, expected a number")
        return config[key]

    heads, hidden = need("num_attention_heads"), need("hidden_size")
    head_dim = config.get("head_dim") or hidden // heads
    if arch == "qwen2" and head_dim != hidden // heads:
        raise ArtifactError(f"{where}: head_dim {head_dim} differs from hidden_size / num_attention_heads, "
                            f"which transformers' GGUF loader assumes for qwen2")
    theta = rope.get("rope_theta", config.get("rope_theta", 10000.0))
    return arch, {
        "context_length": need("max_position_embeddings"), "embedding_length": hidden,
        "block_count": need("num_hidden_layers"), "feed_forward_length": need("intermediate_size"),
        "head_count": heads, "head_count_kv": config.get("num_key_value_heads") or heads, "head_dim": head_dim,
        "rope_theta": float(theta), "rms_norm_eps": float(need("rms_norm_eps")), "vocab_size": need("vocab_size"),
        "tied": bool(config.get("tie_word_embeddings", False)),
    }


def _tokenizer(hf_dir: Path, vocab_size: int) -> dict[str, Any]:
    """The byte-level BPE vocabulary, merges, token types, pre-tokenizer, special ids and chat template of
    the tokenizer as transformers loads ``hf_dir`` (AutoTokenizer): a model class may impose its own
    pre-tokenizer over tokenizer.json's (transformers' Qwen2Tokenizer always splits digits singly)."""
    from transformers import AutoTokenizer

    try:
        hf_tok = AutoTokenizer.from_pretrained(hf_dir)
        spec = json.loads(hf_tok.backend_tokenizer.to_str())
    except Exception as exc:
        raise ArtifactError(f"{hf_dir}: transformers cannot load a fast tokenizer from it: "
                            f"{type(exc).__name__}: {exc}") from None
    where = hf_dir / "tokenizer.json"
    model = spec.get("model") or {}
    if model.get("type") != "BPE" or model.get("byte_fallback"):
        raise ArtifactError(f"{where}: model {model.get('type')!r} is not supported (only byte-level BPE)")
    pre = spec.get("pre_tokenizer") or {}
    if pre.get("type") == "ByteLevel" and pre.get("use_regex", True) and not pre.get("add_prefix_space"):
        pre_name = _GPT2_PRE
    elif (pre.get("type") == "Sequence" and len(pre.get("pretokenizers", [])) == 2
          and pre["pretokenizers"][0].get("type") == "Split"
          and pre["pretokenizers"][0].get("pattern", {}).get("Regex") == _QWEN2_SPLIT
          and pre["pretokenizers"][1].get("type") == "ByteLevel"
          and not pre["pretokenizers"][1].get("use_regex", True)
          and not pre["pretokenizers"][1].get("add_prefix_space")):
        pre_name = "qwen2"
    else:
        raise ArtifactError(f"{where}: pre-tokenizer {json.dumps(pre)[:200]} is not one llama.cpp names here "
                            f"(supported: ByteLevel with the GPT-2 split, Qwen2's split)")
    normalizer = (spec.get("normalizer") or {}).get("type")
    if normalizer not in (None, "NFC"):  # NFC (Qwen2's): llama.cpp does not apply it; NFC text is unchanged
        raise ArtifactError(f"{where}: normalizer {normalizer!r} is not supported")
    vocab: dict[str, int] = dict(model["vocab"])
    added = {t["id"]: t for t in spec.get("added_tokens", [])}
    for tid, t in added.items():
        vocab[t["content"]] = tid
    by_id = {i: tok for tok, i in vocab.items()}
    if len(by_id) != len(vocab) or max(by_id) >= max(vocab_size, len(by_id)):
        raise ArtifactError(f"{where}: token ids are not unique or exceed the config's vocab_size {vocab_size}")
    tokens, types = [], []
    for i in range(max(vocab_size, max(by_id) + 1)):
        if i in by_id:
            tokens.append(by_id[i])
            types.append(1 if i not in added else 3 if added[i].get("special") else 4)  # normal/control/user
        else:  # rows the model has and the tokenizer never produces
            tokens.append(f"[PAD{i}]")
            types.append(5)  # unused
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    probe = hf_tok("a")["input_ids"]
    plain = hf_tok("a", add_special_tokens=False)["input_ids"]
    return {"tokens": tokens, "types": types, "merges": merges, "pre": pre_name,
            "chat_template": hf_tok.chat_template if isinstance(hf_tok.chat_template, str) else None,
            "bos": hf_tok.bos_token_id, "eos": hf_tok.eos_token_id, "pad": hf_tok.pad_token_id,
            "unk": hf_tok.unk_token_id,
            "add_bos": len(probe) > len(plain) and probe[0] == hf_tok.bos_token_id,
            "add_eos": len(probe) > len(plain) and probe[-1] == hf_tok.eos_token_id}


def _state_dict(hf_dir: Path) -> dict[str, Any]:
    """Every tensor of the checkpoint as a float32 numpy array."""
    import torch
    from safetensors.torch import load_file

    files = sorted(hf_dir.glob("*.safetensors"))
    if not files:
        raise ArtifactError(f"{hf_dir}: no *.safetensors weights")
    tensors: dict[str, Any] = {}
    for f in files:
        for name, t in load_file(str(f)).items():
            tensors[name] = t.to(torch.float32).numpy()
    return tensors


def _tensors(hf_dir: Path, arch: str, hp: dict[str, Any], tok: dict[str, Any],
             sd: dict[str, Any]) -> list[tuple[str, Any]]:
    """The Hugging Face state dict ``sd`` as (GGUF name, tensor) pairs in the file's order (llama's q/k rows
    permuted to ggml's rotary layout), refusing a missing tensor, one this writer does not map, and an
    embedding whose rows disagree with the tokenizer.  ``sd`` is consumed."""
    def take(key: str):
        try:
            return sd.pop(key)
        except KeyError:
            raise ArtifactError(f"{hf_dir}: the weights have no tensor {key!r}") from None

    tensors: list[tuple[str, Any]] = [("token_embd.weight", take("model.embed_tokens.weight"))]
    for b in range(hp["block_count"]):
        prefix = f"model.layers.{b}."
        for hf_name, gguf_name in _LAYER_TENSORS.items():
            if hf_name.endswith(".bias") and arch != "qwen2":
                continue  # llama's q/k/v carry no bias (attention_bias is refused above)
            w = take(prefix + hf_name)
            if arch == "llama" and ".q_proj." in hf_name:
                w = rope_permute(w, hp["head_count"])
            elif arch == "llama" and ".k_proj." in hf_name:
                w = rope_permute(w, hp["head_count_kv"])
            tensors.append((f"blk.{b}.{gguf_name}", w))
    tensors.append(("output_norm.weight", take("model.norm.weight")))
    lm_head = sd.pop("lm_head.weight", None)
    if not hp["tied"]:
        if lm_head is None:
            raise ArtifactError(f"{hf_dir}: tie_word_embeddings is false and the weights have no lm_head.weight")
        tensors.append(("output.weight", lm_head))
    leftover = sorted(k for k in sd if not k.endswith("rotary_emb.inv_freq"))
    if leftover:
        raise ArtifactError(f"{hf_dir}: tensors this writer does not map: {', '.join(leftover[:8])}")
    if tensors[0][1].shape[0] != len(tok["tokens"]):
        raise ArtifactError(f"{hf_dir}: the embedding has {tensors[0][1].shape[0]} rows and the tokenizer "
                            f"{len(tok['tokens'])} tokens")
    return tensors


def _add_model_keys(writer, arch: str, hp: dict[str, Any], tok: dict[str, Any]):
    """The hyperparameters and the tokenizer as the GGUF's key/value metadata, as llama.cpp's converter
    writes them for ``arch``."""
    writer.add_vocab_size(len(tok["tokens"]))
    writer.add_context_length(hp["context_length"])
    writer.add_embedding_length(hp["embedding_length"])
    writer.add_block_count(hp["block_count"])
    writer.add_feed_forward_length(hp["feed_forward_length"])
    writer.add_head_count(hp["head_count"])
    writer.add_head_count_kv(hp["head_count_kv"])
    writer.add_rope_freq_base(hp["rope_theta"])
    writer.add_layer_norm_rms_eps(hp["rms_norm_eps"])
    if arch == "llama":
        writer.add_rope_dimension_count(hp["head_dim"])
    if hp["head_dim"] != hp["embedding_length"] // hp["head_count"]:
        writer.add_key_length(hp["head_dim"])
        writer.add_value_length(hp["head_dim"])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(tok["pre"])
    writer.add_token_list(tok["tokens"])
    writer.add_token_types(tok["types"])
    writer.add_token_merges(tok["merges"])
    for key, add in (("bos", writer.add_bos_token_id), ("eos", writer.add_eos_token_id),
                     ("pad", writer.add_pad_token_id), ("unk", writer.add_unk_token_id)):
        if tok[key] is not None:
            add(tok[key])
    writer.add_add_bos_token(tok["add_bos"])
    writer.add_add_eos_token(tok["add_eos"])
    if tok["chat_template"]:
        writer.add_chat_template(tok["chat_template"])


def write(hf_dir: Path, out_path: Path, ftype: str, *, name: str | None = None) -> dict[str, Any]:
    """Write ``hf_dir`` (Llama or Qwen2, byte-level BPE tokenizer) as a GGUF at ``ftype`` F32 or F16.

    The file is written beside ``out_path`` and renamed into place. Returns ``inspect(out_path)``
    with the source directory and the file type asked for."""
    import gguf
    import numpy as np

    from .gguf import inspect

    hf_dir, out_path = Path(hf_dir), Path(out_path)
    if ftype not in FTYPES:
        raise ArtifactError(f"{out_path}: file type {ftype!r} cannot be written directly (choose {', '.join(FTYPES)}; "
                            f"quantize() makes the others)")
    arch, hp = _hparams(hf_dir)
    tok = _tokenizer(hf_dir, hp["vocab_size"])
    sd = _state_dict(hf_dir)

    half = ftype == "F16"
    tensors = _tensors(hf_dir, arch, hp, tok, sd)

    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(f".{out_path.name}.tmp-{os.getpid()}")
    writer = gguf.GGUFWriter(tmp, arch)
    try:
        writer.add_name(name or hf_dir.name)
        writer.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16 if half else gguf.LlamaFileType.ALL_F32))
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        _add_model_keys(writer, arch, hp, tok)
        for tname, w in tensors:
            w = np.ascontiguousarray(w, dtype=np.float16 if half and w.ndim == 2 else np.float32)
            writer.add_tensor(tname, w)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(tmp, out_path)
    except BaseException:
        writer.close()
        tmp.unlink(missing_ok=True)
        raise
    return {**inspect(out_path), "source": str(hf_dir), "ftype": ftype}


def quantize(src_gguf: Path, dst_gguf: Path, type_name: str, *, threads: int = 1) -> dict[str, Any]:
    """Quantize ``src_gguf`` (F32/F16) to llama.cpp file type ``type_name`` (``Q8_0``, ``Q4_K_M``, ...)
    with llama.cpp's quantizer at its default parameters. llama.cpp picks each tensor's type itself
    (k-quants fall back to a 32-block type on rows not divisible by 256; ``*_M`` mixes keep some
    tensors wider), so the result reports what every tensor actually got: ``inspect(dst_gguf)``."""
    from .gguf import inspect

    src_gguf, dst_gguf = Path(src_gguf), Path(dst_gguf)
    if type_name not in QUANT_FTYPES:
        raise ArtifactError(f"{dst_gguf}: quantization type {type_name!r} is not one of {', '.join(QUANT_FTYPES)}")
    inspect(src_gguf)  # a clear error for a missing or broken source, before llama.cpp sees it
    import llama_cpp

    ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{type_name}", None)
    if ftype is None:
        raise ArtifactError(f"{dst_gguf}: llama-cpp-python {llama_cpp.__version__} has no "
                            f"LLAMA_FTYPE_MOSTLY_{type_name}")
    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = threads
    dst_gguf.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst_gguf.with_name(f".{dst_gguf.name}.tmp-{os.getpid()}")
    try:
        rc = llama_cpp.llama_model_quantize(str(src_gguf).encode(), str(tmp).encode(), params)
        if rc != 0:
            raise ArtifactError(f"{src_gguf}: llama.cpp's quantizer returned {rc} for {type_name} "
                                f"(its log on stderr says why)")
        os.replace(tmp, dst_gguf)
    finally:
        tmp.unlink(missing_ok=True)
    return {**inspect(dst_gguf), "source": str(src_gguf), "ftype": type_name}
