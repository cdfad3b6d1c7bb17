"""Evaluations are cached by content, whatever the source (issue 35): a behavior or quantization evaluation is
keyed by the bytes it computes from (the graph and its external weights, or the Hugging Face files), the suite,
the contract and the runtime, never by a model id, a dtype name, a path or how the model reached Gatehouse. An
export directory a user hands in (``onnx`` source) that holds the CI model's graphs reuses the CI model's
evaluations; one changed weight byte, in the graph or in its external data, is another evaluation.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from harness import campaign as campaign_mod
from harness.domain import Variant
from harness.start import default_with

pytestmark = pytest.mark.ci


@pytest.fixture(scope="module")
def ci_spec(campaign):
    return next(m for m in campaign.models if m.tier == "ci")


@pytest.fixture(autouse=True)
def same_slice(behavior, ci_spec, monkeypatch):
    """The campaign slices the CI model's suite (``[policy.behavior] slices``); the copies here get the same
    slice, as a user's campaign for the same model would (another slice is another suite: another key)."""
    n = behavior.policy.slices.get(ci_spec.id)
    for model_id in ("someone-elses", "renamed", "external", "external2", "their-hf"):
        monkeypatch.setitem(behavior.policy.slices, model_id, n)


@pytest.fixture(scope="module")
def ci_export(models, ci_spec) -> Path:
    graph, _ = models.graph(Variant(ci_spec, "fp32"))
    return graph.parent.parent


def source_dir(ci_export: Path, where: Path, graphs: dict[str, Path]) -> Path:
    """An export directory as a user would hand it in: the CI export's config and tokenizer, ``graphs`` (relative
    name under onnx/ -> file to copy there)."""
    (where / "onnx").mkdir(parents=True)
    for f in ci_export.iterdir():
        if f.is_file() and f.name not in ("artifact.json", "export.json"):
            shutil.copy2(f, where / f.name)
    for name, src in graphs.items():
        shutil.copy2(src, where / "onnx" / name)
    return where


def onnx_spec(tmp_path: Path, model_id: str, directory: Path, dtypes: str = '["fp32", "q8"]'):
    path = tmp_path / f"{model_id}.toml"
    path.write_text(default_with(f'[[models]]\nid = "{model_id}"\ntier = "ci"\nsource = "onnx"\npath = "{directory}"\n'
                                 f'dtypes = {dtypes}\neval_context = 128\n'))
    return campaign_mod.load(path).models[0]


def test_a_users_copy_of_the_graphs_reuses_the_evaluations(tmp_path, models, behavior, ci_spec, ci_export):
    onnx_dir = ci_export / "onnx"
    spec = onnx_spec(tmp_path, "someone-elses", source_dir(ci_export, tmp_path / "theirs", {
        "model.onnx": onnx_dir / "model.onnx", "model_quantized.onnx": onnx_dir / ci_spec.graph_file("q8").split("/")[-1]}))
    for dtype in ("fp32", "q8"):
        mine, theirs = Variant(ci_spec, dtype), Variant(spec, dtype)
        (s_mine, k_mine), (s_theirs, k_theirs) = behavior.identity(mine), behavior.identity(theirs)
        assert k_mine == k_theirs, (s_mine, s_theirs)
        assert (s_mine["model"], s_theirs["model"]) == (ci_spec.id, "someone-elses")   # recorded, not keyed
        assert s_mine["path"] != s_theirs["path"]
        assert models.graph_content(mine) == models.graph_content(theirs)

    # a quantization-style evaluation of the user's pair: built once, then reused under the other name
    built = []

    def build(out, progress):
        built.append(1)
        (out / "seen.json").write_text(json.dumps({"built": True}))
        return {}

    def evaluate(model):
        return models.evaluation("content-key-test", [Variant(model, "fp32"), Variant(model, "q8")],
                                 {"probe": "test_evaluation_content_keys"}, [Path(__file__)], build, "content keys")

    first, second = evaluate(ci_spec), evaluate(spec)
    assert second.key == first.key and second.hit and len(built) <= 1


def test_the_q8_graph_under_the_fp32_name_is_the_q8_evaluation(tmp_path, behavior, ci_spec, ci_export):
    """The dtype a graph is called by does not key its evaluation; its bytes do."""
    q8_file = ci_export / "onnx" / ci_spec.graph_file("q8").split("/")[-1]
    spec = onnx_spec(tmp_path, "renamed", source_dir(ci_export, tmp_path / "renamed", {"model.onnx": q8_file}),
                     '["fp32"]')
    assert behavior.identity(Variant(spec, "fp32"))[1] == behavior.identity(Variant(ci_spec, "q8"))[1]
    assert behavior.identity(Variant(spec, "fp32"))[1] != behavior.identity(Variant(ci_spec, "fp32"))[1]


