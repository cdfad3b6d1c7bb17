"""One drawn case per call, per category: the prompt, the checker that decides it and a reply known to pass.

Each ``_<category>_case(rng)`` draws from the generator's private ``random.Random`` and the vocabulary
(:mod:`harness.behavior.vocabulary`); :mod:`harness.behavior.generators` keeps each new prompt, numbers
the cases and checks every reference reply against its checker.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from .vocabulary import (TOPICS, NAMES, CITIES, CITY_COUNTRY, JOBS, COLORS, FRUITS, FRUIT_PLURALS, ANIMALS, PETS, DAYS,
                         MONTHS, NUMBER_WORDS, ABILITIES, PROPERTIES, KINDS, COLOR_OF, OPPOSITES, SOUNDS, PLURALS,
                         YOUNG, COUNT_FACTS, NAME_ONE, SAY, RHYMES, REPLY_WORDS, DEFINE, PREFIXES, SUFFIXES, TASKS,
                         UPPER_RULES, LOWER_RULES, START_WORDS, PHRASE_ADJECTIVES, PHRASE_ANIMALS, PHRASE_VERBS,
                         PHRASE_PLACES, AGES)

DEFAULT_MAX_NEW_TOKENS = 24
JSON_MAX_NEW_TOKENS = 40

# --------------------------------------------------------------------------------------------------
# Cases


@dataclass(frozen=True)
class Draft:
    """One drawn case before it has an id: the prompt, how to decide it, and a reply known to pass."""

    prompt: str
    checker: str
    expected: Any                 # None for a checker that takes no expected value
    reference: str                # a correct reply, by construction
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS


def article(word: str) -> str:
    """``word`` with its indefinite article ("an apple", "a pear"); the vocabulary has no silent h."""
    return f"{'an' if word[0].lower() in 'aeiou' else 'a'} {word}"


def capitalized(text: str) -> str:
    return text[:1].upper() + text[1:]


def lowered(text: str) -> str:
    return text[:1].lower() + text[1:]


def number_answers(n: int) -> list[str]:
    """The digits and, up to twelve, the word: both are an exact answer to "how many"."""
    return [str(n)] + ([NUMBER_WORDS[n]] if 0 <= n < len(NUMBER_WORDS) else [])


# ---- arithmetic, version 1: easy to moderate for a 135M model, judged by the reply's last number

def _arithmetic_case(rng: random.Random) -> Draft:
    op = rng.choice(("add", "add", "sub", "sub", "mul"))
    if op == "add":
        a, b = rng.randint(1, 50), rng.randint(1, 50)
        answer, shown = a + b, rng.choice(("+", "plus"))
    elif op == "sub":
        a = rng.randint(5, 60)
        b = rng.randint(1, a - 1)
        answer, shown = a - b, rng.choice(("-", "minus"))
    else:
        a, b = rng.randint(2, 9), rng.randint(2, 9)
        answer, shown = a * b, rng.choice(("×", "times"))
    template = rng.choice(("What is {a} {op} {b}? Answer with the number only.",
                           "Compute {a} {op} {b}. Reply with just the number.",
                           "How much is {a} {op} {b}? Give only the number."))
    return Draft(template.format(a=a, op=shown, b=b), "final_number", answer, str(answer))


# ---- format, version 1: yes/no, one word, number only, JSON with keys

def _yes_no_question(rng: random.Random) -> tuple[str, str]:
    """An obvious yes/no question and its answer; "yes" and "no" are equally likely."""
    want_yes = rng.random() < 0.5
    kind = rng.choice(("compare", "member", "ability", "property"))
    if kind == "compare":
        a, b = rng.sample(range(1, 21), 2)
        relation = rng.choice(("greater", "less"))
        holds = a > b if relation == "greater" else a < b
        if holds != want_yes:
            a, b = b, a
        return f"Is {a} {relation} than {b}?", "yes" if want_yes else "no"
    if kind == "member":
        kind_name, members, with_article = rng.choice(KINDS)
        if want_yes:
            item, item_article = rng.choice(members), with_article
        else:
            others = [k for k in KINDS if k[0] != kind_name]
            _, other_members, item_article = rng.choice(others)
            item = rng.choice(other_members)
        return f"Is {article(item) if item_article else item} {kind_name}?", "yes" if want_yes else "no"
    if kind == "ability":
        animals, can, cannot = rng.choice(ABILITIES)
        return f"Can {animals} {rng.choice(can if want_yes else cannot)}?", "yes" if want_yes else "no"
    thing, fits, unfit = rng.choice(PROPERTIES)
    return f"Is {thing} {rng.choice(fits if want_yes else unfit)}?", "yes" if want_yes else "no"


def _format_yes_no(rng: random.Random) -> Draft:
    question, answer = _yes_no_question(rng)
    rule = rng.choice(("Answer with yes or no only.", "Reply yes or no.", "Answer yes or no."))
    prompt = f"{rule} {question}" if rng.random() < 0.5 else f"{question} {rule}"
    return Draft(prompt, "yes_no", answer, f"{capitalized(answer)}.")


def _one_word_question(rng: random.Random) -> tuple[str, list[str]]:
    kind = rng.choice(("color", "opposite", "sound", "plural", "young", "next_day", "next_month", "next_number"))
    if kind == "color":
        thing, answers = rng.choice(COLOR_OF)
        return f"what color is {thing}?", list(answers)
    if kind == "opposite":
        word, answers = rng.choice(OPPOSITES)
        return f"what is the opposite of {word}?", list(answers)
    if kind == "sound":
        sound, answers = rng.choice(SOUNDS)
        return f"which animal says {sound}?", list(answers)
    if kind == "plural":
        word, answers = rng.choice(PLURALS)
        return f"what is the plural of {word}?", list(answers)
    if kind == "young":
        animal, answers = rng.choice(YOUNG)
        return f"what is a baby {animal} called?", list(answers)
    if kind == "next_day":
        i = rng.randrange(len(DAYS))
        return f"which day comes after {DAYS[i]}?", [DAYS[(i + 1) % len(DAYS)].lower()]
    if kind == "next_month":
        i = rng.randrange(len(MONTHS))
        return f"which month comes after {MONTHS[i]}?", [MONTHS[(i + 1) % len(MONTHS)].lower()]
    n = rng.randint(1, 11)
    return f"what number comes after {NUMBER_WORDS[n]}?", [NUMBER_WORDS[n + 1], str(n + 1)]


def _format_single_word(rng: random.Random) -> Draft:
    question, answers = _one_word_question(rng)
    style = rng.randrange(3)
    if style == 0:
        prompt = f"In one word: {question}"
    elif style == 1:
        prompt = f"{capitalized(question)} Answer in one word."
    else:
        prompt = f"Reply with a single word: {question}"
    return Draft(prompt, "single_word", answers, f"{capitalized(answers[0])}.")


def _number_question(rng: random.Random) -> tuple[str, int]:
    kind = rng.choice(("fact", "fact", "after", "before", "count"))
    if kind == "fact":
        return rng.choice(COUNT_FACTS)
    if kind == "after":
        n = rng.randint(1, 98)
        return f"What number comes after {n}?", n + 1
    if kind == "before":
        n = rng.randint(2, 99)
        return f"What number comes before {n}?", n - 1
    pool = rng.choice((FRUITS, ANIMALS, COLORS, CITIES))
    items = rng.sample(pool, rng.randint(2, 6))
    return f"How many items are in this list: {', '.join(items)}?", len(items)


def _format_number(rng: random.Random) -> Draft:
    question, answer = _number_question(rng)
    rule = rng.choice(("Answer with a number only.", "Reply with just the number.", "Give only the number."))
    return Draft(f"{question} {rule}", "number", answer, str(answer))


def _json_request(rng: random.Random) -> tuple[dict[str, Any], str]:
    """An object to ask for and the words that describe it ("for ..."), keys in the object's order."""
    kind = rng.choice(("name_age", "name_city", "name_job", "name_pet", "city_country", "animal_color",
                       "one_key"))
    name = rng.choice(NAMES)
    if kind == "name_age":
        age = rng.choice(AGES)
        return {"name": name, "age": age}, f"for {name}, who is {age} years old."
    if kind == "name_city":
        city = rng.choice(CITIES)
        return {"name": name, "city": city}, f"for {name}, who lives in {city}."
    if kind == "name_job":
        job = rng.choice(JOBS)
        return {"name": name, "job": job}, f"for {name}, who is {article(job)}."
    if kind == "city_country":
        city, country = rng.choice(CITY_COUNTRY)
        return {"city": city, "country": country}, f"for {city} in {country}."
    if kind == "animal_color":
        animal, color = rng.choice(ANIMALS), rng.choice(COLORS)
        return {"animal": animal, "color": color}, f"for {article(color)} {animal}."
    if kind == "name_pet":
        pet = rng.choice(PETS)
        return {"name": name, "pet": pet}, f"for {name}, who has {article(pet)}."
    key = rng.choice(("color", "city", "animal", "fruit", "day"))
    value = rng.choice({"color": COLORS, "city": CITIES, "animal": ANIMALS, "fruit": FRUITS, "day": DAYS}[key])
    return {key: value}, f"whose value is \"{value}\"."


