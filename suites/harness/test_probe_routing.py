"""Routing at serve time in the native probe (``--bundle``) on the CI model's fp32 graph, between two bundles and the
general subspace: held-out prompts of each skill's text go to that skill's bundle and general prompts mostly to
the backbone; the probe's φ equals Python's (OrtDecoder) to float tolerance and its every choice is Python's
(:func:`harness.overlay.bundle.choose`); the chosen overlay is applied (the probe's ids are Python's with that
bundle as an overlay); and a corrupt bundle is refused by the probe and by Python, each naming the file and the
field.

The two bundles: ``torch-docs`` (the campaign's CI donor; its skill subspace from the campaign's domain text) and
``minjs`` (the tensors of a donor trained to damage general text, ``objective = "damage"``, whose effect on the
ids is plain to see; its skill subspace from minified JavaScript the pinned playwright wheel ships, a text that
reads nothing like the docs or the licenses). Tensors and routing text are unrelated on purpose: this tests the
routing and the applying, not the skill."""

from __future__ import annotations

import hashlib
import json
import struct

import numpy as np
import pytest

from harness import corpus, gates
from harness.domain import Variant
from harness.evidence import overlay_routing as evidence_mod
from harness.overlay import bundle as bundles
from harness.overlay import donor as donors
from harness.overlay import fileformat, routing
from harness.overlay.fileformat import OverlayError
from harness.runtime import OrtDecoder
from harness.throughput import probe

pytestmark = [pytest.mark.native, pytest.mark.ci]
PROMPTS, TOKENS, NEW = 32, 64, 4
MINJS = ("playwright", [donors.DomainFile(file="playwright/driver/package/lib/vite/htmlReport/report.js",
                                          sha256="1b5c5d6a5a192d029bb78f9d4fb9b06daf3625a6ffb1d9f87ac10faf03132843")],
         [donors.DomainFile(file="playwright/driver/package/lib/vite/traceViewer/assets/xtermModule-Cv6bi7od.js",
                            sha256="d9711a3d5b304fccf3252a2e6b7d471b5a9903ab61ae265a7afec9166e17991c")])
DAMAGE = donors.DonorSpec(id="damage", model="ci-tiny", objective="damage", families="ffn", layers="all", steps=100,
                          lr=3e-3, seq_len=128, batch_size=8, replay_rows=0)


@pytest.fixture(scope="module")
def binary():
    return probe.ensure_built()


@pytest.fixture(scope="module")
def setup(models, campaign, tmp_path_factory):
    ci = next(m for m in campaign.models if m.source == "train")
    variant = Variant(ci, "fp32")
    graph, identity = models.graph(variant)
    decoder = OrtDecoder(graph, campaign.threads)
    layer = campaign.policy["overlay_routing"].layer_of(decoder.n_layers)
    tok = models.tokenizer(ci)

    def windows(text: str) -> list[tuple[int, ...]]:
        return routing.windows(tok(text, add_special_tokens=False, verbose=False)["input_ids"], PROMPTS, TOKENS)

    ov = campaign.overlay
    fit = {"general": windows(corpus.read(campaign.corpus_train)),
           "torch-docs": windows(donors.read_domain(ov.domain_train, ov.domain_package)),
           "minjs": windows(donors.read_domain(MINJS[1], MINJS[0]))}
    judge = {"general": windows(corpus.read(campaign.corpus_heldout)),
             "torch-docs": windows(donors.read_domain(ov.domain_heldout, ov.domain_package)),
             "minjs": windows(donors.read_domain(MINJS[2], MINJS[0]))}
    spaces = {k: routing.fit(evidence_mod.features(decoder, w, layer), 8) for k, w in fit.items()}
    feature = bundles.Feature(layer, decoder.kv_heads, decoder.head_dim)
    root = tmp_path_factory.mktemp("bundles")
    min_delta = campaign.policy["overlay_delta"].min_delta
    made = {}
    for skill, donor_spec in (("torch-docs", ov.donors_of(ci.id)[0]), ("minjs", DAMAGE)):
        path, record = models.overlay(variant, donor_spec, min_delta)
        delta = gates.get("overlay_delta")
        contract = bundles.contract(
            skill=skill, model=ci.id, dtype="fp32", backbone_sha256=identity["sha256"],
            verdicts={delta.name: delta.decide(delta.evidence.pick(record), campaign.policy[delta.name])},
            policies={delta.name: campaign.policy[delta.name].as_dict()}, not_judged={}, harness_sha256="0" * 64,
            suite_sha256=None, campaign_sha256=campaign.sha256, onnxruntime="test", judged_at="2026-12-06")
        fitted = {s: {"fit_prompts": PROMPTS, "prompt_tokens": TOKENS, "prompts_sha256": "0" * 64, "text": s}
                  for s in bundles.SIDES}
        made[skill] = bundles.write(root / f"{skill}.bundle.safetensors", fileformat.read(path), skill,
                                    bundles.Routing(feature, {"general": spaces["general"], "skill": spaces[skill]},
                                                    fitted), contract)
    return {"graph": graph, "sha": identity["sha256"], "decoder": decoder, "layer": layer, "judge": judge,
            "bundles": made, "root": root, "threads": campaign.threads}


