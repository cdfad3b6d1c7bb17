"""Every name a campaign gives is resolved when it loads: the models a policy declares verdicts for, the cells it
times, and held-out text that must not be in the training files.  Each refusal names the file, the field and the
value, before any artifact is built."""

import dataclasses
import re
from pathlib import Path

import pytest

from harness import campaign, corpus, gates
from harness.errors import CampaignError
from harness.start import default_with, only_models, without_model

from test_campaign_policies import DEFAULT, with_line

ROOT = Path(__file__).resolve().parents[2]
SHA = "a" * 64

# a line naming something the default campaign does not have, per (table, field) declared knob(refers=...)
REF_CASES = {
    ("winrule", "expected"): ('expected = { "smollm2" = "LOSS", "ci-tiny" = "LOSS" }',
                              r"policy\.winrule\.expected\.smollm2: names model id 'smollm2', which this campaign does "
                              r"not have \(its models: smollm2-135m, ci-tiny\)"),
    ("winrule", "cells"): ('cells = ["short", "middle"]',
                           r"policy\.winrule\.cells\[1\]: names throughput cell .* 'middle', which this campaign does "
                           r"not have \(its cells: short, long\)"),
    ("behavior", "slices"): ("slices = { ci-tiny = 40, ci-tiyn = 20 }",
                             r"policy\.behavior\.slices\.ci-tiyn: names model id 'ci-tiyn'"),
    ("throughput_browser", "diagnose"): ('diagnose = { ci-tiny = ["fp32"], ci-tiyn = ["fp32"] }',
                                         r"policy\.throughput_browser\.diagnose\.ci-tiyn: names model id 'ci-tiyn'"),
    ("behavior", "published"): (f'published = {{ smollm = {{ report = "r.json", sha256 = "{SHA}", '
                                f'graph_sha256 = "{SHA}" }} }}', r"policy\.behavior\.published\.smollm: names model id"),
}


def load(tmp_path, text):
    p = tmp_path / "c.toml"
    p.write_text(text)
    return campaign.load(p)


def _refers_fields():
    for name, spec in sorted(gates.GATES.items()):
        for f in dataclasses.fields(spec.policy):
            knob = f.metadata.get("gatehouse.knob")
            if knob and knob.refers:
                yield name, f.name


def test_every_field_that_names_something_has_a_refusal_case():
    """A gate that adds a ``knob(refers=...)`` field is listed here, so its refusal is tested."""
    assert set(_refers_fields()) == set(REF_CASES)


@pytest.mark.parametrize("table, key", sorted(REF_CASES))
def test_a_policy_naming_what_the_campaign_lacks_is_refused_at_load(table, key, tmp_path):
    line, message = REF_CASES[(table, key)]
    with pytest.raises(CampaignError, match=rf"^{re.escape(str(tmp_path))}/c\.toml: {message}"):
        load(tmp_path, with_line(table, line))


def test_a_cell_renamed_in_the_workload_is_followed_by_the_win_rule(tmp_path):
    text = with_line("throughput", "prompt_tokens = { short = 40, tall = 400 }")
    with pytest.raises(CampaignError, match=r"policy\.winrule\.cells\[1\]: names throughput cell .*'long'.* "
                                            r"\(its cells: short, tall\)"):
        load(tmp_path, text)
    assert load(tmp_path, with_line("winrule", 'cells = ["short", "tall"]', text)).policy["winrule"].cells == \
        ("short", "tall")


def test_a_campaign_for_other_models_keeps_only_their_entries(tmp_path):
    """``init`` and the suite's own campaigns write the default campaign for other models: the per-model tables
    keep only the models written (before, the default's two model ids were carried into every such campaign)."""
    text = without_model(DEFAULT, "smollm2-135m")
    assert 'expected = { "ci-tiny" = "LOSS" }' in text and "slices = { \"ci-tiny\" = 40 }" in text
    assert load(tmp_path, text).policy["winrule"].expected == {"ci-tiny": "LOSS"}
    ci = re.search(r'\[\[models\]\]\nid = "ci-tiny".*?(?=\n\[\[models\]\]|\n# )', DEFAULT, flags=re.S).group(0)
    text = default_with(ci.replace('id = "ci-tiny"', 'id = "mine"') + "\n")
    assert "expected = {}" in text and "slices = {}" in text and "diagnose = {}" in text
    assert load(tmp_path, text).policy["behavior"].slices == {}
    assert only_models('expected = { "a" = "WIN", "b" = "LOSS" }\n', {"b"}) == 'expected = { "b" = "LOSS" }\n'


