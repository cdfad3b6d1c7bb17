"""The ``onnx`` source opens its graphs at the door (harness/sources/onnx_graph.py): a graph Gatehouse cannot
measure is refused when the campaign loads and by ``init``, naming the campaign file, the graph and the input,
output or tensor at fault, before anything is built. Each case edits a copy of the CI model's real export (the
CI tier's own, from the artifact store); the binder itself (OrtDecoder) refuses each edited graph too, and the
untouched export loads with its weights inside the graph or beside it."""

import re
import shutil
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from harness import campaign as campaign_mod
from harness import start
from harness.domain import Variant
from harness.errors import ArtifactError, CampaignError
from harness.runtime import OrtDecoder
from harness.sources import onnx_graph
from harness.start import default_with

pytestmark = pytest.mark.ci
GRAPHS = ("model.onnx", "model_quantized.onnx")   # fp32, q8


@pytest.fixture(scope="module")
def ci_export(models, campaign) -> Path:
    """The CI model's export directory (config.json, tokenizer, onnx/), built once per machine by the CI tier."""
    spec = next(m for m in campaign.models if m.tier == "ci")
    graph, _ = models.graph(Variant(spec, "fp32"))
    return graph.parent.parent


@pytest.fixture
def export(ci_export, tmp_path) -> Path:
    """A user's export directory: a copy of the CI export's fp32 and q8 graphs, its config and tokenizer."""
    d = tmp_path / "mine"
    (d / "onnx").mkdir(parents=True)
    for f in ci_export.iterdir():
        if f.is_file() and f.name not in ("artifact.json", "export.json"):
            shutil.copy2(f, d / f.name)
    for name in GRAPHS:
        shutil.copy2(ci_export / "onnx" / name, d / "onnx" / name)
    return d


def campaign_for(tmp_path: Path, d: Path) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(default_with(f'[[models]]\nid = "mine"\ntier = "ci"\nsource = "onnx"\npath = "{d}"\n'
                                 f'dtypes = ["fp32", "q8"]\neval_context = 128\n'))
    return path


def refused(tmp_path: Path, d: Path, capsys) -> tuple[str, str]:
    """(campaign.load's message, init's): both must refuse the directory."""
    with pytest.raises(CampaignError) as e:
        campaign_mod.load(campaign_for(tmp_path, d))
    capsys.readouterr()
    assert start.main([str(d)]) == 2
    out = capsys.readouterr()
    assert not out.out, out.out[:300]
    return str(e.value), out.err


def to_external_data(graph: Path) -> Path:
    """Rewrite ``graph`` with its weights in ``<graph>.data`` beside it (as ORT-GenAI and optimum write them)."""
    model = onnx.load(str(graph))
    onnx.save(model, str(graph), save_as_external_data=True, all_tensors_to_one_file=True,
              location=graph.name + ".data", size_threshold=1024)
    return graph.with_name(graph.name + ".data")


def test_the_real_export_is_accepted_with_its_weights_inside_or_beside(export, tmp_path, capsys):
    spec = campaign_mod.load(campaign_for(tmp_path, export)).models[0]
    assert dict(spec.graphs) == {"fp32": "onnx/model.onnx", "q8": "onnx/model_quantized.onnx"}
    assert start.main([str(export)]) == 0 and 'source = "onnx"' in capsys.readouterr().out
    data = to_external_data(export / "onnx" / "model.onnx")
    assert data.stat().st_size > 100_000
    campaign_mod.load(campaign_for(tmp_path, export))
    assert start.main([str(export)]) == 0