@pytest.fixture(scope="module")
def routed(setup, binary):
    b = setup["bundles"]
    return evidence_mod.probe_routes(binary, setup["graph"], [b["torch-docs"].path, b["minjs"].path], setup["judge"],
                                     setup["threads"], new_tokens=NEW, with_phi=True)


def test_the_probe_routes_each_text_to_its_bundle_and_general_text_to_the_backbone(setup, routed):
    load = routed["load"]
    assert [x["skill"] for x in load["bundles"]] == ["torch-docs", "minjs"] and load["overlay"] is None
    assert load["routing"]["subspaces"] == ["minjs/general", "torch-docs/general", "minjs/skill", "torch-docs/skill"]
    assert load["routing"]["layer"] == setup["layer"] and load["routing"]["output"] == f"present.{setup['layer']}.value"
    chosen = {side: [r["bundle"] for r in rs] for side, rs in routed["routes"].items()}
    counts = {side: {k: c.count(k) for k in ("torch-docs", "minjs", None)} for side, c in chosen.items()}
    print(counts)
    assert counts["torch-docs"]["torch-docs"] >= 0.9 * PROMPTS, counts
    assert counts["minjs"]["minjs"] >= 0.9 * PROMPTS, counts
    assert counts["general"][None] >= 0.85 * PROMPTS, counts
    for rs in routed["routes"].values():
        for r in rs:
            assert r["route_ms"] >= r["prefill_ms"] > 0 and set(r["errors"]) == set(load["routing"]["subspaces"])


def test_the_probe_phi_and_choice_are_pythons(setup, routed):
    listed = list(setup["bundles"].values())
    worst = 0.0
    for side, rs in routed["routes"].items():
        for prompt, r in zip(setup["judge"][side], rs):
            phi = evidence_mod.phi(setup["decoder"], prompt, setup["layer"])
            assert np.allclose(r["phi"], phi, rtol=1e-5, atol=1e-6), (side, np.max(np.abs(np.asarray(r["phi"]) - phi)))
            worst = max(worst, float(np.max(np.abs(np.asarray(r["phi"]) - phi))))
            skill, name, errors = bundles.choose(np.asarray(r["phi"]), listed)
            assert (skill, name) == (r["bundle"], r["subspace"])
            assert all(np.isclose(errors[k], r["errors"][k], rtol=1e-9) for k in errors)
    print(f"largest |probe phi - python phi|: {worst:.3g}")


def test_the_chosen_overlay_is_applied(setup, routed):
    """For the first prompt routed to each bundle and to the backbone, the probe's ids are Python's greedy ids with
    that bundle read as an overlay (its routing tensors left aside) or with none."""
    seen = {}
    for side, rs in routed["routes"].items():
        for prompt, r in zip(setup["judge"][side], rs):
            seen.setdefault(r["bundle"], (prompt, r["generated_ids"]))
    assert set(seen) == {"torch-docs", "minjs", None}
    ids = {}
    for skill, (prompt, got) in seen.items():
        overlay = setup["bundles"][skill].path if skill else None
        want, _ = OrtDecoder(setup["graph"], setup["threads"], overlay=overlay).greedy(list(prompt), NEW - 1)
        assert got == want, skill
        ids[skill] = got
    prompt = seen["minjs"][0]
    backbone, _ = OrtDecoder(setup["graph"], setup["threads"]).greedy(list(prompt), NEW - 1)
    assert ids["minjs"] != backbone, "the damaging overlay changed nothing: it was not applied"


