"""The skill bundle (harness/overlay/bundle.py) in Python: written and read back whole, routed by the probe's rule
(every general subspace first, each group in skill-id order, the first smallest error wins), still an overlay to
every overlay reader, and refused field by field, each refusal naming the file and the field. The native probe
reads the same files: suites/harness/test_probe_routing.py."""

from __future__ import annotations

import hashlib
import json
import struct

import numpy as np
import pytest

from harness.overlay import bundle as bundles
from harness.overlay import fileformat, routing
from harness.overlay.fileformat import OverlayError
from harness.verdict import Measurement, Verdict

BACKBONE = hashlib.sha256(b"backbone graph").hexdigest()
FEATURE = bundles.Feature(layer=1, kv_heads=2, head_dim=4)   # dim 16


def _routing(rng, centre: float, rank: int = 3, prompts: int = 6) -> bundles.Routing:
    def side(c):
        return routing.fit(c + rng.normal(0, 1, (prompts, FEATURE.dim)), rank)
    fit = {s: {"fit_prompts": prompts, "prompt_tokens": 8, "prompts_sha256": hashlib.sha256(s.encode()).hexdigest(),
               "text": f"{s} text"} for s in bundles.SIDES}
    return bundles.Routing(FEATURE, {routing.GENERAL: side(0.0), routing.SKILL: side(centre)}, fit)


def _contract(skill: str, backbone: str = BACKBONE, **verdicts) -> dict:
    verdicts = verdicts or {"overlay_quality": Verdict.from_checks(
        [], {"domain_ppl_change": Measurement(-0.3, "fraction", 9)})}
    return bundles.contract(skill=skill, model="toy", dtype="fp32", backbone_sha256=backbone, verdicts=verdicts,
                            policies={k: {"limit": 1} for k in verdicts}, not_judged={"overlay_cost": "a timing"},
                            harness_sha256="a" * 64, suite_sha256=None, campaign_sha256="b" * 64,
                            onnxruntime="1.32.0", judged_at="2026-12-06T00:00:00+00:00")


def _overlay(tmp_path, name: str = "W", backbone: str = BACKBONE) -> fileformat.Overlay:
    path = tmp_path / f"{name}.overlay.safetensors"
    fileformat.write(path, {name: np.arange(12, dtype=np.float32).reshape(3, 4)},
                     {"backbone_sha256": backbone, "donor": "d"})
    return fileformat.read(path)


@pytest.fixture
def good(tmp_path):
    rng = np.random.default_rng(0)
    return bundles.write(tmp_path / "skill.bundle.safetensors", _overlay(tmp_path), "docs", _routing(rng, 5.0),
                         _contract("docs"))


def test_a_bundle_reads_back_whole_and_is_still_an_overlay(good):
    b = bundles.read(good.path, BACKBONE)
    assert b.skill == "docs" and b.routing.feature == FEATURE and b.contract == _contract("docs")
    assert set(b.overlay.tensors) == {"W"} and b.overlay.metadata["donor"] == "d"
    assert sorted(b.overlay.reserved) == [f"__routing__/{s}/{k}" for s in ("general", "skill")
                                          for k in ("basis", "mean")]
    for side in bundles.SIDES:
        s = b.routing.subspaces[side]
        assert s.rank == 3 and s.basis.shape == (3, 16) and np.allclose(s.basis @ s.basis.T, np.eye(3), atol=1e-6)
    assert b.routing.fit["skill"]["text"] == "skill text"
    plain = fileformat.read(good.path)            # OrtDecoder(overlay=bundle) and the probe's --overlay read this
    assert set(plain.tensors) == {"W"}


