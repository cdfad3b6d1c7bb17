"""The behavior suite loader, checkers, sampler and parity rule on recorded evidence."""

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from harness.behavior import DEFAULT_SUITE, checkers, evaluate, generate, suite as suites
from harness.errors import EvidenceError, ScenarioError
from harness.behavior import rates
from harness.gates import behavior as rule

GOOD = """schema_version = 1
name = "t"
version = "1"
[[cases]]
id = "a"
category = "format"
prompt = "Answer yes or no. Is fire hot?"
checker = "yes_no"
expected = "yes"
[[cases]]
id = "b"
category = "stopping"
prompt = "Say hi."
checker = "stops"
max_new_tokens = 8
"""


def write(tmp_path, text, name="s.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def render_chars(messages):
    return [ord(c) % 97 for c in messages[-1]["content"]]


def test_shipped_suite_loads_and_hash_is_stable():
    s = suites.load(DEFAULT_SUITE)
    assert len(s.cases) >= 20 and {"format", "factual", "arithmetic", "stopping"} <= set(s.categories)
    a = suites.render(s, render_chars, 4096, "t")
    b = suites.render(suites.load(DEFAULT_SUITE), render_chars, 4096, "t")
    assert a.sha256 == b.sha256
    assert suites.render(s, render_chars, 4096, "other-template").sha256 != a.sha256


def test_unknown_checker_names_file_and_case(tmp_path):
    p = write(tmp_path, GOOD.replace('checker = "yes_no"', 'checker = "vibes"'))
    with pytest.raises(ScenarioError, match=r"s\.toml: case 'a' .*unknown checker 'vibes'"):
        suites.load(p)


def test_duplicate_case_id_is_refused(tmp_path):
    p = write(tmp_path, GOOD.replace('id = "b"', 'id = "a"'))
    with pytest.raises(ScenarioError, match=r"s\.toml: case 'a' \(cases\[1\]\): duplicated case id"):
        suites.load(p)


def test_wrong_expected_type_is_refused(tmp_path):
    p = write(tmp_path, GOOD.replace('expected = "yes"', "expected = 3"))
    with pytest.raises(ScenarioError, match="yes_no.*needs a non-empty str"):
        suites.load(p)


def test_prompt_longer_than_context_is_refused_before_any_model(tmp_path):
    s = suites.load(write(tmp_path, GOOD))
    with pytest.raises(ScenarioError, match=r"case 'a': rendered prompt is 30 tokens; with max_new_tokens 24 it "
                                            r"exceeds the model's context of 40"):
        suites.render(s, render_chars, 40, "t")


def test_changing_a_budget_changes_the_suite_hash(tmp_path):
    a = suites.render(suites.load(write(tmp_path, GOOD)), render_chars, 4096, "t")
    b = suites.render(suites.load(write(tmp_path, GOOD.replace("max_new_tokens = 8", "max_new_tokens = 9"), "b.toml")),
                      render_chars, 4096, "t")
    assert a.sha256 != b.sha256


@pytest.mark.parametrize("checker,text,expected,ok", [
    ("yes_no", "Yes.", "yes", True), ("yes_no", "No, it is not.", "no", False), ("yes_no", "yes", "no", False),
    ("single_word", "Blue.", ["blue"], True), ("single_word", "It is blue", ["blue"], False),
    ("number", " 12.", 12, True), ("number", "The answer is 12", 12, False), ("number", "13", 12, False),
    ("json_keys", '{"name": "Ana", "age": 30}', ["name", "age"], True),
    ("json_keys", '```json\n{"color": "red"}\n```', ["color"], True),
    ("json_keys", '{"name": "Ana"', ["name"], False), ("json_keys", "[1]", ["name"], False),
    ("contains", "The capital is Paris.", ["paris"], True), ("contains", "Parisian", ["paris"], False),
])
def test_checkers(checker, text, expected, ok):
    assert checkers.CHECKERS[checker].check(text, expected, {"stopped": True, "repetition": False}) is ok


def test_stops_needs_eos_and_no_loop():
    c = checkers.CHECKERS["stops"].check
    assert c("Hi.", None, {"stopped": True, "repetition": False})
    assert not c("Hi.", None, {"stopped": False, "repetition": False})
    assert not c("Hi.", None, {"stopped": True, "repetition": True})
    assert checkers.runaway_repetition([1, 2, 3, 4] * 3) and not checkers.runaway_repetition(list(range(40)))
    assert checkers.garbage("a\ufffdb") and not checkers.garbage("line\nnext")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-80, 80).map(lambda v: v / 4), min_size=2, max_size=50), st.floats(0, 0.999999),
       st.integers(1, 60), st.floats(0.05, 1.0))