# -- refusals: the probe and Python name the file and the field --------------------------------------------------
def _rewrite(src, dst, edit_header=None, cut: int = 0, tensors=None):
    raw = src.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    if tensors is not None:
        ov = fileformat.read(src)
        fileformat.write(dst, {**ov.tensors, **ov.reserved, **tensors},
                         {k: v for k, v in ov.metadata.items() if k != "gatehouse_overlay"})
        return
    if edit_header:
        edit_header(header)
    text = json.dumps(header).encode()
    dst.write_bytes((struct.pack("<Q", len(text)) + text + data)[:len(text) + 8 + len(data) - cut])


def _meta_json(key, change):
    def edit(header):
        value = json.loads(header["__metadata__"][key])
        change(value)
        header["__metadata__"][key] = json.dumps(value)
    return edit


def _cases(setup):
    """(case, writer(dst), words both refusals name beside the file, words the probe's names, Python's)."""
    good = setup["bundles"]["torch-docs"].path
    dim = 2 * setup["decoder"].kv_heads * setup["decoder"].head_dim
    other = hashlib.sha256(b"another backbone").hexdigest()

    def backbone(h):
        h["__metadata__"]["backbone_sha256"] = other
    return [
        ("basis-shape", lambda d: _rewrite(good, d, tensors={"__routing__/skill/basis": np.zeros((8, dim - 1),
                                                                                                 np.float32)}),
         ["tensor '__routing__/skill/basis'"], [f"F32 [8, {dim - 1}], __metadata__.routing says F32 [8, {dim}]"],
         [f"float32[8, {dim - 1}], __metadata__.routing says float32[8, {dim}]"]),
        ("truncated", lambda d: _rewrite(good, d, cut=64), ["truncated or corrupt"], ["overrun the data"],
         ["fall outside"]),
        ("backbone", lambda d: _rewrite(good, d, backbone),
         ["__metadata__.backbone_sha256", other, setup["sha"], "another backbone"], [], []),
        ("layer", lambda d: _rewrite(good, d, _meta_json("routing", lambda r: r["feature"].update(layer=9))),
         ["__metadata__.routing.feature.layer", "9 is out of 0..2"], [], []),
        ("contract", lambda d: _rewrite(good, d, _meta_json("contract", lambda c: c.update(skill="minjs"))),
         ["__metadata__.contract.skill"], ["expected \"torch-docs\", got \"minjs\""],
         ["expected one of torch-docs, got 'minjs'"]),
        ("not-a-bundle", lambda d: _rewrite(good, d, lambda h: h["__metadata__"].pop("gatehouse_bundle")),
         ["__metadata__.gatehouse_bundle", "an overlay file, not a skill bundle"], [], []),
    ]


def _python_refusal(path, setup):
    b = bundles.read(path, fileformat.graph_sha256(setup["graph"]))
    bundles.check_graph(b, setup["decoder"].n_layers, setup["decoder"].kv_heads, setup["decoder"].head_dim)


def test_a_corrupt_bundle_is_refused_by_the_probe_and_by_python_naming_the_file_and_the_field(setup, binary):
    for case, write, words, probe_words, python_words in _cases(setup):
        path = setup["root"] / f"bad-{case}.safetensors"
        write(path)
        with pytest.raises(probe.ProbeError) as err:
            probe.ProbeProcess(binary, setup["graph"], 1, max_seq=128, bundles=(setup["bundles"]["minjs"].path, path))
        with pytest.raises(OverlayError) as py:
            _python_refusal(path, setup)
        for msg, own in ((str(err.value), probe_words), (str(py.value), python_words)):
            assert f"{path}: " in msg, (case, msg)
            for w in words + own:
                assert w in msg, (case, w, msg)
        assert "load error (exit 3)" in str(err.value)
        print(f"{case}\n  probe:  {err.value}\n  python: {py.value}")
    assert fileformat.graph_sha256(setup["graph"]) == setup["sha"]


def test_the_probe_refuses_two_bundles_of_one_skill_and_a_bundle_with_an_overlay(setup, binary):
    good = setup["bundles"]["torch-docs"].path
    twin = setup["root"] / "twin.safetensors"
    twin.write_bytes(good.read_bytes())
    with pytest.raises(probe.ProbeError, match=rf"{twin}: __metadata__\.skill 'torch-docs' is also the skill of "
                                               rf"{good}"):
        probe.ProbeProcess(binary, setup["graph"], 1, max_seq=128, bundles=(good, twin))
    with pytest.raises(probe.ProbeError, match=r"--overlay and --bundle exclude each other"):
        probe.ProbeProcess(binary, setup["graph"], 1, max_seq=128, overlay=good, bundles=(good,))