def test_choose_follows_the_probe_order_and_a_general_win_keeps_the_backbone(tmp_path):
    rng = np.random.default_rng(1)
    a = bundles.write(tmp_path / "a.safetensors", _overlay(tmp_path), "a", _routing(rng, 6.0), _contract("a"))
    b = bundles.write(tmp_path / "b.safetensors", _overlay(tmp_path), "b", _routing(rng, -6.0), _contract("b"))
    assert [n for n, _ in bundles.candidates([b, a])] == ["a/general", "b/general", "a/skill", "b/skill"]
    assert bundles.choose(np.full(16, 6.0), [a, b])[:2] == ("a", "a/skill")
    assert bundles.choose(np.full(16, -6.0), [b, a])[:2] == ("b", "b/skill")
    skill, name, errors = bundles.choose(np.zeros(16), [a, b])
    assert skill is None and name.endswith("/general")
    assert set(errors) == {"a/general", "b/general", "a/skill", "b/skill"}
    both = {"general": a.routing.subspaces["skill"], "skill": a.routing.subspaces["skill"]}
    same = bundles.write(tmp_path / "c.safetensors", _overlay(tmp_path), "c",
                         bundles.Routing(FEATURE, both, a.routing.fit), _contract("c"))
    assert bundles.choose(np.full(16, 6.0), [same])[:2] == (None, "c/general")   # a tie keeps the backbone


def test_bundles_routed_together_share_a_feature_and_have_distinct_skills(tmp_path, good):
    rng = np.random.default_rng(2)
    twin = bundles.write(tmp_path / "twin.safetensors", _overlay(tmp_path), "docs", _routing(rng, 1.0),
                         _contract("docs"))
    with pytest.raises(OverlayError, match=r"twin\.safetensors: __metadata__\.skill 'docs' is also the skill of "
                                           r".*skill\.bundle"):
        bundles.check_set([good, twin])
    other = bundles.Routing(bundles.Feature(2, 2, 4), _routing(rng, 1.0).subspaces, good.routing.fit)
    far = bundles.write(tmp_path / "far.safetensors", _overlay(tmp_path), "far", other, _contract("far"))
    with pytest.raises(OverlayError, match=r"far\.safetensors: __metadata__\.routing\.feature .* differs from"):
        bundles.check_set([good, far])
    with pytest.raises(OverlayError, match=r"__metadata__\.routing\.feature\.layer: 1 is out of 0\.\.0"):
        bundles.check_graph(good, 1, 2, 4)
    with pytest.raises(OverlayError, match=r"__metadata__\.routing\.feature: kv_heads 2, head_dim 4; the graph's cache "
                                           r"has 3 and 4"):
        bundles.check_graph(good, 3, 3, 4)