def test_sampler_properties(logits, u, top_k, top_p):
    x = np.asarray(logits)
    t = generate.sample(x, u, 0.7, top_k, top_p)
    order = np.lexsort((np.arange(len(x)), -x))
    assert t in order[:min(top_k, len(x))]                      # never outside the top-k
    assert generate.sample(x, u, 0.7, 1, top_p) == int(order[0])  # top-k 1 is greedy
    assert generate.sample(x, u, 0.7, top_k, top_p) == t         # deterministic in (logits, u)
    assert generate.sample(x + 3.0, u, 0.7, top_k, top_p) == t   # shift-invariant


def test_case_rng_is_shared_across_backends_and_distinct_across_cases():
    a, b = generate.case_rng(7, "x").random(5), generate.case_rng(7, "x").random(5)
    assert np.array_equal(a, b) and not np.array_equal(a, generate.case_rng(7, "y").random(5))


class ListBackend:
    """A scripted backend for the generator's own error paths (not a model)."""

    def __init__(self, rows):
        self.rows, self.i = [np.asarray(r, float) for r in rows], 0

    def start(self, ids):
        self.i = 0
        return self.rows[0]

    def step(self, token):
        self.i += 1
        return self.rows[self.i]


def test_generate_stops_on_eos_and_reports_budget():
    c = generate.Contract(1, 0.7, 40, 0.9, (0,))
    ids, stopped = generate.generate(ListBackend([[0, 5, 1], [0, 1, 5], [9, 0, 0]]), [1], 5, c, "greedy", "x")
    assert ids == [1, 2] and stopped
    ids, stopped = generate.generate(ListBackend([[0, 5, 1], [0, 1, 5]]), [1], 2, c, "greedy", "x")
    assert ids == [1, 2] and not stopped
    with pytest.raises(EvidenceError, match="non-finite logits"):
        generate.generate(ListBackend([[0, math.nan, 1]]), [1], 2, c, "greedy", "x")


def report(rates, suite_sha="s" * 64, contract=None):
    counts = {k: {"numerator": n, "denominator": d} for k, (n, d) in rates.items()}
    return {"status": "complete", "suite_sha256": suite_sha, "contract": contract or {"seed": 1},
            "rates": {k: n / d for k, (n, d) in rates.items()}, "rate_counts": counts}


POLICY = rates.MarginRule(margin=0.1, minimum=("greedy.format",), maximum=("greedy.empty",))


def test_rule_passes_within_margin_and_fails_beyond():
    ref = report({"greedy.format": (8, 10), "greedy.empty": (1, 10)})
    assert rates.decide(ref, report({"greedy.format": (7, 10), "greedy.empty": (2, 10)}), POLICY).passed
    v = rates.decide(ref, report({"greedy.format": (6, 10), "greedy.empty": (3, 10)}), POLICY)
    assert not v.passed and len(v.reasons) == 2
    assert "below reference 0.8000 - margin 0.1" in v.reasons[0] and "above reference 0.1000 + margin 0.1" in v.reasons[1]


