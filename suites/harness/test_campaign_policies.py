"""Every policy table is parsed by its gate's declared policy when the campaign loads: a typo or a wrong
type fails at once, naming the file, the field and the value, before any artifact is built."""

import re
from pathlib import Path

import pytest

from harness import campaign, gates
from harness.errors import CampaignError

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = (ROOT / "campaigns" / "default.toml").read_text().replace(
    'suite = "../harness', f'suite = "{ROOT}/harness')

# one wrong value per policy table: (table, key = value, what the error must say)
BAD_VALUES = {
    "cache": ("steps = \"eight\"", r"policy\.cache\.steps: expected an integer, got 'eight'"),
    "quantization": ("max_tokens = 10", r"policy\.quantization\.max_tokens: must be >= 100, got 10"),
    "behavior": ("agreement_tokens = \"eight\"", r"policy\.behavior\.agreement_tokens: expected an integer"),
    "behavior_calibration": ("max_false_fail = 1.5",
                             r"policy\.behavior_calibration\.max_false_fail: .*1\.5"),
    "throughput": ("repeats = \"five\"", r"policy\.throughput\.repeats: expected an integer, got 'five'"),
    "throughput_native": ("require_parity_dtypes = [\"fp64\"]",
                          r"policy\.throughput_native\.require_parity_dtypes\[0\]: expected one of .*got 'fp64'"),
    "throughput_python": ("require_parity_dtypes = \"fp32\"",
                          r"policy\.throughput_python\.require_parity_dtypes: expected a list of strings"),
    "peer_ortgenai": ("require_parity_dtypes = [1]", r"policy\.peer_ortgenai\.require_parity_dtypes\[0\]"),
    "peer_llamacpp": ("require_parity_dtypes = [\"q3\"]", r"policy\.peer_llamacpp\.require_parity_dtypes\[0\]"),
    "peer_wllama": ("require_parity_dtypes = [\"q5\"]", r"policy\.peer_wllama\.require_parity_dtypes\[0\]"),
    "throughput_browser": ("thread_probe = { threads = \"one\" }",
                           r"policy\.throughput_browser\.thread_probe\.threads: expected an integer, got 'one'"),
    "step_latency": ("rounds = 0", r"policy\.step_latency\.rounds: must be >= 1, got 0"),
    "throughput_goal": ("vs_llamacpp = \"fast\"", r"policy\.throughput_goal\.vs_llamacpp: expected a finite number"),
    "winrule": ("repeats = \"five\"", r"policy\.winrule\.repeats: expected an integer, got 'five'"),
    "streaming": ("max_rtf = \"low\"", r"policy\.streaming\.max_rtf: expected a finite number, got 'low'"),
    "training": ("max_heldout_after_over_before = 2.0",
                 r"policy\.training\.max_heldout_after_over_before: must be <= 1\.0, got 2\.0"),
    "export": ("anything = 1", r"policy\.export: unknown key\(s\) anything"),
    "overlay_delta": ("min_delta = 2.0", r"policy\.overlay_delta\.min_delta: must be <= 1\.0, got 2\.0"),
    "overlay_quality": ("context = 2", r"policy\.overlay_quality\.context: must be >= 8, got 2"),
    "overlay_cost": ("min_token_ms = -1", r"policy\.overlay_cost\.min_token_ms: .*-1"),
    "overlay_routing": ("rank = 9",
                        r"policy\.overlay_routing\.rank: must be <= 8 \(the selection subspace's rank cap\), got 9"),
    "overlay_behavior": ("margins = { \"greedy.agreement\" = 2.0 }",
                         r"policy\.overlay_behavior\.margins\.greedy\.agreement: must be <= 1\.0, got 2\.0"),
}


def with_line(table: str, line: str, text: str = DEFAULT) -> str:
    """``text`` (the default campaign) with ``line`` set in ``[policy.<table>]`` (replacing the key's line if the
    table has it, the table created when absent)."""
    header = f"[policy.{table}]\n"
    if header not in text:
        return text + "\n" + header + line + "\n"
    start = text.index(header) + len(header)
    end = next((m.start() for m in re.finditer(r"^\[", text[start:], flags=re.M)), len(text) - start) + start
    body, key = text[start:end], line.split("=")[0].strip()
    body, n = re.subn(rf"^{re.escape(key)} = .*$", line, body, count=1, flags=re.M)
    return text[:start] + (body if n else line + "\n" + body) + text[end:]


