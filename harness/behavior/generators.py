"""Versioned, seeded generators of behavior scenario cases, and the command that writes a suite from them.

Twenty hand-written cases per category cannot tell a 0.05 change of a rate from noise, so the chat
suite from version 3 on is generated: one generator per category draws cases from the vocabulary
below with a private ``random.Random(f"{seed}:{category}:{version}")`` (no global state), keeping
each new prompt, until it has the asked count.  The same seed and versions give the same cases in
the same order, so the first K cases of a category are a fair slice of it; changing what a generator
draws means bumping its version, which reseeds it and changes the suite file and so its SHA-256.

Every generated case carries ``reference``: a reply its checker accepts, known correct by
construction, so that the tests can prove each case decidable without a model.  The ``factual``
category is not generated: its 20 curated cases are copied verbatim from ``chat-v2.toml``.

    python -m harness.behavior.generators --out harness/behavior/chat-v3.toml --per-category 200 --seed 20261205
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import ScenarioError
from ..hashing import sha256_file
from . import suite as suite_module
from .checkers import CHECKERS

SUITE_NAME = "chat"
SUITE_VERSION = "3.0"
DEFAULT_MAX_NEW_TOKENS = 24
JSON_MAX_NEW_TOKENS = 40
MAX_PROMPT_WORDS = 25          # the CI model's context is 128 tokens, chat template and budget included
MAX_PROMPT_CHARS = 160
FACTUAL_SOURCE = Path(__file__).with_name("chat-v2.toml")
FACTUAL_CATEGORY = "factual"
FACTUAL_VERSION = "chat-v2"    # the curated cases' source, named in the header instead of a generator version

# --------------------------------------------------------------------------------------------------
# Vocabulary.  Every fact below is meant to be obvious to a child; an entry that could be argued
# (a tomato as a fruit, orange as a fruit or a color, flying fish) is left out on purpose.

NAMES = ("Maria", "Tom", "Anna", "James", "Sofia", "Omar", "Lena", "David", "Mei", "Carlos", "Nina", "Peter",
         "Aisha", "Lucas", "Emma", "Ivan", "Sara", "Hugo", "Yuki", "Daniel", "Elena", "Sam", "Priya", "Leo",
         "Fatima", "Oscar", "Julia", "Ben", "Rosa", "Ali")
CITIES = ("Lisbon", "Paris", "Oslo", "Madrid", "Rome", "Berlin", "Vienna", "Dublin", "Cairo", "Tokyo", "Lima",
          "Prague", "Athens", "Warsaw", "Nairobi", "Seoul", "Bangkok", "Havana", "Quito", "Toronto", "Boston",
          "Chicago", "Seattle", "Denver", "Helsinki", "Budapest", "Munich", "Milan", "Porto", "Istanbul")
CITY_COUNTRY = (("Paris", "France"), ("Lisbon", "Portugal"), ("Tokyo", "Japan"), ("Rome", "Italy"),
                ("Madrid", "Spain"), ("Berlin", "Germany"), ("Cairo", "Egypt"), ("Oslo", "Norway"),
                ("Dublin", "Ireland"), ("Vienna", "Austria"), ("Athens", "Greece"), ("Lima", "Peru"),
                ("Seoul", "Korea"), ("Warsaw", "Poland"), ("Prague", "Czechia"), ("Nairobi", "Kenya"))
JOBS = ("nurse", "teacher", "baker", "pilot", "doctor", "farmer", "chef", "lawyer", "painter", "driver",
        "dentist", "engineer", "plumber", "writer", "singer", "artist", "builder", "gardener", "waiter", "actor")
COLORS = ("red", "blue", "green", "yellow", "purple", "pink", "brown", "black", "white", "gray")
FRUITS = ("apple", "banana", "pear", "grape", "mango", "lemon", "kiwi", "melon", "strawberry", "pineapple",
          "coconut", "papaya", "watermelon", "blueberry")
FRUIT_PLURALS = {"apple": "apples", "banana": "bananas", "pear": "pears", "grape": "grapes", "mango": "mangoes",
                 "lemon": "lemons", "kiwi": "kiwis", "melon": "melons", "strawberry": "strawberries",
                 "pineapple": "pineapples", "coconut": "coconuts", "papaya": "papayas",
                 "watermelon": "watermelons", "blueberry": "blueberries"}
ANIMALS = ("dog", "cat", "horse", "cow", "sheep", "pig", "lion", "tiger", "rabbit", "mouse", "bear", "frog",
           "duck", "goat", "fox", "wolf", "zebra", "monkey", "elephant", "giraffe")
VEHICLES = ("car", "bus", "bicycle", "train", "truck", "tractor", "scooter", "van", "taxi", "motorcycle")
PETS = ("dog", "cat", "rabbit", "parrot", "hamster", "turtle", "goldfish", "pony")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                "twelve")

# Things and the adjectives that plainly describe them (the first is the most expected one).
TOPICS: dict[str, tuple[str, ...]] = {
    "the sea": ("blue", "deep", "wide", "salty", "calm"),
    "the sun": ("hot", "bright", "yellow", "round", "warm"),
    "snow": ("cold", "white", "soft", "wet", "quiet"),
    "a cat": ("soft", "small", "quiet", "furry", "curious"),
    "a dog": ("loyal", "friendly", "happy", "furry", "playful"),
    "the moon": ("bright", "round", "pale", "distant", "silver"),
    "a forest": ("green", "quiet", "dark", "tall", "wild"),
    "rain": ("wet", "cold", "gray", "heavy", "soft"),
    "summer": ("hot", "sunny", "long", "bright", "warm"),
    "winter": ("cold", "dark", "snowy", "long", "quiet"),
    "a city": ("busy", "loud", "big", "bright", "crowded"),
    "a river": ("long", "wet", "cold", "fast", "blue"),
    "the night": ("dark", "quiet", "cool", "calm", "long"),
    "a garden": ("green", "pretty", "quiet", "sunny", "fresh"),
    "a mountain": ("tall", "rocky", "cold", "steep", "high"),
    "coffee": ("hot", "dark", "bitter", "strong", "fresh"),
    "music": ("loud", "soft", "happy", "sweet", "lively"),
    "a storm": ("loud", "dark", "wild", "wet", "windy"),
    "fire": ("hot", "bright", "red", "warm", "dangerous"),
    "ice": ("cold", "hard", "clear", "slippery", "smooth"),
}

# ---- format: yes/no facts
# (plural animal, verbs it plainly can, verbs it plainly cannot)
ABILITIES = (
    ("birds", ("fly",), ("bark",)),
    ("dogs", ("bark", "swim", "run"), ("fly", "meow")),
    ("cats", ("meow", "climb trees", "run"), ("fly", "bark")),
    ("fish", ("swim",), ("bark", "meow", "climb trees")),
    ("cows", ("moo", "walk"), ("fly", "bark", "climb trees")),
    ("horses", ("run", "gallop"), ("fly", "bark", "meow")),
    ("pigs", ("run", "oink"), ("fly", "bark")),
    ("ducks", ("swim", "fly", "quack"), ("bark", "meow")),
    ("rabbits", ("hop", "run"), ("fly", "bark")),
    ("frogs", ("jump", "swim"), ("bark", "fly")),
    ("bees", ("fly",), ("bark", "meow")),
    ("lions", ("roar", "run"), ("fly", "bark")),
)
# (thing, adjectives that plainly fit it, adjectives that plainly do not)
PROPERTIES = (
    ("the sun", ("hot", "bright"), ("cold", "dark")),
    ("ice", ("cold", "frozen"), ("hot",)),
    ("snow", ("cold", "white"), ("hot", "black")),
    ("fire", ("hot",), ("cold", "wet")),
    ("water", ("wet",), ("dry",)),
    ("sugar", ("sweet",), ("salty", "sour")),
    ("an elephant", ("big", "heavy"), ("small", "tiny")),
    ("a mouse", ("small",), ("big", "huge")),
    ("a feather", ("light", "soft"), ("heavy",)),
    ("a rock", ("hard",), ("soft",)),
    ("coal", ("black",), ("white",)),
    ("grass", ("green",), ("blue", "purple")),
    ("milk", ("white",), ("green", "black")),
    ("a ripe banana", ("yellow",), ("blue",)),
    ("a giraffe", ("tall",), ("short",)),
    ("a snail", ("slow",), ("fast",)),
    ("a cheetah", ("fast",), ("slow",)),
    ("lava", ("hot",), ("cold",)),
    ("a pillow", ("soft",), ("hard",)),
)
KINDS = (("a fruit", FRUITS, True), ("an animal", ANIMALS, True), ("a color", COLORS, False),
         ("a vehicle", VEHICLES, True))   # (kind, members, members take an article)

# ---- format: one-word answers as (question, accepted answers); the first answer is the reference
COLOR_OF = (("snow", ("white",)), ("grass", ("green",)), ("the sky on a clear day", ("blue",)),
            ("coal", ("black",)), ("a ripe banana", ("yellow",)), ("milk", ("white",)),
            ("a ripe tomato", ("red",)), ("a carrot", ("orange",)), ("chocolate", ("brown",)),
            ("a lemon", ("yellow",)), ("blood", ("red",)), ("a strawberry", ("red",)),
            ("a polar bear", ("white",)), ("a crow", ("black",)), ("a lime", ("green",)))
OPPOSITES = (("hot", ("cold",)), ("up", ("down",)), ("big", ("small", "little", "tiny")), ("day", ("night",)),
             ("left", ("right",)), ("open", ("closed", "shut", "close")), ("fast", ("slow",)),
             ("happy", ("sad", "unhappy")), ("wet", ("dry",)), ("full", ("empty",)), ("tall", ("short",)),
             ("top", ("bottom",)), ("black", ("white",)), ("early", ("late",)), ("push", ("pull",)),
             ("in", ("out",)), ("cold", ("hot", "warm")), ("down", ("up",)), ("night", ("day",)),
             ("empty", ("full",)), ("dry", ("wet",)), ("slow", ("fast", "quick")), ("light", ("dark", "heavy")),
             ("hard", ("soft", "easy")), ("old", ("new", "young")), ("first", ("last",)), ("win", ("lose",)))
SOUNDS = (("meow", ("cat", "cats", "kitten")), ("moo", ("cow", "cows")), ("woof", ("dog", "dogs", "puppy")),
          ("oink", ("pig", "pigs")), ("quack", ("duck", "ducks")), ("baa", ("sheep", "lamb")),
          ("neigh", ("horse", "horses", "pony")), ("cluck", ("chicken", "hen", "chickens", "hens")),
          ("roar", ("lion", "lions", "tiger", "tigers")))
PLURALS = (("mouse", ("mice",)), ("child", ("children",)), ("foot", ("feet",)), ("tooth", ("teeth",)),
           ("goose", ("geese",)), ("man", ("men",)), ("woman", ("women",)), ("cat", ("cats",)),
           ("box", ("boxes",)), ("baby", ("babies",)), ("leaf", ("leaves",)), ("knife", ("knives",)))
YOUNG = (("dog", ("puppy", "pup")), ("cat", ("kitten", "kitty")), ("cow", ("calf",)), ("sheep", ("lamb",)),
         ("horse", ("foal", "colt", "filly")), ("duck", ("duckling",)), ("frog", ("tadpole", "froglet")),
         ("bear", ("cub",)), ("lion", ("cub",)), ("goat", ("kid",)), ("pig", ("piglet",)))

# ---- format: number-only answers as (question, answer)
COUNT_FACTS = (
    ("How many legs does a dog have?", 4), ("How many legs does a cat have?", 4),
    ("How many legs does a spider have?", 8), ("How many legs does a bird have?", 2),
    ("How many legs does a chicken have?", 2), ("How many legs does an ant have?", 6),
    ("How many legs does a horse have?", 4), ("How many legs does a cow have?", 4),
    ("How many arms does an octopus have?", 8), ("How many sides does a triangle have?", 3),
    ("How many sides does a square have?", 4), ("How many sides does a hexagon have?", 6),
    ("How many sides does an octagon have?", 8), ("How many sides does a pentagon have?", 5),
    ("How many wheels does a bicycle have?", 2), ("How many wheels does a tricycle have?", 3),
    ("How many wheels does a unicycle have?", 1), ("How many days are in a week?", 7),
    ("How many months are in a year?", 12), ("How many hours are in a day?", 24),
    ("How many minutes are in an hour?", 60), ("How many seconds are in a minute?", 60),
    ("How many eyes does a person have?", 2), ("How many fingers are on one hand?", 5),
)

# ---- stopping: short requests, each with a reply that ends at once
NAME_ONE = (("fruit", "Apple."), ("animal", "Dog."), ("color", "Blue."), ("country", "France."),
            ("city", "Paris."), ("vegetable", "Carrot."), ("sport", "Tennis."), ("musical instrument", "Piano."),
            ("drink", "Water."), ("day of the week", "Monday."), ("month of the year", "May."),
            ("planet", "Mars."), ("flower", "Rose."), ("tree", "Oak."), ("bird", "Robin."), ("tool", "Hammer."),
            ("shape", "Circle."), ("body part", "Hand."), ("vehicle", "Car."), ("season", "Summer."),
            ("insect", "Bee."), ("ocean", "Pacific."))
SAY = (("hello", "Hello!"), ("goodbye", "Goodbye!"), ("good morning", "Good morning!"),
       ("good night", "Good night!"), ("thank you", "Thank you!"), ("happy birthday", "Happy birthday!"),
       ("welcome", "Welcome!"), ("congratulations", "Congratulations!"), ("see you soon", "See you soon!"),
       ("good luck", "Good luck!"))
RHYMES = (("cat", "hat"), ("dog", "log"), ("sun", "fun"), ("day", "play"), ("tree", "bee"), ("cake", "lake"),
          ("ball", "tall"), ("light", "night"), ("book", "cook"), ("rain", "train"), ("star", "car"),
          ("moon", "spoon"), ("bed", "red"), ("hat", "cat"), ("bee", "tree"), ("snow", "glow"), ("king", "ring"),
          ("cold", "gold"), ("fun", "run"), ("top", "hop"), ("pen", "ten"), ("mouse", "house"))
REPLY_WORDS = ("yes", "okay", "done", "ready", "thanks", "sure", "hello", "fine", "great", "agreed", "noted",
               "understood")
DEFINE = (("a tree", "A tall plant with a trunk."), ("a river", "Water that flows to the sea."),
          ("a cup", "A small container for drinks."), ("a book", "Pages with words to read."),
          ("a chair", "A seat for one person."), ("a clock", "A tool that shows the time."),
          ("a bridge", "A way across a river."), ("a key", "A tool that opens a lock."),
          ("a map", "A picture of a place."), ("a lamp", "A thing that gives light."),
          ("bread", "A food baked from flour."), ("a window", "An opening that lets in light."))
PREFIXES = (("", False), ("Please ", True), ("Quick one: ", True), ("Hi! ", False))   # (text, lower the next letter)
SUFFIXES = ("", " Keep it short.", " Be brief.", " Thanks!")

# ---- instruction: tasks with a short answer
TASKS = (("Name one fruit.", "apple"), ("Name an animal.", "dog"), ("Name a color.", "blue"),
         ("Say hello.", "hello"), ("Name a country.", "spain"), ("What color is the sky?", "blue"),
         ("Name a day of the week.", "monday"), ("Name a month.", "june"), ("What do cows drink?", "water"),
         ("Name a planet.", "mars"), ("What animal says meow?", "a cat"), ("Name a vegetable.", "carrot"),
         ("Name a sport.", "soccer"), ("Name a shape.", "circle"), ("Name a flower.", "rose"),
         ("Name a drink.", "tea"), ("What is the opposite of hot?", "cold"), ("Name a season.", "winter"),
         ("Name a bird.", "robin"), ("Name a musical instrument.", "piano"))
UPPER_RULES = ("Reply in uppercase letters only.", "Use only capital letters.", "Write your answer in all caps.")
LOWER_RULES = ("Reply in lowercase letters only.", "Use no capital letters at all.",
               "Write your answer in small letters only.")
START_WORDS = ("Sure", "Okay", "Yes", "Well", "Hello", "Indeed", "Certainly", "Today", "Look", "Answer", "Alright",
               "Listen")
PHRASE_ADJECTIVES = ("little", "green", "happy", "old", "quiet", "brown", "sleepy", "small", "tall", "young")
PHRASE_ANIMALS = ("fox", "cat", "dog", "bird", "frog", "horse", "mouse", "rabbit", "duck", "bear")
PHRASE_VERBS = ("sleeps", "sings", "runs", "waits", "sits", "jumps", "plays", "rests", "hides", "walks")
PHRASE_PLACES = ("under the tree", "by the river", "in the garden", "on the hill", "near the door",
                 "in the snow", "at the park", "behind the house")

# ---- ages in extraction records and JSON requests
AGES = range(18, 80)


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


@dataclass(frozen=True)
class GeneratedCase:
    """A suite case (the keys of :class:`harness.behavior.suite.Case`) with the reply known to pass it."""

    id: str
    category: str
    prompt: str
    checker: str
    expected: Any
    max_new_tokens: int
    reference: str

    def table(self) -> dict[str, Any]:
        """The case's TOML keys in the suite's order; the budget only when it differs from the default."""
        row: dict[str, Any] = {"id": self.id, "category": self.category, "prompt": self.prompt,
                               "checker": self.checker}
        if self.expected is not None:
            row["expected"] = self.expected
        if self.max_new_tokens != DEFAULT_MAX_NEW_TOKENS:
            row["max_new_tokens"] = self.max_new_tokens
        return row


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


# --------------------------------------------------------------------------------------------------
# Generators


@dataclass(frozen=True)
class Generator:
    """One category's generator: ``draw`` makes one candidate case from the generator's private RNG."""

    category: str
    version: str
    id_prefix: str
    draw: Callable[[random.Random], Draft]

    def rng(self, seed: int) -> random.Random:
        """The generator's own stream: a new seed, category or version gives an unrelated sequence."""
        return random.Random(f"{seed}:{self.category}:{self.version}")

    def cases(self, n: int, seed: int) -> list[GeneratedCase]:
        """The first ``n`` distinct-prompt cases of the stream (so ``cases(k)`` is a prefix of ``cases(n)``)."""
        if n < 1:
            raise ScenarioError(f"generator {self.category!r} v{self.version}: per-category count must be "
                                f"positive, got {n}")
        rng, seen, out = self.rng(seed), set(), []
        attempts = 0
        while len(out) < n:
            attempts += 1
            if attempts > 100 * n + 1000:
                raise ScenarioError(f"generator {self.category!r} v{self.version}: only {len(out)} distinct "
                                    f"prompts after {attempts - 1} draws (asked {n}); its vocabulary is too small")
            draft = self.draw(rng)
            if draft.prompt in seen:
                continue
            seen.add(draft.prompt)
            out.append(self._checked(draft, len(out) + 1))
        return out

    def _checked(self, d: Draft, number: int) -> GeneratedCase:
        case = GeneratedCase(f"{self.id_prefix}-{number:04d}", self.category, d.prompt, d.checker, d.expected,
                             d.max_new_tokens, d.reference)
        where = f"generator {self.category!r} v{self.version}, case {case.id!r}"
        if len(d.prompt.split()) > MAX_PROMPT_WORDS or len(d.prompt) > MAX_PROMPT_CHARS:
            raise ScenarioError(f"{where}: prompt {d.prompt!r} is longer than {MAX_PROMPT_WORDS} words or "
                                f"{MAX_PROMPT_CHARS} characters (the CI model's context is 128 tokens)")
        if not passes(case, case.reference):
            raise ScenarioError(f"{where}: its reference reply {d.reference!r} fails checker {d.checker!r} "
                                f"with expected {d.expected!r}")
        return case


