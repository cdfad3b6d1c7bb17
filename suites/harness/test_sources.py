"""Model sources (harness/sources/): every bad input fails when the campaign loads, or when the first
fixture opens the graph, naming the file, the field and the value; `init` writes a campaign that loads."""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from harness import campaign as campaign_mod
from harness.errors import ArtifactError, CampaignError
from harness.runtime import OrtDecoder
from harness.start import campaign_text, default_with, model_table

ROOT = Path(__file__).resolve().parents[2]
SHA = "0" * 64


def _campaign(tmp_path: Path, model: str) -> Path:
    """The default campaign with its models replaced by ``model`` (a [[models]] table's text)."""
    path = tmp_path / "c.toml"
    path.write_text(default_with(model))
    return path


def _model(source: str, **keys) -> str:
    lines = ["[[models]]", 'id = "mine"', 'tier = "ci"', f'source = "{source}"', 'dtypes = ["fp32", "q8", "q4"]']
    for k, v in keys.items():
        lines.append(f"{k} = {json.dumps(v) if not isinstance(v, str) or not v.startswith('{') else v}")
    return "\n".join(lines) + "\n"


def _load_error(tmp_path, model) -> str:
    with pytest.raises(CampaignError) as e:
        campaign_mod.load(_campaign(tmp_path, model))
    return str(e.value)


def _hf_dir(tmp_path: Path, **config) -> Path:
    d = tmp_path / "hf"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                                               "num_attention_heads": 4, "intermediate_size": 128,
                                               "vocab_size": 100, **config}))
    (d / "model.safetensors").write_bytes(b"x")
    (d / "tokenizer.json").write_text("{}")
    return d


# -- load-time refusals: each names the campaign file, the field and the value --------------------------------
def test_an_hf_source_needs_an_existing_directory_with_config_weights_and_tokenizer(tmp_path):
    msg = _load_error(tmp_path, _model("hf", path=str(tmp_path / "nowhere")))
    assert "c.toml" in msg and "path" in msg and "nowhere" in msg and "does not exist" in msg
    d = tmp_path / "empty"
    d.mkdir()
    assert "no config.json" in _load_error(tmp_path, _model("hf", path=str(d)))
    d = _hf_dir(tmp_path)
    (d / "model.safetensors").unlink()
    assert "has no weights" in _load_error(tmp_path, _model("hf", path=str(d)))
    (d / "model.safetensors").write_bytes(b"x")
    (d / "tokenizer.json").unlink()
    assert "has no tokenizer" in _load_error(tmp_path, _model("hf", path=str(d)))
    (d / "tokenizer.json").write_text("{}")
    c = campaign_mod.load(_campaign(tmp_path, _model("hf", path="hf")))   # relative to the campaign file
    assert c.models[0].path == d and c.models[0].architecture == "llama"


