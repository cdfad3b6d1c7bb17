"""The seeded scenario generators, the committed chat-v3 suite they wrote, and the checkers they added.

Pure and fast: no model runs; a case is proved decidable by its generator's own correct reply."""

import random
import re
import tomllib
from collections import Counter
from pathlib import Path

import pytest

from harness.behavior import checkers, generators as gen, suite as suites, vocabulary
from harness.errors import ScenarioError

COMMITTED = Path(gen.__file__).with_name("chat-v3.toml")
PER_CATEGORY, SEED = 200, 20261205
CATEGORIES = ("arithmetic", "format", "stopping", "instruction", "extraction")
STOPPED = {"stopped": True, "repetition": False}


@pytest.fixture(scope="module")
def built() -> list[gen.GeneratedCase]:
    return gen.build(PER_CATEGORY, SEED)


@pytest.fixture(scope="module")
def loaded() -> suites.Suite:
    return suites.load(COMMITTED)


# ---- the committed file


def test_regenerating_gives_the_committed_bytes(tmp_path, capsys):
    out = tmp_path / "chat-v3.toml"
    assert gen.main(["--out", str(out), "--per-category", str(PER_CATEGORY), "--seed", str(SEED)]) == 0
    assert out.read_bytes() == COMMITTED.read_bytes(), (
        "chat-v3.toml differs from what its generators write: regenerate it with "
        f"python -m harness.behavior.generators --out {COMMITTED} --per-category {PER_CATEGORY} --seed {SEED}")
    assert "1020 cases, sha256 " in capsys.readouterr().out


def test_committed_header_names_versions_seed_count_and_says_generated():
    head = COMMITTED.read_text().split("schema_version", 1)[0]
    assert "GENERATED FILE, do not edit by hand" in head
    assert f"--per-category {PER_CATEGORY} --seed {SEED}" in head
    for g in gen.GENERATORS.values():
        assert f"{g.category} v{g.version}" in head


def test_the_suite_loader_accepts_the_committed_file_with_the_asked_counts(loaded, built):
    counts = Counter(c.category for c in loaded.cases)
    assert counts == {**{cat: PER_CATEGORY for cat in CATEGORIES}, "factual": 20}
    assert (loaded.name, loaded.version, len(loaded.cases)) == ("chat", "3.0", 1020)
    assert [c.id for c in loaded.cases] == [c.id for c in built]
    assert [c.max_new_tokens for c in loaded.cases] == [c.max_new_tokens for c in built]


def test_ids_and_prompts_are_unique_and_short(loaded):
    assert len({c.id for c in loaded.cases}) == len(loaded.cases)
    assert len({c.prompt for c in loaded.cases}) == len(loaded.cases)
    assert all(len(c.prompt.split()) <= gen.MAX_PROMPT_WORDS for c in loaded.cases)
    assert all(re.fullmatch(rf"{g.id_prefix}-\d{{4}}", c.id) for g in gen.GENERATORS.values()
               for c in loaded.cases if c.category == g.category)


def test_factual_cases_are_chat_v2s_verbatim():
    v2 = [c for c in tomllib.loads(gen.FACTUAL_SOURCE.read_text())["cases"] if c["category"] == "factual"]
    v3 = [c for c in tomllib.loads(COMMITTED.read_text())["cases"] if c["category"] == "factual"]
    assert len(v2) == 20 and v3 == v2


def test_categories_come_one_after_another_in_generated_order(loaded):
    order = [c.category for c in loaded.cases]
    assert [cat for i, cat in enumerate(order) if i == 0 or order[i - 1] != cat] == [*CATEGORIES, "factual"]
    for g in gen.GENERATORS.values():
        assert [c.id for c in loaded.cases if c.category == g.category] == \
            [f"{g.id_prefix}-{i:04d}" for i in range(1, PER_CATEGORY + 1)]


# ---- determinism


@pytest.mark.parametrize("category", CATEGORIES)
def test_same_seed_same_cases_another_seed_other_cases(category):
    g = gen.GENERATORS[category]
    assert g.cases(40, 7) == g.cases(40, 7)
    assert [c.prompt for c in g.cases(40, 8)] != [c.prompt for c in g.cases(40, 7)]


@pytest.mark.parametrize("category", CATEGORIES)
def test_a_smaller_count_is_a_prefix_so_the_first_k_are_a_fair_slice(category):
    g = gen.GENERATORS[category]
    assert g.cases(15, SEED) == g.cases(60, SEED)[:15]