# -- refusals: each names the file and the field -------------------------------------------------------------------
def _header(path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def _rewrite(path, header: dict, data: bytes) -> None:
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def _edit_json(key: str, change):
    """A corruption of ``__metadata__.<key>`` (a JSON text): ``change(value)`` edits it in place."""
    def corrupt(path):
        header, data = _header(path)
        value = json.loads(header["__metadata__"][key])
        change(value)
        header["__metadata__"][key] = json.dumps(value)
        _rewrite(path, header, data)
    return corrupt


def _edit_meta(change):
    def corrupt(path):
        header, data = _header(path)
        change(header["__metadata__"])
        _rewrite(path, header, data)
    return corrupt


def _retensor(name: str, array):
    """The bundle rewritten with one routing tensor replaced (``None``: removed), the rest as written."""
    def corrupt(path):
        ov = fileformat.read(path)
        tensors = {**ov.tensors, **ov.reserved}
        full = fileformat.RESERVED + name
        if array is None:
            tensors.pop(full)
        else:
            tensors[full] = array
        fileformat.write(path, tensors, {k: v for k, v in ov.metadata.items() if k != "gatehouse_overlay"})
    return corrupt


def _truncate(path):
    path.write_bytes(path.read_bytes()[:-40])


BAD = [
    ("an overlay, not a bundle", _edit_meta(lambda m: m.pop("gatehouse_bundle")),
     "__metadata__.gatehouse_bundle: must be '1', got None: an overlay file, not a skill bundle"),
    ("no skill", _edit_meta(lambda m: m.update(skill="")), "__metadata__.skill: expected a non-empty string, got ''"),
    ("routing not JSON", _edit_meta(lambda m: m.update(routing="{feature")), "__metadata__.routing: is not JSON"),
    ("routing unknown key", _edit_json("routing", lambda r: r.update(extra=1)),
     "__metadata__.routing: unknown key(s) extra"),
    ("another feature", _edit_json("routing", lambda r: r["feature"].update(kind="hidden_mean")),
     "__metadata__.routing.feature.kind: expected one of present_value_mean_std, got 'hidden_mean'"),
    ("dim", _edit_json("routing", lambda r: r["feature"].update(dim=15)),
     "__metadata__.routing.feature.dim: expected 2 x kv_heads x head_dim = 16, got 15"),
    ("rank above the cap", _edit_json("routing", lambda r: r["subspaces"]["skill"].update(rank=9)),
     "__metadata__.routing.subspaces.skill.rank: must be <= 8, got 9"),
    ("rank above fit_prompts - 1", _edit_json("routing", lambda r: r["subspaces"]["skill"].update(fit_prompts=3)),
     "__metadata__.routing.subspaces.skill.rank: 3 is above fit_prompts - 1 = 2"),
    ("basis shape", _retensor("skill/basis", np.zeros((3, 15), np.float32)),
     "tensor '__routing__/skill/basis' is float32[3, 15], __metadata__.routing says float32[3, 16]"),
    ("basis dtype", _retensor("general/mean", np.zeros(16, np.float16)),
     "tensor '__routing__/general/mean' is float16[16], __metadata__.routing says float32[16]"),
    ("missing mean", _retensor("general/mean", None), "tensor '__routing__/general/mean' is missing"),
    ("not finite", _retensor("skill/mean", np.full(16, np.inf, np.float32)),
     "tensor '__routing__/skill/mean' holds a value that is not finite"),
    ("unknown routing tensor", _retensor("skill/scale", np.ones(16, np.float32)),
     "tensor '__routing__/skill/scale': not a routing tensor"),
    ("no contract", _edit_meta(lambda m: m.pop("contract")),
     "__metadata__.contract: missing: a skill bundle records it as a JSON text"),
    ("contract without gates", _edit_json("contract", lambda c: c.pop("gates")),
     "__metadata__.contract: missing required key 'gates'"),
    ("contract of another backbone", _edit_json("contract", lambda c: c.update(backbone_sha256="c" * 64)),
     f"__metadata__.contract.backbone_sha256: expected one of {BACKBONE}, got '{'c' * 64}'"),
    ("contract of another skill", _edit_json("contract", lambda c: c.update(skill="other")),
     "__metadata__.contract.skill: expected one of docs, got 'other'"),
    ("an outcome", _edit_json("contract", lambda c: c["gates"]["overlay_quality"].update(outcome="maybe")),
     "__metadata__.contract.gates.overlay_quality.outcome: expected one of pass, fail, got 'maybe'"),
    ("a pass with reasons", _edit_json("contract", lambda c: c["gates"]["overlay_quality"].update(reasons=["x"])),
     "__metadata__.contract.gates.overlay_quality.reasons: a pass verdict with 1 reason(s)"),
    ("a figure", _edit_json("contract", lambda c: c["gates"]["overlay_quality"]["figures"]["domain_ppl_change"]
                            .pop("unit")),
     "__metadata__.contract.gates.overlay_quality.figures.domain_ppl_change: missing required key 'unit'"),
    ("harness", _edit_json("contract", lambda c: c.update(harness_sha256="HEAD")),
     "__metadata__.contract.harness_sha256: expected a lowercase hex SHA-256, got 'HEAD'"),
    ("truncated", _truncate, "fall outside the"),
]


@pytest.mark.parametrize(("case", "corrupt", "message"), BAD, ids=[c for c, _, _ in BAD])
def test_a_bad_bundle_is_refused_naming_the_file_and_the_field(good, case, corrupt, message):
    corrupt(good.path)
    with pytest.raises(OverlayError) as err:
        bundles.read(good.path, BACKBONE)
    assert str(err.value).startswith(f"{good.path}: ") and message in str(err.value), str(err.value)
    print(err.value)


def test_a_bundle_for_another_backbone_is_refused_with_both_hashes(good):
    other = hashlib.sha256(b"another").hexdigest()
    with pytest.raises(OverlayError, match=rf"__metadata__\.backbone_sha256 is {BACKBONE}, but the backbone graph is "
                                           rf"{other}: this overlay was encoded for another backbone"):
        bundles.read(good.path, other)