@pytest.mark.parametrize("config, named", [
    ({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}, "model_type 'gpt2'"),
    ({"model_type": "phi3"}, "model_type 'phi3'"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope scaling type 'yarn'"),
    ({"mlp_bias": True}, "mlp_bias"),
    ({"hidden_act": "gelu"}, "hidden_act 'gelu'"),
    ({"num_hidden_layers": "two"}, "num_hidden_layers is 'two'"),
])
def test_an_architecture_the_exporter_cannot_write_is_refused_by_name_at_load(tmp_path, config, named):
    d = _hf_dir(tmp_path, **config)
    msg = _load_error(tmp_path, _model("hf", path=str(d)))
    assert named in msg and str(d / "config.json") in msg and "models" in msg or "model 'mine'" in msg, msg


@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen2"])
def test_the_supported_architectures_load(tmp_path, model_type):
    d = _hf_dir(tmp_path, model_type=model_type)
    assert campaign_mod.load(_campaign(tmp_path, _model("hf", path=str(d)))).models[0].architecture == model_type


def test_a_gguf_source_takes_a_path_or_a_package_and_a_well_formed_pin(tmp_path):
    msg = _load_error(tmp_path, _model("gguf", path=str(tmp_path / "m.gguf"), sha256=SHA))
    assert "m.gguf does not exist" in msg and "path" in msg
    assert "sha256" in _load_error(tmp_path, _model("gguf", path="m.gguf", sha256="abc"))
    assert "either path or package" in _load_error(tmp_path, _model("gguf", path="m.gguf", package="p", file="f",
                                                                     sha256=SHA))
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf at all, just bytes" * 10)
    msg = _load_error(tmp_path, _model("gguf", path="junk.gguf", sha256=SHA))
    assert "junk.gguf" in msg and "path" in msg


def test_an_onnx_source_finds_its_graphs_or_says_what_it_looked_for(tmp_path):
    d = tmp_path / "export"
    (d / "onnx").mkdir(parents=True)
    msg = _load_error(tmp_path, _model("onnx", path=str(d)))
    assert "no graph for fp32, q8, q4" in msg and "onnx/model.onnx" in msg and "dtypes" in msg
    (d / "onnx" / "model.onnx").write_bytes(b"")
    (d / "onnx" / "model_int8.onnx").write_bytes(b"")
    (d / "onnx" / "model_fp16.onnx").write_bytes(b"")
    msg = _load_error(tmp_path, _model("onnx", path=str(d)))
    assert "no graph for q4" in msg and "q8 = onnx/model_int8.onnx" in msg
    msg = _load_error(tmp_path, _model("onnx", path=str(d), graphs='{ q4 = "onnx/nope.onnx" }'))
    assert "graphs.q4" in msg and "nope.onnx does not exist" in msg
    msg = _load_error(tmp_path, _model("onnx", path=str(d), graphs='{ q5 = "onnx/model.onnx" }'))
    assert "unknown dtype 'q5'" in msg
    msg = _load_error(tmp_path, _model("onnx", path=str(d), graphs='{ q4 = "../outside.onnx" }'))
    assert "inside" in msg
    (d / "onnx" / "model_q4.onnx").write_bytes(b"")
    msg = _load_error(tmp_path, _model("onnx", path=str(d)))
    assert "tokenizer" in msg and "config.json" in msg
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "num_key_value_heads": 2, "hidden_size": 16,
                                               "num_attention_heads": 4, "num_hidden_layers": 1}))
    (d / "tokenizer.json").write_text("{}")
    # each measured graph is opened at load (test_onnx_door.py has the real export's refusals); fp16 is not measured
    msg = _load_error(tmp_path, _model("onnx", path=str(d)))
    assert f"model 'mine'.graphs.fp32: {d / 'onnx' / 'model.onnx'}: empty file" in msg, msg
    for name in ("model.onnx", "model_int8.onnx", "model_q4.onnx"):
        _graph(d / "onnx" / name)
    spec = campaign_mod.load(_campaign(tmp_path, _model("onnx", path=str(d)))).models[0]
    assert dict(spec.graphs) == {"fp32": "onnx/model.onnx", "q8": "onnx/model_int8.onnx", "q4": "onnx/model_q4.onnx"}
    assert spec.hf_path is None and not spec.has_weights and spec.config_dir == d
    assert "not measured" in model_table(d)[0] and "fp16 = onnx/model_fp16.onnx" in model_table(d)[0]


def test_corpus_files_resolve_from_the_campaign_and_are_pinned(tmp_path):
    text = (tmp_path / "mine.txt")
    text.write_text("domain text " * 100)
    c = _campaign(tmp_path, _model("hf", path=str(_hf_dir(tmp_path))))
    body = c.read_text()
    body = re.sub(r"heldout = \[.*?\]\n", 'heldout = [ { path = "mine.txt", sha256 = "' + SHA + '" } ]\n', body,
                  flags=re.S)
    body = body.replace('package = "base-files"\n', "")
    c.write_text(body)
    loaded = campaign_mod.load(c)
    assert loaded.corpus_heldout[0].path == text and loaded.corpus_package is None
    from harness import corpus
    with pytest.raises(ArtifactError, match="mine.txt: corpus SHA-256 .* differs from the campaign's pin"):
        corpus.read(loaded.corpus_heldout)