def test_rule_refuses_different_suite_contract_and_denominators():
    ref = report({"greedy.format": (8, 10), "greedy.empty": (0, 10)})
    v = rates.decide(ref, report({"greedy.format": (8, 10), "greedy.empty": (0, 10)}, suite_sha="t" * 64,
                                contract={"seed": 2}), POLICY)
    assert any("scenario suite" in r for r in v.reasons) and any("fields differ: seed" in r for r in v.reasons)
    v = rates.decide(ref, report({"greedy.format": (9, 11), "greedy.empty": (0, 10)}), POLICY)
    assert v.reasons == ("greedy.format: unequal denominators (candidate 11, reference 10)",)


@pytest.mark.parametrize("counts,msg", [
    ({"numerator": 1, "denominator": 0}, "denominator 0 is not positive"),
    ({"numerator": 5, "denominator": 4}, "outside 0..4"),
    ({"numerator": 1.5, "denominator": 4}, "not an integer count"),
    ({"numerator": True, "denominator": 4}, "not an integer count"),
    (None, "missing numerator/denominator"),
])
def test_invalid_rates_are_never_scores(counts, msg):
    ref = report({"greedy.format": (8, 10), "greedy.empty": (0, 10)})
    cand = report({"greedy.format": (8, 10), "greedy.empty": (0, 10)})
    if counts is None:
        del cand["rate_counts"]["greedy.format"]
    else:
        cand["rate_counts"]["greedy.format"] = counts
    v = rates.decide(ref, cand, POLICY)
    assert not v.passed and any(msg in r for r in v.reasons)


def test_rate_value_must_equal_its_counts():
    cand = report({"greedy.format": (8, 10)})
    cand["rates"]["greedy.format"] = 0.9
    with pytest.raises(EvidenceError, match=r"rate 0.9 is not 8/10"):
        rates.require_rate(cand, "greedy.format")


def test_published_reference_needs_zero_margin():
    ref = report({"greedy.format": (8, 10), "greedy.empty": (0, 10)})
    with pytest.raises(EvidenceError, match="zero margin"):
        rates.decide(ref, ref, POLICY, published=True)
    v = rates.decide(ref, report({"greedy.format": (7, 10), "greedy.empty": (0, 10)}), replace(POLICY, margin=0),
                    published=True)
    assert not v.passed


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 50).flatmap(lambda d: st.tuples(st.just(d), st.integers(0, d), st.integers(0, d))))
def test_identical_reports_always_pass_and_margin_is_monotone(t):
    d, a, b = t
    ref = report({"greedy.format": (a, d), "greedy.empty": (b, d)})
    assert rates.decide(ref, ref, POLICY).passed
    cand = report({"greedy.format": (b, d), "greedy.empty": (a, d)})
    if rates.decide(ref, cand, replace(POLICY, margin=0.0)).passed:
        assert rates.decide(ref, cand, replace(POLICY, margin=0.3)).passed


def test_transcripts_edited_after_the_report_are_refused(tmp_path):
    s = suites.render(suites.load(write(tmp_path, GOOD)), render_chars, 4096, "t")
    c = generate.Contract(1, 0.7, 40, 0.9, (0,))
    rows, timing = evaluate.run(ListBackend([[0, 5, 1]] * 30), s, c, lambda ids: "yes" if ids else "")
    out = tmp_path / "eval"
    rep = evaluate.write(out, rows, timing, s, c, {"kind": "scripted"})
    assert rep["rate_counts"]["greedy.format"] == {"numerator": 1, "denominator": 1}
    assert rep["rate_counts"]["greedy.budget_exhausted"] == {"numerator": 2, "denominator": 2}
    loaded, _ = evaluate.load(out)
    assert loaded == json.loads((out / "report.json").read_text())
    with open(out / "transcripts.jsonl", "a") as f:
        f.write("{}\n")
    with pytest.raises(EvidenceError, match="transcripts differ from the SHA-256"):
        evaluate.load(out)