def test_a_campaign_for_other_models_keeps_what_follows_the_donors(tmp_path):
    """Cutting a model's donors keeps the tables after them: ``[compare]`` stays (it once went with the last donor,
    and so did every table after it); the recipe grid (``[search]``, ``[[recipes]]`` and the findings about recipes)
    is the default models' and is left out on purpose, whichever model is cut."""
    from harness.start import tables

    assert "".join(tables(DEFAULT)) == DEFAULT
    ci = re.search(r'\[\[models\]\]\nid = "ci-tiny".*?(?=\n\[\[models\]\]|\n# )', DEFAULT, flags=re.S).group(0)
    for text in (without_model(DEFAULT, "smollm2-135m"), without_model(DEFAULT, "ci-tiny"), default_with(ci + "\n"),
                 default_with(ci.replace('id = "ci-tiny"', 'id = "mine"') + "\n")):
        assert "[compare]\nalpha = 0.01" in text and "session_spread = 0.30" in text
        assert "[[recipes]]" not in text and "[search]" not in text and 'dtype = "q4-kquant-b32"' not in text
        # read, not defaulted: the value is changed here and must arrive
        assert load(tmp_path, text.replace("session_spread = 0.30", "session_spread = 0.31")).compare.session_spread \
            == 0.31
    assert without_model(DEFAULT, "ci-tiny").count("[[overlay.donors]]") == 1
    assert 'model = "smollm2-135m"' in without_model(DEFAULT, "ci-tiny")


# -- held-out text is never trained on ------------------------------------------------------------------------------

def _corpus(tmp_path, train: dict[str, str], heldout: dict[str, str], extra: str = "") -> str:
    import hashlib

    def pins(files):
        out = []
        for name, body in files.items():
            f = tmp_path / name
            f.write_text(body)
            out.append(f'{{ path = "{f}", sha256 = "{hashlib.sha256(body.encode()).hexdigest()}" }}')
        return "[" + ", ".join(out) + "]"
    block = f"[corpus]\ntrain = {pins(train)}\nheldout = {pins(heldout)}\n{extra}"
    return re.sub(r"\[corpus\]\n.*?(?=\n\[export\])", block, DEFAULT, count=1, flags=re.S)


LINES = [f"line number {i} of a text long enough to be compared" for i in range(40)]


def test_held_out_lines_found_in_training_files_are_refused_naming_both(tmp_path):
    train = {"a.txt": "\n".join(LINES[:20]), "b.txt": "\n".join(LINES[20:30])}
    held = "\n".join([*LINES[30:], "LINE   number 3 of a text LONG enough to be compared  ", LINES[25], "short"])
    with pytest.raises(CampaignError, match=r"corpus\.heldout\[0\]: .*h\.txt shares 2 of its 12 compared lines with "
                                            r"corpus\.train \(a\.txt 1, b\.txt 1; .*more than corpus\.shared_lines\.max "
                                            r"= 0: held-out text must never be trained on"):
        load(tmp_path, _corpus(tmp_path, train, {"h.txt": held}))
    allowed = 'shared_lines = { max = 2, why = "two lines of boilerplate" }\n'
    assert load(tmp_path, _corpus(tmp_path, train, {"h.txt": held}, allowed)).corpus_heldout


def test_a_held_out_file_that_is_a_training_file_is_refused(tmp_path):
    text = _corpus(tmp_path, {"a.txt": "\n".join(LINES)}, {"h.txt": "\n".join(LINES)},
                   'shared_lines = { max = 100, why = "x" }\n')
    with pytest.raises(CampaignError, match=r"corpus\.heldout\[0\]: .*h\.txt is also corpus\.train\[0\] .*a\.txt"):
        load(tmp_path, text)


@pytest.mark.parametrize("value, message", [
    ("{ max = 3 }", r"corpus\.shared_lines: missing required key 'why'"),
    ('{ max = -1, why = "x" }', r"corpus\.shared_lines\.max: must be >= 0, got -1"),
    ('{ max = 1, why = "" }', r"corpus\.shared_lines\.why: expected a non-empty string"),
])
def test_the_allowance_needs_a_count_and_a_reason(value, message, tmp_path):
    text = _corpus(tmp_path, {"a.txt": LINES[0]}, {"h.txt": LINES[1]}, f"shared_lines = {value}\n")
    with pytest.raises(CampaignError, match=message):
        load(tmp_path, text)


def test_the_default_corpus_declares_exactly_the_overlap_it_has():
    c = campaign.load(ROOT / "campaigns" / "default.toml")
    texts = {f.path.name: f.path.read_text() for f in c.corpus_train}
    n, shared, per = corpus.shared_lines(texts, c.corpus_heldout[0].path.read_text())
    assert (n, shared) == (537, 31) and per["GPL-1"] == 20
    assert "shared_lines = { max = 31," in DEFAULT
