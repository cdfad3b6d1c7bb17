"""``bin/gatehouse init`` and ``campaign --model``'s options (harness/start.py): ``--hf DIR`` (an onnx export's
Hugging Face weights, checked), ``--browser LIST`` (what ships to the browser), ``--cases N`` (the behavior suite's slice), ``--peers`` / ``--no-peers`` (other
tools' builds: opt-in for an onnx export), each written into the campaign and read back when it loads; and the
campaign init writes says only what holds for the model it was given (no [export] table for an onnx export, no
comment about the default campaign's models). The export is a copy of the CI model's own (the CI tier's, from
the artifact store), its weights the CI model's Hugging Face directory."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from harness import campaign as campaign_mod
from harness import gates, start
from harness.domain import PEER_GENAI, PEER_GENAI_BEST, Variant
from harness.errors import CampaignError
from harness.start import default_with

ROOT = Path(__file__).resolve().parents[2]
GENAI = (PEER_GENAI, PEER_GENAI_BEST)
DEFAULT_MODELS = ("smollm2", "ci-tiny", "ci model", "gguf")   # what the default campaign's comments speak of


@pytest.fixture(scope="module")
def ci_model(models, campaign):
    return next(m for m in campaign.models if m.tier == "ci")


@pytest.fixture
def export(models, ci_model, tmp_path) -> Path:
    """A user's export directory: the CI export's fp32 and q8 graphs, its config and tokenizer (no weights)."""
    graph, _ = models.graph(Variant(ci_model, "fp32"))
    d = tmp_path / "mine"
    (d / "onnx").mkdir(parents=True)
    for f in graph.parent.parent.iterdir():
        if f.is_file() and f.name not in ("artifact.json", "export.json"):
            shutil.copy2(f, d / f.name)
    for name in ("model.onnx", "model_quantized.onnx"):
        shutil.copy2(graph.parent / name, d / "onnx" / name)
    return d


@pytest.fixture
def weights(models, ci_model) -> Path:
    return models.hf(ci_model).path


def init(tmp_path: Path, capsys, *args: str):
    """Run ``init`` (harness.start.main) into a file and load what it wrote: (exit code, campaign, text, stderr)."""
    out = tmp_path / "my.toml"
    out.unlink(missing_ok=True)
    code = start.main([*map(str, args), "--out", str(out)])
    err = capsys.readouterr().err
    if code:
        assert not out.exists()
        return code, None, None, err
    return code, campaign_mod.load(out), out.read_text(), err


def peer_variants(model) -> list[str]:
    """The peer graphs the plugin would parametrize the gates over for ``model``."""
    return sorted({v.dtype for spec in gates.GATES.values() for v in gates.targets(spec, model) if v.peer})


def comments(text: str) -> str:
    """The campaign's comment lines as one line (init wraps them)."""
    return " ".join(line[2:] for line in text.splitlines() if line.startswith("# "))


def names_a_default_model(text: str) -> list[str]:
    return [line for line in text.lower().splitlines() if any(name in line for name in DEFAULT_MODELS)]


@pytest.mark.ci
def test_an_onnx_export_gets_no_export_table_no_peers_and_no_comment_about_the_default_models(export, tmp_path,
                                                                                             capsys):
    code, c, text, _ = init(tmp_path, capsys, export)
    assert code == 0
    spec = c.models[0]
    assert spec.source == "onnx" and spec.peers == () and not spec.has_weights
    assert "\n[export]" not in text and c.export == {}
    assert not names_a_default_model(text), names_a_default_model(text)
    assert "peers = []" in text and "# graphs found: fp32 = onnx/model.onnx, q8 = onnx/model_quantized.onnx" in text
    assert "no Hugging Face weights given (--hf DIR) or beside the graphs: the fp32 behavior gate is skipped" \
        in comments(text)
    assert "Gatehouse exports nothing from it, so this campaign has no [export] table" in comments(text)
    assert spec.browser == ("fp32",) and 'browser = ["fp32"]' in text
    assert not c.expect and peer_variants(spec) == []


@pytest.mark.ci
def test_hf_names_the_weights_and_the_peers_stay_opt_in(export, weights, tmp_path, capsys):
    code, c, text, _ = init(tmp_path, capsys, export, "--hf", weights)
    spec = c.models[0]
    assert code == 0 and spec.hf_path == weights and spec.has_weights
    assert f'hf = "{weights}"' in text and spec.peers == ()
    assert peer_variants(spec) == [] and not c.expect   # weights alone build no peer: no -k "not ort-genai" needed
    code, c, text, _ = init(tmp_path, capsys, export, "--hf", weights, "--peers")
    spec = c.models[0]
    assert code == 0 and spec.peers == GENAI and 'peers = ["ort-genai-int4", "ort-genai-kquant"]' in text
    assert peer_variants(spec) == sorted(GENAI)
    # the peers' known finding (the default campaign's, naming no model) comes with them, and names no default model
    assert sorted(e["dtype"] for e in c.expect) == sorted(GENAI) and all("model" not in e for e in c.expect)
    assert not names_a_default_model(text), names_a_default_model(text)