GENERATORS: dict[str, Generator] = {g.category: g for g in (
    Generator("arithmetic", "1", "arith", _arithmetic_case),
    Generator("format", "1", "format", _format_case),
    Generator("stopping", "1", "stop", _stopping_case),
    Generator("instruction", "1", "instr", _instruction_case),
    Generator("extraction", "1", "extract", _extraction_case),
)}


def passes(case: GeneratedCase, reply: str) -> bool:
    """Whether ``reply`` passes ``case``'s checker as the suite loader would hand it over (list values
    lower-cased except JSON keys), for a reply that stopped on an end-of-turn id without looping."""
    expected = case.expected
    if isinstance(expected, list) and case.checker != "json_keys":
        expected = [str(e).lower() for e in expected]
    return bool(CHECKERS[case.checker].check(reply, expected, {"stopped": True, "repetition": False}))


def factual_cases(source: Path = FACTUAL_SOURCE) -> list[GeneratedCase]:
    """The curated ``factual`` cases of ``source``, verbatim and in its order (reference: the first
    accepted answer)."""
    try:
        raw = tomllib.loads(source.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ScenarioError(f"{source}: cannot read the curated factual cases: {exc}") from exc
    default = raw.get("default_max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
    out = []
    for i, c in enumerate(raw.get("cases", [])):
        if c.get("category") != FACTUAL_CATEGORY:
            continue
        if set(c) - {"id", "category", "prompt", "checker", "expected", "max_new_tokens"}:
            raise ScenarioError(f"{source}: cases[{i}] ({c.get('id')!r}): keys {sorted(c)} cannot be copied")
        expected = c.get("expected")
        reference = str(expected[0]) if isinstance(expected, list) else str(expected)
        out.append(GeneratedCase(c["id"], FACTUAL_CATEGORY, c["prompt"], c["checker"], expected,
                                 c.get("max_new_tokens", default), reference))
    if not out:
        raise ScenarioError(f"{source}: no {FACTUAL_CATEGORY!r} cases to copy")
    return out


def build(per_category: int, seed: int, factual_source: Path = FACTUAL_SOURCE) -> list[GeneratedCase]:
    """Every generator's cases, category by category, then the curated factual cases; refused when two
    cases share an id or a prompt."""
    cases = [c for g in GENERATORS.values() for c in g.cases(per_category, seed)] + factual_cases(factual_source)
    ids: set[str] = set()
    prompts: dict[str, str] = {}       # prompt -> the id of the case that has it
    for c in cases:
        if c.id in ids:
            raise ScenarioError(f"case id {c.id!r} is generated twice")
        if c.prompt in prompts:
            raise ScenarioError(f"cases {prompts[c.prompt]!r} and {c.id!r} share the prompt {c.prompt!r}")
        ids.add(c.id)
        prompts[c.prompt] = c.id
    return cases


# --------------------------------------------------------------------------------------------------
# TOML


def toml_string(text: str) -> str:
    """A TOML basic string: JSON's quoting (both accept \\" \\\\ \\n \\t \\uXXXX), non-ASCII kept as
    UTF-8 (so no surrogate escapes, which TOML refuses), and DEL escaped, which JSON leaves raw."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise ScenarioError(f"cannot write {value!r} ({type(value).__name__}) as a suite value")


def header(per_category: int, seed: int) -> list[str]:
    versions = ", ".join(f"{g.category} v{g.version}" for g in GENERATORS.values())
    return [
        f"# Gatehouse behavior scenarios for an instruction-tuned chat model, version {SUITE_VERSION}.",
        "# GENERATED FILE, do not edit by hand: change harness/behavior/generators.py (bumping the version of",
        "# the generator whose draws change) and regenerate with",
        f"#   python -m harness.behavior.generators --per-category {per_category} --seed {seed} --out <this file>",
        f"# Generators: {versions}.",
        f"# Seed {seed}; {per_category} cases per generated category, in generated order (the first K cases",
        "# of a category are a fair slice of it).",
        f"# The {FACTUAL_CATEGORY} cases are not generated: they are chat-v2.toml's curated cases, copied verbatim.",
        "# Every case is rendered with the model's own chat template and decided by a named, versioned checker.",
    ]


def render_toml(cases: Sequence[GeneratedCase], per_category: int, seed: int) -> str:
    """The suite file's text: the header, the suite keys, one [[cases]] table per case (byte-deterministic)."""
    lines = header(per_category, seed) + [
        "schema_version = 1",
        f"name = {toml_string(SUITE_NAME)}",
        f"version = {toml_string(SUITE_VERSION)}",
        f"default_max_new_tokens = {DEFAULT_MAX_NEW_TOKENS}",
    ]
    for c in cases:
        lines += ["", "[[cases]]"] + [f"{k} = {toml_value(v)}" for k, v in c.table().items()]
    text = "\n".join(lines) + "\n"
    parsed = tomllib.loads(text)["cases"]
    for c, back in zip(cases, parsed, strict=True):
        if back != c.table():
            raise ScenarioError(f"case {c.id!r}: the TOML written reads back as {back!r}, not {c.table()!r}")
    return text


def write(out: Path, per_category: int, seed: int) -> tuple[int, str]:
    """Generate, write ``out`` atomically once the suite loader accepts it, and return (cases, file SHA-256)."""
    text = render_toml(build(per_category, seed), per_category, seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(text.encode("utf-8"))
    try:
        loaded = suite_module.load(tmp)
    except ScenarioError:
        tmp.unlink()
        raise
    os.replace(tmp, out)
    return len(loaded.cases), sha256_file(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.behavior.generators",
                                     description="Write a generated behavior scenario suite (TOML).")
    parser.add_argument("--out", type=Path, required=True, help="the suite file to write")
    parser.add_argument("--per-category", type=int, default=200, help="cases per generated category")
    parser.add_argument("--seed", type=int, required=True, help="the seed of every generator")
    args = parser.parse_args(argv)
    if args.per_category < 1:
        parser.error(f"--per-category: expected a positive integer, got {args.per_category}")
    try:
        count, digest = write(args.out, args.per_category, args.seed)
    except ScenarioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{args.out}: {count} cases, sha256 {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