def test_generators_use_no_global_random_state():
    random.seed(1)
    a = gen.build(12, 3)
    random.seed(2)
    random.random()
    assert gen.build(12, 3) == a


def test_a_small_count_gives_every_category_that_count():
    counts = Counter(c.category for c in gen.build(9, 5))
    assert counts == {**{cat: 9 for cat in CATEGORIES}, "factual": 20}


# ---- every case is decidable and decided right


def test_every_generated_case_passes_with_its_reference_reply(built):
    failed = [(c.id, c.reference) for c in built if not gen.passes(c, c.reference)]
    assert not failed


def test_the_loaded_checker_values_accept_the_references(loaded, built):
    """The references pass the expected values as the loader hands them over (lists lower-cased)."""
    ref = {c.id: c.reference for c in built}
    for c in loaded.cases:
        assert checkers.CHECKERS[c.checker].check(ref[c.id], c.expected, STOPPED), c.id


def test_an_empty_reply_passes_no_case(built):
    assert not [c.id for c in built if gen.passes(c, "")]


_ARITH = re.compile(r"(\d+) (\+|-|×|plus|minus|times) (\d+)")
_OPS = {"+": int.__add__, "plus": int.__add__, "-": int.__sub__, "minus": int.__sub__, "×": int.__mul__,
        "times": int.__mul__}


def test_arithmetic_expected_values_match_the_prompts_and_stay_easy(built):
    for c in (c for c in built if c.category == "arithmetic"):
        a, op, b = _ARITH.search(c.prompt).groups()
        assert c.expected == _OPS[op](int(a), int(b)), c.id
        assert 0 <= c.expected <= 100 and int(a) <= 60 and int(b) <= 60, c.id
        assert not gen.passes(c, str(c.expected + 1)), c.id


def test_yes_no_cases_refuse_the_other_answer_and_are_balanced(built):
    yes_no = [c for c in built if c.checker == "yes_no"]
    for c in yes_no:
        assert not gen.passes(c, "No." if c.expected == "yes" else "Yes."), c.id
    share = sum(c.expected == "yes" for c in yes_no) / len(yes_no)
    assert 0.35 <= share <= 0.65


def test_instruction_parameters_are_the_ones_the_prompt_names(built):
    for c in (c for c in built if c.category == "instruction"):
        if c.checker in ("starts_with", "repeats"):
            assert f"\"{c.expected}\"" in c.prompt, c.id
        elif c.checker == "word_count":
            assert f"exactly {vocabulary.NUMBER_WORDS[c.expected]} words" in c.prompt, c.id
        elif c.checker == "avoids_letter":
            assert c.prompt.endswith(f"the letter {c.expected}."), c.id
        elif c.checker == "avoids_word":
            assert f"the word \"{c.expected[0]}\"" in c.prompt, c.id
        else:
            assert c.checker in ("uppercase", "lowercase") and c.expected is None, c.id


def test_extraction_answers_are_in_the_record_and_a_neighbour_field_is_refused(built):
    for c in (c for c in built if c.category == "extraction"):
        record = c.prompt.rsplit("?", 1)[0]
        assert re.search(rf"\b{re.escape(c.reference)}\b", record), c.id
        assert not gen.passes(c, f"{c.reference} and more"), c.id


def test_json_cases_name_their_keys_in_the_prompt(built):
    for c in (c for c in built if c.checker == "json_keys"):
        assert all(f"\"{k}\"" in c.prompt for k in c.expected) and c.max_new_tokens == 40, c.id
        assert not gen.passes(c, "{}"), c.id


# ---- the new checkers


def check(name, text, expected=None, outcome=STOPPED):
    return checkers.CHECKERS[name].check(text, expected, outcome)