def test_a_truncated_graph_is_refused_naming_it(export, tmp_path, capsys):
    g = export / "onnx" / "model.onnx"
    whole = g.read_bytes()
    g.write_bytes(whole[:len(whole) // 2])
    msg, init = refused(tmp_path, export, capsys)
    assert f"c.toml: model 'mine'.graphs.fp32: {g}: not a readable ONNX graph ({len(whole) // 2} bytes: truncated" \
        in msg, msg
    assert f"gatehouse init: {g}: not a readable ONNX graph" in init, init
    with pytest.raises(ArtifactError):
        OrtDecoder(g)


@pytest.mark.parametrize("damage", ["missing", "shorter"])
def test_external_data_missing_or_shorter_than_recorded_is_refused_naming_the_tensor(export, tmp_path, capsys,
                                                                                    damage):
    g = export / "onnx" / "model.onnx"
    data = to_external_data(g)
    whole = data.read_bytes()
    if damage == "missing":
        data.unlink()
        found = re.escape(f"{g}: tensor '") + r"[^']+" + re.escape("' keeps its data in model.onnx.data, which does "
                                                                   f"not exist ({data})")
    else:
        data.write_bytes(whole[:-4096])
        found = (re.escape(f"{g}: tensor '") + r"[^']+' needs bytes \d+\.\.\d+ of model\.onnx\.data, which has "
                 + re.escape(f"{len(whole) - 4096} bytes ({data}: truncated"))
    msg, init = refused(tmp_path, export, capsys)
    assert re.search(re.escape("c.toml: model 'mine'.graphs.fp32: ") + found, msg), msg
    assert re.search("gatehouse init: " + found, init), init
    with pytest.raises(ArtifactError):
        OrtDecoder(g)


def without_past(model: onnx.ModelProto) -> None:
    """The cache inputs become empty constants (batch 1, no past): the graph stays valid, with no cache to feed."""
    past = [vi for vi in model.graph.input if vi.name.startswith("past_key_values.")]
    for vi in past:
        dims = [d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim]
        dims[2] = 0
        model.graph.initializer.append(helper.make_tensor(vi.name, vi.type.tensor_type.elem_type, dims, []))
        model.graph.input.remove(vi)


def renamed_logits(model: onnx.ModelProto) -> None:
    for node in model.graph.node:
        node.output[:] = ["next_logits" if o == "logits" else o for o in node.output]
    next(o for o in model.graph.output if o.name == "logits").name = "next_logits"


def extra_input(model: onnx.ModelProto) -> None:
    model.graph.input.append(helper.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [1]))


@pytest.mark.parametrize("edit, dtype, problem", [
    (without_past, "q8", "no past key/value inputs (inputs: input_ids, attention_mask{positions}); Gatehouse decodes "
                         "with a KV cache (past_key_values.N.key/value in, present.N.key/value out)"),
    (renamed_logits, "fp32", "no output logits (outputs: next_logits, present.0..{last}.key/value); Gatehouse reads "
                             "the next token's scores from logits"),
    (extra_input, "fp32", "cannot bind input(s) use_cache_branch: a decoder graph takes input_ids, attention_mask, "
                          "optional position_ids and past_key_values.N.key/value"),
], ids=["no-past-inputs", "logits-renamed", "input-it-cannot-fill"])
def test_a_graph_that_cannot_bind_is_refused_naming_the_graph_and_the_input(export, tmp_path, capsys, edit, dtype,
                                                                            problem):
    g = export / "onnx" / dict(zip(("fp32", "q8"), GRAPHS))[dtype]
    model = onnx.load(str(g))
    inputs = [vi.name for vi in model.graph.input]
    layers = sum(n.startswith("past_key_values.") for n in inputs) // 2
    edit(model)
    assert onnx_graph.checker_problem(model) is None   # still valid: what refuses it is the binding rule
    onnx.save(model, str(g))
    problem = problem.format(positions=", position_ids" if "position_ids" in inputs else "", last=layers - 1)
    msg, init = refused(tmp_path, export, capsys)
    assert f"c.toml: model 'mine'.graphs.{dtype}: {g}: {problem}" in msg, msg
    assert f"gatehouse init: {g}: {problem}" in init, init
    with pytest.raises(ArtifactError):   # the binder agrees: the rule at the door is the one a fixture meets
        OrtDecoder(g)