def load(tmp_path, text):
    p = tmp_path / "c.toml"
    p.write_text(text)
    return p, campaign.load(p)


def test_every_policy_table_has_a_bad_value_case():
    assert set(BAD_VALUES) <= set(gates.GATES) | set(campaign.SHARED_POLICIES)
    assert set(campaign.SHARED_POLICIES) <= set(BAD_VALUES)   # a gate's fields are covered below, whatever its name


def _campaign_fields():
    """(table, field) for every campaign key of every registered gate's policy: a gate added later is covered
    with no edit here."""
    import dataclasses

    for name, spec in sorted(gates.GATES.items()):
        for f in dataclasses.fields(spec.policy):
            knob = f.metadata.get("gatehouse.knob")
            if f.init and not (knob and knob.internal):
                yield name, f.name


@pytest.mark.parametrize("table, key", list(_campaign_fields()))
def test_a_wrong_shape_in_any_policy_field_is_refused_naming_it(table, key):
    """The default campaign's table with one field replaced by an inline table holding a list, the wrong shape for
    every field type (a number, a string, a list, a table of numbers, a nested table): the error names the field,
    whatever the gate."""
    import tomllib

    from harness.fields import Where

    raw = dict(tomllib.loads(DEFAULT)["policy"].get(table, {}))
    raw[key] = {"bogus": []}
    with pytest.raises(CampaignError, match=rf"^c\.toml: policy\.{table}\.{key}\b"):
        gates.GATES[table].policy.parse(raw, Where("c.toml", f"policy.{table}"))


@pytest.mark.parametrize("table", sorted(BAD_VALUES))
def test_a_wrong_value_names_file_field_and_value(table, tmp_path):
    line, message = BAD_VALUES[table]
    with pytest.raises(CampaignError, match=message) as exc:
        load(tmp_path, with_line(table, line))
    assert str(exc.value).startswith(str(tmp_path / "c.toml"))


@pytest.mark.parametrize("table", sorted(BAD_VALUES))
def test_an_unknown_key_names_the_table_and_the_key(table, tmp_path):
    with pytest.raises(CampaignError, match=rf"c\.toml: policy\.{table}: unknown key\(s\) reapeats"):
        load(tmp_path, with_line(table, "reapeats = 5"))


def test_an_unknown_policy_table_is_refused(tmp_path):
    with pytest.raises(CampaignError, match=r"policy: unknown key\(s\) cachee"):
        load(tmp_path, DEFAULT + "\n[policy.cachee]\nsteps = 1\n")


def test_an_expectation_must_name_a_registered_gate(tmp_path):
    text = DEFAULT.replace('gate = "cache"\ndtype = "ort-genai-int4"', 'gate = "cahce"\ndtype = "ort-genai-int4"')
    with pytest.raises(CampaignError, match=r"expect\[0\]\.gate: unknown gate 'cahce'"):
        load(tmp_path, text)


def test_the_default_campaign_parses_into_typed_policies(tmp_path):
    _, c = load(tmp_path, DEFAULT)
    assert set(c.policy) == set(gates.GATES) | {"throughput"}
    assert c.policy["winrule"].repeats == 5 and c.policy["winrule"].expected["smollm2-135m"] == "LOSS"
    assert c.policy["cache"].tolerance_for("ort-genai-int4") == c.policy["cache"].tolerance["q4"]
    assert c.policy["quantization"].limit_for("q8") == 0.03
    assert dict(c.workload.prompt_tokens) == {"short": 40, "long": 400}
    assert c.policy["throughput_goal"].vs_llamacpp == 1.3
    for name, spec in gates.GATES.items():   # every parsed policy is its gate's declared class
        assert isinstance(c.policy[name], spec.policy), name


