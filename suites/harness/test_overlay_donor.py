"""Donors for skill overlays (harness/overlay/donor.py): families, layers, the [overlay] table, the pinned
domain text, and real training on the CI model (seeded, deterministic, only the chosen tensors move)."""

import json
import tomllib
from pathlib import Path

import pytest

from harness import corpus
from harness.errors import ArtifactError, CampaignError
from harness.fields import Where
from harness.overlay import donor, donor_training

ROOT = Path(__file__).resolve().parents[2]
WHERE = Where("campaigns/x.toml", "overlay.donors[0].layers")


def shipped_overlay() -> dict:
    return tomllib.loads((ROOT / "campaigns" / "default.toml").read_text())["overlay"]


# -- families and layers -----------------------------------------------------------------------------
def test_families_name_the_hf_tensors():
    assert donor.FAMILIES["all"] == donor.FAMILIES["ffn"] + donor.FAMILIES["attn"]
    assert donor.parse_family("attn", WHERE) == "attn"
    for bad in ("mlp", "FFN", "", None, 1):
        with pytest.raises(CampaignError) as e:
            donor.parse_family(bad, Where("campaigns/x.toml", "overlay.donors[0].families"))
        assert "campaigns/x.toml: overlay.donors[0].families" in str(e.value) and repr(bad) in str(e.value)


@pytest.mark.parametrize("spec, layers", [
    ("all", (0, 1, 2, 3)), ("1-2", (1, 2)), ("2-2", (2,)), ("3,0", (0, 3)), ("2", (2,)), (" 0 - 1 ", (0, 1)),
    ("0, 2", (0, 2)),
])
def test_parse_layers_accepts_all_ranges_and_lists(spec, layers):
    assert donor.parse_layers(spec, 4, WHERE) == layers


@pytest.mark.parametrize("spec, problem", [
    ("4", "layer 4 is out of range (the model has 4 layers, 0-3)"),
    ("2-4", "layer 4 is out of range"),
    ("0,9", "layer 9 is out of range"),
    ("3-1", "the range is reversed (3 > 1)"),
    ("", "expected layers as"),
    ("  ", "expected layers as"),
    (None, "expected layers as"),
    (2, "expected layers as"),
    ("1,,2", "malformed layers '1,,2'"),
    ("-1", "malformed layers '-1'"),
    ("1-2-3", "malformed layers '1-2-3'"),
    ("0-1,3", "malformed layers '0-1,3'"),
    ("first", "malformed layers 'first'"),
    ("1.5", "malformed layers '1.5'"),
    ("1,1", "layer 1 is named twice"),
])
def test_parse_layers_refuses_naming_file_field_and_value(spec, problem):
    with pytest.raises(CampaignError) as e:
        donor.parse_layers(spec, 4, WHERE)
    assert str(e.value).startswith("campaigns/x.toml: overlay.donors[0].layers: ")
    assert problem in str(e.value)


def test_tensor_names_are_state_dict_names_layer_by_layer():
    assert donor.tensor_names("ffn", (2, 0)) == [
        "model.layers.2.mlp.gate_proj.weight", "model.layers.2.mlp.up_proj.weight", "model.layers.2.mlp.down_proj.weight",
        "model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight"]
    assert donor.tensor_names(("attn", "all"), (1,)) == donor.tensor_names("all", (1,))[3:] + donor.tensor_names("ffn", (1,))
    assert len(donor.tensor_names("all", range(3))) == 21
    with pytest.raises(ValueError, match="unknown tensor family 'mlp'"):
        donor.tensor_names("mlp", (0,))