@pytest.mark.parametrize("name,expected,text,ok", [
    ("uppercase", None, "APPLE", True),
    ("uppercase", None, "HELLO, WORLD 42!", True),
    ("uppercase", None, "Apple", False),
    ("uppercase", None, "123 !", False),
    ("uppercase", None, "", False),
    ("lowercase", None, "apple pie.", True),
    ("lowercase", None, "Apple pie.", False),
    ("lowercase", None, "   ", False),
    ("starts_with", "Sure", "Sure, a cat.", True),
    ("starts_with", "Sure", "sure thing", True),
    ("starts_with", "Sure", "Surely not", False),
    ("starts_with", "Sure", "Yes, sure.", False),
    ("starts_with", "Sure", "", False),
    ("word_count", 3, "Blue, deep, wide.", True),
    ("word_count", 3, "It's cold here", True),
    ("word_count", 3, "Blue and deep and wide", False),
    ("word_count", 2, "Blue", False),
    ("repeats", "the little fox sleeps", "\"The little fox sleeps.\"", True),
    ("repeats", "the little fox sleeps", "the little fox sleeps", True),
    ("repeats", "the little fox sleeps", "Sure: the little fox sleeps", False),
    ("repeats", "the little fox sleeps", "the small fox sleeps", False),
    ("repeats", "the little fox sleeps", "the little fox", False),
    ("avoids_letter", "e", "Kiwi.", True),
    ("avoids_letter", "e", "An apple", False),
    ("avoids_letter", "e", "EEL", False),
    ("avoids_letter", "e", "!!", False),
    ("avoids_word", ["hot"], "The sun is bright.", True),
    ("avoids_word", ["hot"], "The sun is hot.", False),
    ("avoids_word", ["hot"], "HOT sun", False),
    ("avoids_word", ["hot"], "", False),
    ("exact_field", ["lisbon"], "Lisbon.", True),
    ("exact_field", ["nurse"], "a nurse", True),
    ("exact_field", ["34", "34 years", "34 years old"], "34 years old.", True),
    ("exact_field", ["lisbon"], "She lives in Lisbon.", False),
    ("exact_field", ["nurse"], "nurse and teacher", False),
    ("exact_field", ["34"], "35", False),
    ("exact_field", ["lisbon"], "", False),
])
def test_new_checkers_accept_right_replies_and_refuse_wrong_ones(name, expected, text, ok):
    assert check(name, text, expected) is ok


def test_new_checkers_are_versioned_and_load_with_their_expected_types(tmp_path):
    new = {"uppercase": None, "lowercase": None, "starts_with": str, "word_count": int, "repeats": str,
           "avoids_letter": str, "avoids_word": list, "exact_field": list}
    for name, expects in new.items():
        assert checkers.CHECKERS[name].version == "1" and checkers.CHECKERS[name].expects is expects
    p = tmp_path / "s.toml"
    p.write_text('schema_version = 1\nname = "t"\nversion = "1"\n[[cases]]\nid = "a"\ncategory = "instruction"\n'
                 'prompt = "Say hi."\nchecker = "word_count"\nexpected = "three"\n')
    with pytest.raises(ScenarioError, match=r"s\.toml: case 'a' .*word_count.*needs a non-empty int"):
        suites.load(p)


# ---- writing and refusing


@pytest.mark.parametrize("text", ['say "hi"', "back\\slash", "line\nbreak\ttab", "×÷ é 中文 😀", "del\x7fchar",
                                  "bell\x07", "'single' and \"double\"", "trailing\\"])
def test_toml_strings_read_back_as_written(text):
    assert tomllib.loads(f"v = {gen.toml_string(text)}")["v"] == text


def test_a_vocabulary_too_small_for_the_count_is_refused_naming_the_generator():
    tiny = gen.Generator("tiny", "9", "tiny", lambda rng: gen.Draft(f"Say {rng.choice('ab')}.", "stops", None, "Hi."))
    with pytest.raises(ScenarioError, match=r"generator 'tiny' v9: only 2 distinct prompts after \d+ draws "
                                            r"\(asked 3\)"):
        tiny.cases(3, 1)


def test_a_reference_its_checker_refuses_is_a_generator_error():
    wrong = gen.Generator("bad", "1", "bad", lambda rng: gen.Draft(f"What is 2 + {rng.randint(1, 9)}?",
                                                                   "final_number", 4, "five"))
    with pytest.raises(ScenarioError, match=r"generator 'bad' v1, case 'bad-0001': its reference reply 'five' "
                                            r"fails checker 'final_number' with expected 4"):
        wrong.cases(1, 1)


def test_a_long_prompt_is_refused():
    long = gen.Generator("long", "1", "long", lambda rng: gen.Draft("word " * 30 + "?", "stops", None, "Hi."))
    with pytest.raises(ScenarioError, match="case 'long-0001': prompt .* is longer than 25 words"):
        long.cases(1, 1)


def test_a_count_below_one_is_refused(capsys):
    with pytest.raises(ScenarioError, match=r"generator 'arithmetic' v1: per-category count must be positive, got 0"):
        gen.GENERATORS["arithmetic"].cases(0, 1)
    with pytest.raises(SystemExit):
        gen.main(["--out", "x.toml", "--per-category", "0", "--seed", "1"])
    assert "--per-category: expected a positive integer, got 0" in capsys.readouterr().err