def _format_json(rng: random.Random) -> Draft:
    obj, described = _json_request(rng)
    keys = list(obj)
    quoted = [f"\"{k}\"" for k in keys]
    if len(keys) == 1:
        with_keys = f"one key {quoted[0]}"
    else:
        with_keys = f"the keys {' and '.join(quoted)}"
    lead = rng.choice(("Return only a JSON object with", "Reply with just a JSON object with",
                       "Output only JSON: an object with"))
    return Draft(f"{lead} {with_keys} {described}", "json_keys", keys, json.dumps(obj), JSON_MAX_NEW_TOKENS)


def _format_case(rng: random.Random) -> Draft:
    make = rng.choice((_format_yes_no, _format_yes_no, _format_yes_no, _format_single_word, _format_single_word,
                       _format_single_word, _format_number, _format_number, _format_json, _format_json))
    return make(rng)


# ---- stopping, version 1: short requests that should end with an end-of-turn id at once

def _stopping_request(rng: random.Random) -> tuple[str, str, int]:
    """A short request, a reply that ends it, and the budget such a reply needs."""
    kind = rng.choice(("name", "name", "say", "say_sentence", "rhyme", "reply_word", "describe", "define"))
    if kind == "name":
        what, reply = rng.choice(NAME_ONE)
        return f"{rng.choice(('Name one', 'Name a'))} {what}.", reply, DEFAULT_MAX_NEW_TOKENS
    if kind == "say":
        phrase, reply = rng.choice(SAY)
        return f"Say {phrase}.", reply, DEFAULT_MAX_NEW_TOKENS
    if kind == "say_sentence":
        phrase, reply = rng.choice(SAY)
        return f"Say {phrase} in one short sentence.", reply, 32
    if kind == "rhyme":
        word, rhyme = rng.choice(RHYMES)
        return f"Give one word that rhymes with {word}.", f"{capitalized(rhyme)}.", DEFAULT_MAX_NEW_TOKENS
    if kind == "reply_word":
        word = rng.choice(REPLY_WORDS)
        return f"Reply with the single word {word}.", f"{capitalized(word)}.", DEFAULT_MAX_NEW_TOKENS
    if kind == "describe":
        topic, adjectives = rng.choice(list(TOPICS.items()))
        return (f"Describe {topic} in one short sentence.",
                f"{capitalized(topic)} is {adjectives[0]} and {adjectives[1]}.", 40)
    thing, reply = rng.choice(DEFINE)
    return f"What is {thing}? Answer in one short sentence.", reply, 40