# -- the [overlay] table and the domain text ------------------------------------------------------------
def test_the_shipped_overlay_table_parses_and_its_domain_text_is_pinned_apart_from_the_heldout_text():
    where = Where(ROOT / "campaigns" / "default.toml", "overlay")
    cfg = donor.parse_overlay_table(shipped_overlay(), where, ROOT / "campaigns", ("ci-tiny", "smollm2-135m"))
    assert {d.model for d in cfg.donors} == {"ci-tiny", "smollm2-135m"}
    assert [d.objective for d in cfg.donors_of("ci-tiny")] == ["domain"]   # the damage donor lives in a suite test
    train = donor.read_domain(cfg.domain_train, cfg.domain_package)
    heldout = donor.read_domain(cfg.domain_heldout, cfg.domain_package)
    general = tomllib.loads((ROOT / "campaigns" / "default.toml").read_text())["corpus"]
    pinned = {f["sha256"] for f in general["train"] + general["heldout"]}
    assert not pinned & {f.sha256 for f in cfg.domain_train + cfg.domain_heldout}
    assert len(train) > 100_000 and len(heldout) > 50_000 and heldout not in train
    ident = donor.domain_identity(cfg.domain_train, cfg.domain_package)
    assert ident["package"] == "torch" and ident["package_version"].startswith("2.13.0")
    # the donor's key names the text by content: the installed path names the venv, which differs per clone
    key = donor.domain_key(cfg.domain_train, cfg.domain_package)
    assert key == {**ident, "files": [{"file": f["file"], "sha256": f["sha256"]} for f in ident["files"]]}
    assert all(f["path"].endswith(f["file"]) for f in ident["files"])


def _table(**changes) -> dict:
    raw = {"domain_package": "torch",
           "domain_train": [{"file": "torch/_torch_docs.py", "sha256": "a" * 64}],
           "domain_heldout": [{"path": "texts/held.txt", "sha256": "b" * 64}],
           "donors": [{"id": "d", "model": "ci-tiny"}]}
    raw.update(changes)
    return raw


@pytest.mark.parametrize("changes, problem", [
    ({"domain_heldout": [{"file": "torch/_torch_docs.py", "sha256": "a" * 64}]},
     "overlay.domain_heldout: the file with SHA-256 aaaa"),
    ({"domain_package": None, "domain_heldout": [{"file": "x.py", "sha256": "b" * 64}]},
     "overlay.domain_train[0].file: 'torch/_torch_docs.py' names a file inside a package"),
    ({"domain_train": [{"file": "a", "path": "b", "sha256": "a" * 64}]}, "overlay.domain_train[0]: expected exactly one"),
    ({"domain_train": [{"file": "a", "sha256": "A" * 64}]}, "overlay.domain_train[0].sha256: expected a lowercase hex"),
    ({"domain_train": []}, "overlay.domain_train: expected a non-empty list"),
    ({"heldout": []}, "overlay: unknown key(s) heldout"),
    ({"donors": [{"id": "d", "model": "gpt-9"}]}, "overlay.donors[0].model: unknown model id 'gpt-9'"),
    ({"donors": [{"id": "d", "model": "ci-tiny", "families": "mlp"}]}, "overlay.donors[0].families: unknown tensor family 'mlp'"),
    ({"donors": [{"id": "d", "model": "ci-tiny", "layers": "2-1"}]}, "overlay.donors[0].layers: layers '2-1': the range is reversed"),
    ({"donors": [{"id": "d", "model": "ci-tiny", "objective": "harm"}]}, "overlay.donors[0].objective: expected one of domain, damage"),
    ({"donors": [{"id": "d", "model": "ci-tiny", "replay_rows": 8}]}, "overlay.donors[0].replay_rows: must be below batch_size 8"),
    ({"donors": [{"id": "d", "model": "ci-tiny", "steps": 0}]}, "overlay.donors[0].steps: must be >= 1"),
    ({"donors": [{"id": "d", "model": "ci-tiny"}, {"id": "d", "model": "ci-tiny", "layers": "0"}]},
     "overlay.donors: donor 'd' of model 'ci-tiny' is declared twice"),
])
def test_overlay_table_refusals_name_file_field_and_value(changes, problem):
    raw = _table(**{k: v for k, v in changes.items() if v is not None})
    if changes.get("domain_package", "") is None:
        del raw["domain_package"]
    with pytest.raises(CampaignError) as e:
        donor.parse_overlay_table(raw, Where("campaigns/x.toml", "overlay"), Path("/c"), ("ci-tiny",))
    assert str(e.value).startswith("campaigns/x.toml: ") and problem in str(e.value)


def test_overlay_table_resolves_paths_from_the_campaign_directory_and_layers_later():
    cfg = donor.parse_overlay_table(_table(), Where("x.toml", "overlay"), Path("/c"))
    assert cfg.domain_heldout[0].path == Path("/c/texts/held.txt") and cfg.donors[0].layers == "all"
    assert cfg.donors[0].families == "ffn" and cfg.donors[0].objective == "domain"