def test_one_changed_weight_byte_is_another_evaluation(tmp_path, models, behavior, ci_spec, ci_export):
    """The weights in external data (the graph file unchanged) key the evaluation too."""
    model = onnx.load(str(ci_export / "onnx" / "model.onnx"))
    big = max((t for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT),
              key=lambda t: np.prod(t.dims))
    name, arr = big.name, numpy_helper.to_array(big).copy()   # before saving: the save points it at the data file
    d = tmp_path / "external"
    source_dir(ci_export, d, {})
    onnx.save(model, str(d / "onnx" / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="model.onnx_data", size_threshold=0)
    spec = onnx_spec(tmp_path, "external", d, '["fp32"]')
    before_content, before_key = models.graph_content(Variant(spec, "fp32")), behavior.identity(Variant(spec, "fp32"))[1]
    assert set(before_content["data"]) == {"model.onnx_data"}

    # one weight changed in place in the data file: same graph bytes, other weights
    again = onnx.load(str(d / "onnx" / "model.onnx"), load_external_data=False)
    info = {e.key: e.value for e in next(t for t in again.graph.initializer if t.name == name).external_data}
    with open(d / "onnx" / "model.onnx_data", "r+b") as fh:
        fh.seek(int(info.get("offset") or 0))
        flat = arr.reshape(-1)
        flat[0] = flat[0] + np.float32(1.0)
        fh.write(flat[:1].tobytes())
    spec2 = onnx_spec(tmp_path, "external2", d, '["fp32"]')   # a new campaign load: nothing memoized for it
    after = models.graph_content(Variant(spec2, "fp32"))
    assert after["sha256"] == before_content["sha256"]
    assert after["data"]["model.onnx_data"]["sha256"] != before_content["data"]["model.onnx_data"]["sha256"]
    assert behavior.identity(Variant(spec2, "fp32"))[1] != before_key


def test_the_pytorch_reference_is_keyed_by_the_weights_not_the_model(tmp_path, models, behavior, ci_spec):
    """A Hugging Face directory with the CI model's files, handed in under another id, is the same reference and
    the same ORT-GenAI build."""
    hf = models.hf(ci_spec)
    copy = tmp_path / "hf-copy"
    copy.mkdir()
    for rel in hf.manifest["files"]:
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(hf.path / rel, copy / rel)
    path = tmp_path / "hf.toml"
    path.write_text(default_with(f'[[models]]\nid = "their-hf"\ntier = "ci"\nsource = "hf"\npath = "{copy}"\n'
                                 f'dtypes = ["fp32"]\neval_context = 128\n'))
    spec = campaign_mod.load(path).models[0]
    (s_mine, k_mine), (s_theirs, k_theirs) = behavior.identity(None, ci_spec), behavior.identity(None, spec)
    assert s_mine["hf_key"] != s_theirs["hf_key"]   # a store artifact against a directory read in place
    assert k_mine == k_theirs
    # ORT-GenAI's build of the same weights, too: one build (the CI tier's peer), not one per directory
    assert models.ortgenai(spec).path == models.ortgenai(ci_spec).path


def test_the_heldout_ids_are_stored_and_read_back_without_the_tokenizer(tmp_path, gatehouse, models, ci_spec,
                                                                        ci_export, monkeypatch):
    """The held-out ids are a stored artifact (kind ``heldout``): equal to what the tokenizer gives, read back by a
    process that never loads it (the cache and quantization gates' children import no transformers), and keyed by the
    tokenizer's files by content: the same files elsewhere are the same entry, a changed one another."""
    from harness import corpus
    from fixtures.models import Models

    ids = models.heldout_ids(ci_spec)
    assert ids == models.tokenizer(ci_spec)(corpus.read(models.campaign.corpus_heldout))["input_ids"]
    fresh = Models(gatehouse)

    def no_tokenizer(spec):
        raise AssertionError("the tokenizer was loaded")

    monkeypatch.setattr(fresh, "tokenizer", no_tokenizer)
    assert fresh.heldout_ids(ci_spec) == ids
    graph, _ = models.graph(Variant(ci_spec, "fp32"))
    copy = onnx_spec(tmp_path, "external", source_dir(ci_export, tmp_path / "copy", {"model.onnx": graph}),
                     '["fp32"]')
    assert fresh.tokenizer_files_sha256(copy) == models.tokenizer_files_sha256(ci_spec)
    assert fresh.heldout_ids(copy) == ids            # read from the same entry: the tokenizer is never loaded
    config = tmp_path / "copy" / "tokenizer_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "model_max_length": 12345}))
    changed = onnx_spec(tmp_path, "external2", tmp_path / "copy", '["fp32"]')
    assert fresh.tokenizer_files_sha256(changed) != models.tokenizer_files_sha256(ci_spec)