# -- graph binding: any decoder graph, and a clear refusal of what cannot be bound ---------------------------------
def _graph(path: Path, extra_inputs=(), kv=True, kv_heads=2, head_dim=4, kv_type=TensorProto.FLOAT, layers=1):
    """A toy decoder (one layer unless told): logits from an embedding, present = concat(past, new)."""
    ins = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"]),
           helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["b", "t"])]
    ins += [helper.make_tensor_value_info(n, t, s) for n, t, s in extra_inputs]
    outs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["b", "s", 8])]
    emb = helper.make_tensor("emb", TensorProto.FLOAT, [8, 8], np.eye(8, dtype=np.float32).ravel().tolist())
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["logits"])]
    for layer in range(layers if kv else 0):
        for kind in ("key", "value"):
            ins.append(helper.make_tensor_value_info(f"past_key_values.{layer}.{kind}", kv_type, ["b", kv_heads, "p", head_dim]))
            outs.append(helper.make_tensor_value_info(f"present.{layer}.{kind}", kv_type, ["b", kv_heads, "t", head_dim]))
            nodes.append(helper.make_node("Identity", [f"past_key_values.{layer}.{kind}"], [f"present.{layer}.{kind}"]))
    model = helper.make_model(helper.make_graph(nodes, "toy", ins, outs, [emb]), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_a_graph_without_a_kv_cache_is_refused_naming_the_graph(tmp_path):
    g = _graph(tmp_path / "nokv.onnx", kv=False)
    with pytest.raises(ArtifactError, match=r"nokv\.onnx: graph lacks the expected inputs .*past_key_values"):
        OrtDecoder(g)


def test_an_input_the_decoder_cannot_fill_is_named(tmp_path):
    g = _graph(tmp_path / "extra.onnx", extra_inputs=[("use_cache_branch", TensorProto.BOOL, [1])])
    with pytest.raises(ArtifactError, match=r"extra\.onnx: cannot bind input\(s\) use_cache_branch"):
        OrtDecoder(g)


def test_a_graph_that_disagrees_with_its_config_is_refused(tmp_path):
    g = _graph(tmp_path / "model.onnx")
    (tmp_path / "config.json").write_text(json.dumps({"num_key_value_heads": 4, "num_attention_heads": 4,
                                                      "hidden_size": 16, "num_hidden_layers": 1}))
    with pytest.raises(ArtifactError, match=r"model\.onnx: input past_key_values\.0\.key has kv_heads 2; .*config\.json says 4"):
        OrtDecoder(g)
    (tmp_path / "config.json").write_text(json.dumps({"num_key_value_heads": 2, "num_attention_heads": 4,
                                                      "hidden_size": 16, "num_hidden_layers": 3}))
    with pytest.raises(ArtifactError, match=r"past_key_values for 1 layers; .*config\.json says 3"):
        OrtDecoder(g)


def test_symbolic_cache_dims_come_from_the_config_beside_the_graph_and_fp16_caches_bind(tmp_path):
    (tmp_path / "onnx").mkdir()
    g = _graph(tmp_path / "onnx" / "model.onnx", kv_heads="heads", head_dim="dim", kv_type=TensorProto.FLOAT16)
    with pytest.raises(ArtifactError, match="declares kv_heads symbolically"):
        OrtDecoder(g)
    (tmp_path / "config.json").write_text(json.dumps({"num_key_value_heads": 2, "num_attention_heads": 4,
                                                      "hidden_size": 16, "num_hidden_layers": 1}))
    dec = OrtDecoder(g)   # the transformers.js layout: config.json one folder up
    assert (dec.kv_heads, dec.head_dim, dec.kv_dtype) == (2, 4, np.float16)
    logits, present = dec.forward(np.array([[1, 2]]), np.ones((1, 2)), np.array([[0, 1]]), dec.empty_past(1))
    assert logits.dtype == np.float32 and present[0].dtype == np.float16


@pytest.mark.native
def test_the_probe_refuses_what_it_cannot_bind_naming_graph_and_input(tmp_path):
    from harness.throughput import probe

    binary = probe.ensure_built()
    for graph, named in ((_graph(tmp_path / "nokv.onnx", kv=False), "past_key_values"),
                         (_graph(tmp_path / "extra.onnx", extra_inputs=[("use_cache_branch", TensorProto.BOOL, [1])]),
                          "cannot bind input use_cache_branch")):
        with pytest.raises(probe.ProbeError) as e:
            probe.ProbeProcess(binary, graph, 1)
        assert str(graph) in str(e.value) and named in str(e.value)


# -- init ----------------------------------------------------------------------------------------------------
def test_init_chooses_the_source_from_the_path_and_refuses_what_is_neither(tmp_path):
    d = _hf_dir(tmp_path)
    assert model_table(d)[1] == "hf"
    (d / "onnx").mkdir()
    _graph(d / "onnx" / "model_q4.onnx", kv_heads=4, head_dim=16, layers=2)   # as its config.json says
    table, source = model_table(d)
    assert source == "onnx" and 'dtypes = ["q4"]' in table and f'hf = "{d}"' in table
    empty = tmp_path / "nothing"
    empty.mkdir()
    out = subprocess.run([sys.executable, "-m", "harness.start", str(empty)], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2 and "nothing: neither a Hugging Face directory" in out.stderr and not out.stdout
    out = subprocess.run([sys.executable, "-m", "harness.start", str(tmp_path / "x.gguf")], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode == 2 and "x.gguf: no such .gguf file or model directory" in out.stderr


def test_init_writes_the_default_suite_for_the_model_and_it_loads(tmp_path):
    d = _hf_dir(tmp_path)
    out = tmp_path / "my.toml"
    subprocess.run([sys.executable, "-m", "harness.start", str(d), "--out", str(out)], check=True, cwd=ROOT)
    c = campaign_mod.load(out)
    default = campaign_mod.load(ROOT / "campaigns" / "default.toml")
    assert [m.source for m in c.models] == ["hf"] and c.models[0].tier == "benchmark"
    import dataclasses
    # the default's policies, without the entries that name the default campaign's own models
    behavior = dataclasses.replace(default.policy["behavior"], suite=str(ROOT / "harness/behavior/chat-v3.toml"),
                                   slices={})
    winrule = dataclasses.replace(default.policy["winrule"], expected={})
    throughput = dataclasses.replace(default.policy["throughput"], model_max_repeats={})
    browser = dataclasses.replace(default.policy["throughput_browser"], diagnose={})
    assert c.policy == {**default.policy, "behavior": behavior, "winrule": winrule, "throughput": throughput,
                        "throughput_browser": browser}
    assert c.export == default.export
    assert c.corpus_heldout == default.corpus_heldout
    assert [e for e in c.expect] == [e for e in default.expect if "model" not in e]
    assert campaign_text(d) == out.read_text()