def test_domain_text_refuses_a_changed_file_a_missing_package_and_an_unshipped_file(tmp_path):
    f = tmp_path / "domain.txt"
    f.write_text("some text")
    with pytest.raises(ArtifactError, match=f"{f}: domain text SHA-256 [0-9a-f]{{64}} differs from the campaign's pin b+"):
        donor.read_domain([donor.DomainFile("b" * 64, path=f)], None)
    with pytest.raises(ArtifactError, match="domain package 'no-such-dist' is not installed"):
        donor.read_domain([donor.DomainFile("b" * 64, file="x.py")], "no-such-dist")
    with pytest.raises(ArtifactError, match=r"package 'torch' 2\.13\.0\S* does not ship 'torch/_no_docs\.py'"):
        donor.read_domain([donor.DomainFile("b" * 64, file="torch/_no_docs.py")], "torch")


# -- real training on the CI model ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ci_hf(models, campaign):
    return models.hf(next(m for m in campaign.models if m.source == "train")).path


@pytest.fixture(scope="module")
def domain():
    cfg = donor.parse_overlay_table(shipped_overlay(), Where("default.toml", "overlay"), ROOT / "campaigns")
    return donor.read_domain(cfg.domain_train, cfg.domain_package), donor.read_domain(cfg.domain_heldout, cfg.domain_package)


def _tensors(path: Path) -> dict:
    from safetensors.numpy import load_file

    return load_file(str(path / "model.safetensors"))


@pytest.mark.slow
def test_a_ci_donor_learns_the_domain_deterministically_and_moves_only_its_tensors(tmp_path, ci_hf, domain, campaign):
    train, heldout = domain
    kwargs = dict(families="ffn", layers=(1, 2), steps=30, lr=1e-3, seq_len=64, batch_size=8, seed=campaign.seed,
                  threads=campaign.threads, replay_text=corpus.read(campaign.corpus_train), replay_rows=4,
                  evaluate={"domain_heldout": heldout}, eval_tokens=2048, log_every=5)
    first = donor_training.train_donor(ci_hf, tmp_path / "a", train, **kwargs)
    second = donor_training.train_donor(ci_hf, tmp_path / "b", train, **kwargs)

    assert first["loss_last"] < first["loss_first"] - 0.5, first["loss_curve"]
    assert first["eval"]["domain_heldout"]["after"] < first["eval"]["domain_heldout"]["before"] - 0.3
    assert first["tensors"] == donor.tensor_names("ffn", (1, 2)) and first["replay"]["rows_per_batch"] == 4
    assert json.loads((tmp_path / "a" / "donor.json").read_text())["loss_curve"] == first["loss_curve"]
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (ci_hf / "tokenizer.json").read_bytes()

    backbone, a, b = _tensors(ci_hf), _tensors(tmp_path / "a"), _tensors(tmp_path / "b")
    assert a.keys() == b.keys() == backbone.keys()
    assert all((a[k] == b[k]).all() for k in a), "the same seed gave different donors"
    changed = sorted(k for k in a if not (a[k] == backbone[k]).all())
    assert changed == sorted(first["tensors"])
    assert all(v > 0 for v in first["relative_delta"].values())


@pytest.mark.slow
def test_a_damage_donor_raises_general_heldout_loss(tmp_path, ci_hf, domain, campaign):
    record = donor_training.train_donor(ci_hf, tmp_path / "d", domain[0], families="ffn", layers=(0, 1, 2), steps=40,
                                        lr=3e-3, seq_len=64, batch_size=8, seed=campaign.seed, threads=campaign.threads,
                                        objective="damage", evaluate={"general": corpus.read(campaign.corpus_heldout)},
                                        eval_tokens=2048)
    general = record["eval"]["general"]
    assert general["after"] > general["before"] * 1.25, general


def test_train_donor_refuses_a_tensor_the_backbone_lacks(tmp_path, ci_hf, domain):
    with pytest.raises(ArtifactError, match=rf"{ci_hf}: the backbone has no tensor model\.layers\.7\.mlp\.gate_proj\.weight"):
        donor_training.train_donor(ci_hf, tmp_path / "x", domain[0], families="ffn", layers=(7,), steps=1, lr=1e-3,
                                   seq_len=32, seed=0)