@pytest.mark.ci
def test_a_bad_hf_is_refused_by_name(export, weights, tmp_path, capsys):
    nowhere = tmp_path / "nowhere"
    empty = tmp_path / "empty"
    empty.mkdir()
    other = tmp_path / "other"
    shutil.copytree(weights, other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "num_hidden_layers": config["num_hidden_layers"] + 1}))
    bare = tmp_path / "bare"
    shutil.copytree(weights, bare)
    for f in bare.glob("*.safetensors"):
        f.unlink()
    layers = config["num_hidden_layers"]
    for hf, said in ((nowhere, f"--hf: {nowhere} does not exist or is not a directory"),
                     (empty, f"--hf: {empty} has no config.json (a Hugging Face model directory has one)"),
                     (bare, f"--hf: {bare} has no weights (*.safetensors or pytorch_model*.bin)"),
                     (other, f"--hf: {other / 'config.json'} is not the model of {export / 'config.json'} "
                             f"(layers {layers + 1} against {layers})")):
        code, _, _, err = init(tmp_path, capsys, export, "--hf", hf)
        assert code == 2 and f"gatehouse init: {said}" in err, err
    code, _, _, err = init(tmp_path, capsys, export, "--peers")   # nothing to build a peer from
    assert code == 2 and "gatehouse init: --peers: no peer can be built for this model" in err, err
    code, _, _, err = init(tmp_path, capsys, weights, "--hf", weights)   # an hf source is its own weights
    assert code == 2 and f"gatehouse init: --hf: only an onnx export takes Hugging Face weights beside it; {weights} " \
        "is source hf" in err, err


@pytest.mark.ci
def test_browser_writes_what_ships_to_the_browser(export, tmp_path, capsys):
    for given, shipped in (("fp32,q8", ("fp32", "q8")), ("q8", ("q8",)), ("none", ())):
        code, c, text, _ = init(tmp_path, capsys, export, "--browser", given)
        assert code == 0 and c.models[0].browser == shipped, text
        assert "chosen with --browser" in comments(text)
    code, _, _, err = init(tmp_path, capsys, export, "--browser", "fp32,q4")   # this export has no q4 graph
    assert code == 2 and "gatehouse init: --browser: 'q4' is not a variant of this model (its dtypes: fp32, q8)" in err


@pytest.mark.ci
def test_cases_writes_the_behavior_slice(export, tmp_path, capsys):
    code, c, text, _ = init(tmp_path, capsys, export)
    assert code == 0 and c.policy["behavior"].slices == {}, text   # the whole suite unless asked
    code, c, text, _ = init(tmp_path, capsys, export, "--cases", "12")
    assert code == 0 and c.policy["behavior"].slices == {c.models[0].id: 12}, text
    for bad in ("0", "-3", "a few"):
        with pytest.raises(SystemExit):
            init(tmp_path, capsys, export, "--cases", bad)
        assert f"--cases: expected a positive whole number of cases per category, got {bad!r}" in \
            capsys.readouterr().err


@pytest.mark.ci
def test_an_hf_source_keeps_its_peers_and_its_export_settings_unless_told_no_peers(weights, tmp_path, capsys):
    default = campaign_mod.load(ROOT / "campaigns" / "default.toml")
    code, c, text, _ = init(tmp_path, capsys, weights)
    spec = c.models[0]
    assert code == 0 and spec.source == "hf" and spec.peers == GENAI and peer_variants(spec) == sorted(GENAI)
    assert "\n[export]" in text and c.export == default.export
    assert not names_a_default_model(text), names_a_default_model(text)
    code, c, text, _ = init(tmp_path, capsys, weights, "--no-peers")
    spec = c.models[0]
    assert code == 0 and spec.peers == () and peer_variants(spec) == [] and not c.expect
    assert "left out by --no-peers" in comments(text)


def _hf_dir(tmp_path: Path) -> Path:
    d = tmp_path / "hf"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                                               "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100}))
    (d / "model.safetensors").write_bytes(b"x")
    (d / "tokenizer.json").write_text("{}")
    return d


@pytest.mark.parametrize("value, peers, problem", [
    ("false", (), None),
    ("true", None, None),
    ('["ort-genai-kquant"]', ("ort-genai-kquant",), None),
    ('["gguf"]', None, "c.toml: model 'mine'.peers[0]: 'gguf' is not a peer this model can have (the original GGUF "
                       "under llama.cpp); its source's peers: ort-genai-int4, ort-genai-kquant"),
    ('["ort-genai"]', None, "c.toml: model 'mine'.peers[0]: expected one of ort-genai-int4, ort-genai-kquant, gguf, "
                            "got 'ort-genai'"),
    ('"none"', None, "c.toml: model 'mine'.peers: expected a list of strings, got 'none'"),
])
def test_the_peers_key_is_read_when_the_campaign_loads(tmp_path, value, peers, problem):
    path = tmp_path / "c.toml"
    path.write_text(default_with(f'[[models]]\nid = "mine"\ntier = "ci"\nsource = "hf"\npath = "{_hf_dir(tmp_path)}"\n'
                                 f'dtypes = ["fp32"]\npeers = {value}\n'))
    if problem:
        with pytest.raises(CampaignError) as e:
            campaign_mod.load(path)
        assert problem in str(e.value), str(e.value)
        return
    spec = campaign_mod.load(path).models[0]
    assert spec.peers == peers
    assert peer_variants(spec) == sorted(GENAI if peers is None else peers)


def test_the_default_campaign_keeps_every_peer():
    c = campaign_mod.load(ROOT / "campaigns" / "default.toml")
    smollm2 = c.model("smollm2-135m")
    assert smollm2.peers is None and peer_variants(smollm2) == sorted([*GENAI, "gguf-q4_1"])


def test_campaign_model_help_shows_the_init_options(tmp_path):
    out = subprocess.run([str(ROOT / "bin" / "gatehouse"), "campaign", "--model", str(tmp_path), "--help"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    for option in ("--hf DIR", "--browser LIST", "--cases N", "--peers", "--no-peers", "every other argument goes to pytest"):
        assert option in out.stdout, out.stdout