def _stopping_case(rng: random.Random) -> Draft:
    request, reply, budget = _stopping_request(rng)
    prefix, lower_next = rng.choice(PREFIXES)
    prompt = prefix + (lowered(request) if lower_next else request) + rng.choice(SUFFIXES)
    return Draft(prompt, "stops", None, reply, budget)


# ---- instruction, version 1: a rule the reply must follow, judged by a rule checker

def _instruction_case(rng: random.Random) -> Draft:
    kind = rng.choice(("uppercase", "lowercase", "starts_with", "word_count", "repeats", "avoids_letter",
                       "avoids_word"))
    if kind in ("uppercase", "lowercase"):
        task, answer = rng.choice(TASKS)
        rule = rng.choice(UPPER_RULES if kind == "uppercase" else LOWER_RULES)
        prompt = f"{rule} {task}" if rng.random() < 0.5 else f"{task} {rule}"
        return Draft(prompt, kind, None, answer.upper() if kind == "uppercase" else answer.lower())
    if kind == "starts_with":
        task, answer = rng.choice(TASKS)
        word = rng.choice(START_WORDS)
        rule = rng.choice((f"Start your reply with the word \"{word}\".", f"Begin your answer with \"{word}\"."))
        return Draft(f"{rule} {task}", "starts_with", word, f"{word}, {answer}.")
    if kind == "word_count":
        topic, adjectives = rng.choice(list(TOPICS.items()))
        n = rng.randint(2, 5)
        template = rng.choice(("Describe {t} in exactly {n} words.", "Use exactly {n} words to describe {t}.",
                               "In exactly {n} words, describe {t}."))
        prompt = template.format(t=topic, n=NUMBER_WORDS[n])
        return Draft(prompt, "word_count", n, capitalized(", ".join(adjectives[:n])) + ".")
    if kind == "repeats":
        phrase = (f"the {rng.choice(PHRASE_ADJECTIVES)} {rng.choice(PHRASE_ANIMALS)} {rng.choice(PHRASE_VERBS)} "
                  f"{rng.choice(PHRASE_PLACES)}")
        lead = rng.choice(("Repeat this phrase exactly:", "Copy this text exactly:",
                           "Say exactly this and nothing else:"))
        return Draft(f"{lead} \"{phrase}\"", "repeats", phrase, phrase)
    if kind == "avoids_letter":
        what, members = rng.choice((("fruit", FRUITS), ("animal", ANIMALS), ("color", COLORS)))
        letters = sorted(l for l in {c for m in members for c in m}
                         if len(members) / 4 <= sum(l in m for m in members) < len(members))
        letter = rng.choice(letters)      # used by a quarter of the members at least, missing from some
        allowed = [m for m in members if letter not in m]
        rule = rng.choice(("without using the letter {l}.", "but do not use the letter {l}."))
        prompt = f"Name {article(what)} {rule.format(l=letter)}"
        return Draft(prompt, "avoids_letter", letter, f"{capitalized(rng.choice(allowed))}.")
    topic, adjectives = rng.choice(list(TOPICS.items()))
    banned = adjectives[0]
    rule = rng.choice(("Describe {t} in one short sentence without using the word \"{w}\".",
                       "Describe {t} briefly, but never use the word \"{w}\"."))
    return Draft(rule.format(t=topic, w=banned), "avoids_word", [banned],
                 f"{capitalized(topic)} is {adjectives[1]} and {adjectives[2]}.", 32)