def test_a_missing_required_table_is_named(tmp_path):
    text = re.sub(r"\[policy\.quantization\].*?(?=\n# The fixed throughput)", "", DEFAULT, flags=re.S)
    text = text.replace("[policy.quantization.max_relative_increase]\nq8 = 0.03\nq4 = 0.10\n", "")
    with pytest.raises(CampaignError, match=r"policy\.quantization: missing table"):
        load(tmp_path, text)


def test_a_bad_policy_stops_pytest_before_any_artifact_is_built(pytester, tmp_path, monkeypatch):
    pytester.makefile(".toml", campaign=with_line("winrule", 'repeats = "five"'))
    pytester.makepyfile(test_any="def test_nothing():\n    pass\n")
    cache, runs = tmp_path / "artifacts", tmp_path / "run"
    monkeypatch.setenv("GATEHOUSE_LOCK_DIR", str(tmp_path / "locks"))
    result = pytester.runpytest_subprocess("--campaign", "campaign.toml", "--run-dir", str(runs),
                                           "--artifact-cache", str(cache))
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*campaign.toml: policy.winrule.repeats: expected an integer, got 'five'*"])
    assert not runs.exists() and not cache.exists()


@pytest.mark.parametrize("line, message", [
    ('model_max_repeats = { ci-tiny = 3 }', r"policy\.throughput\.model_max_repeats\.ci-tiny: 3 is below repeats \(5\)"),
    ('model_max_repeats = { ci-tiyn = 5 }',
     r"policy\.throughput\.model_max_repeats\.ci-tiyn: names model id 'ci-tiyn', which this campaign does not have"),
    ('model_max_repeats = { ci-tiny = "five" }', r"policy\.throughput\.model_max_repeats\.ci-tiny: expected an integer"),
])
def test_a_models_own_repeat_bound_is_checked_when_the_campaign_loads(line, message, tmp_path):
    with pytest.raises(CampaignError, match=message):
        load(tmp_path, with_line("throughput", line))


def test_a_models_own_repeat_bound_reaches_its_workload_only(tmp_path):
    from harness import workload

    _, c = load(tmp_path, with_line("throughput", "model_max_repeats = { ci-tiny = 7 }"))
    ids = list(range(500))
    assert workload.build(ids, c.workload, model_id="ci-tiny").max_repeats == 7
    assert workload.build(ids, c.workload, model_id="smollm2-135m").max_repeats == c.workload.max_repeats == 15
    assert workload.build(ids, c.workload, model_id="ci-tiny").sha256 != workload.build(ids, c.workload).sha256


@pytest.mark.parametrize("line, message", [
    ('diagnose = { ci-tiny = ["fp16"] }', r"policy\.throughput_browser\.diagnose\.ci-tiny.*'fp16'"),
    ('diagnose = { ci-tiny = "fp32" }', r"policy\.throughput_browser\.diagnose\.ci-tiny: expected a non-empty list"),
    ('diagnose = { ci-tiny = [] }', r"policy\.throughput_browser\.diagnose\.ci-tiny: expected a non-empty list"),
])
def test_which_dtypes_a_model_diagnoses_is_checked_when_the_campaign_loads(line, message, tmp_path):
    with pytest.raises(CampaignError, match=message):
        load(tmp_path, with_line("throughput_browser", line))


def test_the_ci_model_diagnoses_its_fp32_graph_only_and_recipes_never(tmp_path):
    """The default campaign's browser diagnostics (the ort-web lane's one-thread probe and profiles): every fixed
    dtype of SmolLM2, the CI model's fp32 graph alone (its diagnostics check the machinery), never a recipe."""
    policy = load(tmp_path, DEFAULT)[1].policy["throughput_browser"]
    assert policy.diagnose == {"ci-tiny": ("fp32",)}
    assert [d for d in ("fp32", "q8", "q4") if policy.diagnosed("smollm2-135m", d)] == ["fp32", "q8", "q4"]
    assert [d for d in ("fp32", "q8", "q4") if policy.diagnosed("ci-tiny", d)] == ["fp32"]
    assert not policy.diagnosed("smollm2-135m", "q4", recipe="q4-gptq-b32")