def test_agreement_counts_identical_prefixes():
    ref = [{"mode": "greedy", "case": "a", "output_ids": [1, 2, 3]}, {"mode": "greedy", "case": "b", "output_ids": [4]}]
    cand = [{"mode": "greedy", "case": "a", "output_ids": [1, 2, 9]}, {"mode": "greedy", "case": "b", "output_ids": [4]}]
    assert evaluate.agreement(ref, cand, 2, ("greedy",)) == {"greedy.agreement": {"numerator": 2, "denominator": 2}}
    assert evaluate.agreement(ref, cand, 3, ("greedy",)) == {"greedy.agreement": {"numerator": 1, "denominator": 2}}
    with pytest.raises(EvidenceError, match="lack case 'c'"):
        evaluate.agreement(ref, cand + [{"mode": "greedy", "case": "c", "output_ids": []}], 2, ("greedy",))


@pytest.mark.parametrize("text,ok", [("7 + 8 = 15", True), ("The answer is 15.", True), ("15, not 16", False),
                                     ("1,500", False), ("fifteen", False)])
def test_final_number(text, ok):
    assert checkers.CHECKERS["final_number"].check(text, 15, {}) is ok


def test_with_agreement_and_combine():
    ref = report({"greedy.format": (8, 10), "greedy.empty": (0, 10)})
    out = rates.with_agreement(ref, {"greedy.agreement": {"numerator": 3, "denominator": 4}})
    assert out["rates"]["greedy.agreement"] == 0.75 and "greedy.agreement" not in ref["rates"]
    ok = rates.decide(ref, ref, POLICY)
    bad = rates.decide(ref, report({"greedy.format": (5, 10), "greedy.empty": (0, 10)}), replace(POLICY, margin=0),
                      published=True)
    both = rates.combine(ok, bad)
    assert not both.passed and both.reasons[0].startswith("published reference: greedy.format")
    assert rates.combine(ok, ok).passed


GRAPH = "a" * 64


def onnx_report(graph=GRAPH, **contract):
    rep = report({"greedy.format": (8, 10), "greedy.empty": (0, 10)},
                 contract={**generate.Contract(1, 0.7, 40, 0.9, (0,), threads=2).as_dict(), **contract})
    rep.update(subject={"kind": "onnx", "graph_sha256": graph}, max_new_tokens={"a": 24, "b": 8})
    return rep


def test_paired_inference_names_each_unpaired_setting():
    assert rates.paired(onnx_report(), onnx_report("b" * 64), GRAPH) == []   # the candidate's own graph may differ
    ref = onnx_report("b" * 64, threads=1, top_p=0.8, repetition_penalty=1.2, extra="x")
    ref["max_new_tokens"]["b"] = 9
    assert rates.paired(ref, onnx_report(), GRAPH) == [
        "reference measured graph bbbbbbbbbbbb, not the pinned published graph aaaaaaaaaaaa",
        "threads differ: reference 1, candidate 2",
        "generation config top_p differs: reference 0.8, candidate 0.9",
        "generation config max_new_tokens differs in 1 case(s), first 'b': reference 9, candidate 8",
        "repetition penalty differs: reference 1.2, candidate 1.0",
        "sampling contract extra differs: reference 'x', candidate None"]


@pytest.mark.parametrize("kind, what", [("torch", "a PyTorch model"), ("gguf", "a GGUF file"),
                                        (None, "an unknown subject")])
def test_paired_inference_needs_onnx_evidence_of_the_pinned_graph(kind, what):
    ref = onnx_report()
    ref["subject"] = {"kind": kind}
    assert rates.paired(ref, onnx_report(), GRAPH) == [
        f"reference is not ONNX evidence: it measured {what} (subject kind {kind!r})",
        "reference records no graph SHA-256, so it did not measure the pinned published graph aaaaaaaaaaaa"]


def test_paired_inference_refuses_unrecorded_settings_and_an_unpinned_graph():
    ref = onnx_report()
    for key in ("threads", "repetition_penalty", "seed_strategy"):
        del ref["contract"][key]
    del ref["max_new_tokens"]
    assert rates.paired(ref, onnx_report(), GRAPH) == [
        "reference records no thread count", "reference records no generation setting seed_strategy",
        "reference records no per-case max_new_tokens", "reference records no repetition penalty"]
    for bad in ("A" * 64, "a" * 63, None):
        with pytest.raises(EvidenceError, match="published graph SHA-256 must be pinned as 64 lower-case hex"):
            rates.paired(onnx_report(), onnx_report(), bad)