# ---- extraction, version 1: one field out of a short generated record

def _extraction_case(rng: random.Random) -> Draft:
    kind = rng.choice(("home_job", "age_pet", "market", "record", "trip", "two_people"))
    name, other = rng.sample(NAMES, 2)
    if kind == "home_job":
        city, job = rng.choice(CITIES), rng.choice(JOBS)
        text = f"{name} lives in {city} and works as {article(job)}."
        field = rng.choice(("city", "job", "name"))
        if field == "city":
            return Draft(f"{text} Where does {name} live? Answer with the city only.", "exact_field", [city], city)
        if field == "job":
            return Draft(f"{text} What is {name}'s job? Answer with the job only.", "exact_field", [job], job)
        return Draft(f"{text} Who works as {article(job)}? Answer with the name only.", "exact_field", [name], name)
    if kind == "age_pet":
        age, color, pet = rng.choice(AGES), rng.choice(COLORS), rng.choice(PETS)
        text = f"{name} is {age} years old and has {article(color)} {pet}."
        field = rng.choice(("age", "color", "pet"))
        if field == "age":
            return Draft(f"{text} How old is {name}? Answer with the number only.", "exact_field",
                         [str(age), f"{age} years", f"{age} years old"], str(age))
        if field == "color":
            return Draft(f"{text} What color is {name}'s {pet}? Answer with one word.", "exact_field",
                         [color], color)
        return Draft(f"{text} What pet does {name} have? Answer with one word.", "exact_field", [pet], pet)
    if kind == "market":
        n, fruit, day = rng.randint(2, 9), rng.choice(FRUITS), rng.choice(DAYS)
        plural = FRUIT_PLURALS[fruit]
        text = f"{name} bought {n} {plural} on {day}."
        field = rng.choice(("count", "fruit", "day"))
        if field == "count":
            return Draft(f"{text} How many {plural} did {name} buy? Answer with the number only.", "exact_field",
                         number_answers(n), str(n))
        if field == "fruit":
            return Draft(f"{text} What fruit did {name} buy? Answer with one word.", "exact_field",
                         [fruit, plural], plural)
        return Draft(f"{text} On which day did {name} buy them? Answer with the day only.", "exact_field",
                     [day], day)
    if kind == "record":
        values = {"name": name, "city": rng.choice(CITIES), "job": rng.choice(JOBS), "age": str(rng.choice(AGES))}
        text = " ".join(f"{k.capitalize()}: {v}." for k, v in values.items())
        field = rng.choice(tuple(values))
        return Draft(f"{text} What is the {field} in this record? Answer with the value only.", "exact_field",
                     [values[field]], values[field])
    if kind == "trip":
        origin, destination = rng.sample(CITIES, 2)
        day = rng.choice(DAYS)
        text = f"{name} flies from {origin} to {destination} on {day}."
        field = rng.choice(("from", "to", "day"))
        if field == "from":
            return Draft(f"{text} Which city does {name} leave from? Answer with the city only.", "exact_field",
                         [origin], origin)
        if field == "to":
            return Draft(f"{text} Which city does {name} fly to? Answer with the city only.", "exact_field",
                         [destination], destination)
        return Draft(f"{text} On which day does {name} fly? Answer with the day only.", "exact_field", [day], day)
    job, other_job = rng.sample(JOBS, 2)
    text = f"{name} is {article(job)} and {other} is {article(other_job)}."
    asked, answer = (name, job) if rng.random() < 0.5 else (other, other_job)
    return Draft(f"{text} What is {asked}'s job? Answer with the job only.", "exact_field", [answer], answer)