def test_published_inference_is_zero_margin_and_its_record_reads_the_verdict():
    policy = replace(POLICY, margin=0)
    assert rates.published_inference(onnx_report(), onnx_report(), policy, GRAPH).passed
    with pytest.raises(EvidenceError, match="zero margin"):
        rates.published_inference(onnx_report(), onnx_report(), POLICY, GRAPH)
    worse = onnx_report(threads=1)
    worse["rate_counts"]["greedy.format"], worse["rates"]["greedy.format"] = {"numerator": 9, "denominator": 10}, 0.9
    pub = rates.published_inference(worse, onnx_report(), policy, GRAPH)
    assert pub.reasons == ("threads differ: reference 1, candidate 2",
                           "greedy.format: 0.8000 is below reference 0.9000 - margin 0")
    main = rates.decide(onnx_report(), report({"greedy.format": (1, 10), "greedy.empty": (0, 10)}), POLICY)
    record = rates.published_record(rates.combine(main, pub), GRAPH)
    assert record == {"kind": "published-paired-inference", "published_graph_sha256": GRAPH,
                      "same_training_corpus_claim": False, "passed": False, "reasons": list(pub.reasons)}
    assert rates.published_record(main, GRAPH)["passed"] is True   # the main comparison's reasons are not its own


def test_published_entry_pins_the_graph():
    from harness.errors import CampaignError
    from harness.fields import Where

    where = Where("c.toml", "policy.behavior")
    entry = {"report": "r.json", "sha256": "b" * 64, "graph_sha256": GRAPH}
    assert rule.BehaviorPolicy.parse({"published": {"m": entry}}, where).published["m"].graph_sha256 == GRAPH
    with pytest.raises(CampaignError, match=r"^c\.toml: policy\.behavior\.published\.m\.graph_sha256: expected a "
                                            r"lowercase hex SHA-256, got 'ABC'$"):
        rule.BehaviorPolicy.parse({"published": {"m": {**entry, "graph_sha256": "ABC"}}}, where)
    with pytest.raises(CampaignError, match=r"^c\.toml: policy\.behavior\.published\.m: missing required key "
                                            r"'graph_sha256'$"):
        rule.BehaviorPolicy.parse({"published": {"m": {"report": "r.json", "sha256": "b" * 64}}}, where)


def test_the_contract_records_threads_and_no_repetition_penalty():
    c = generate.Contract(1, 0.7, 40, 0.9, (0,), threads=2)
    assert c.as_dict()["threads"] == 2 and c.as_dict()["repetition_penalty"] == 1.0
    assert c.sha256 != generate.Contract(1, 0.7, 40, 0.9, (0,), threads=1).sha256
    with pytest.raises(EvidenceError, match="applies no repetition penalty"):
        generate.Contract(1, 0.7, 40, 0.9, (0,), repetition_penalty=1.3)
    with pytest.raises(EvidenceError, match="threads 0 is not a positive integer"):
        generate.Contract(1, 0.7, 40, 0.9, (0,), threads=0)


def test_a_report_loads_from_its_own_file_and_records_budgets(tmp_path):
    s = suites.render(suites.load(write(tmp_path, GOOD)), render_chars, 4096, "t")
    c = generate.Contract(1, 0.7, 40, 0.9, (0,))
    rows, timing = evaluate.run(ListBackend([[0, 5, 1]] * 30), s, c, lambda ids: "")
    out = tmp_path / "eval"
    rep = evaluate.write(out, rows, timing, s, c, {"kind": "scripted"})
    assert rep["max_new_tokens"] == {"a": rep["max_new_tokens"]["a"], "b": 8}
    (out / "report.json").rename(out / "published.json")
    assert evaluate.load(out / "published.json")[0] == rep
