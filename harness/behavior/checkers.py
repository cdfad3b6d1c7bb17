"""Checkers that decide a scenario case without a human, each with a version in the suite hash.

A checker is ``check(reply_text, expected, outcome) -> bool`` where ``outcome`` carries what the
generator saw (stopped on an end-of-turn id, runaway repetition).  Changing what a checker accepts
means bumping its version, which changes the suite SHA-256 and so refuses stale comparisons.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_NUMBER = re.compile(r"^[-+]?\d+(?:\.\d+)?$")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _yes_no(text: str, expected: Any, outcome: dict) -> bool:
    w = words(text)
    return 0 < len(w) <= 3 and w[0] in ("yes", "no") and w[0] == expected


def _single_word(text: str, expected: Any, outcome: dict) -> bool:
    w = words(text)
    return len(w) == 1 and w[0] in expected


def _number(text: str, expected: Any, outcome: dict) -> bool:
    s = text.strip().rstrip(".").strip()
    if not _NUMBER.match(s):
        return False
    return float(s) == float(expected)


_ANY_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")


def _final_number(text: str, expected: Any, outcome: dict) -> bool:
    found = _ANY_NUMBER.findall(text.replace(",", ""))
    return bool(found) and float(found[-1]) == float(expected)


def _json_keys(text: str, expected: Any, outcome: dict) -> bool:
    s = text.strip()
    fence = re.match(r"^```(?:json)?\s*(.*?)\s*```$", s, re.S)
    if fence:
        s = fence.group(1)
    try:
        value = json.loads(s)
    except (json.JSONDecodeError, ValueError):
        return False
    return isinstance(value, dict) and all(k in value for k in expected)


def _contains(text: str, expected: Any, outcome: dict) -> bool:
    w = set(words(text))
    return any(e in w for e in expected)


def _stops(text: str, expected: Any, outcome: dict) -> bool:
    return bool(outcome["stopped"]) and not outcome["repetition"] and bool(text.strip())


# Instruction-following and extraction checkers (chat suite version 3).  Each judges only what its
# prompt asked for, so that a category's rate measures one skill; none reads ``outcome``.

_ARTICLES = ("a", "an", "the")


def _letters(text: str) -> list[str]:
    return [c for c in text if c.isalpha()]


def _uppercase(text: str, expected: Any, outcome: dict) -> bool:
    """Every letter of the reply is a capital, and there is at least one (an empty reply follows no rule)."""
    letters = _letters(text)
    return bool(letters) and all(c.isupper() for c in letters)


def _lowercase(text: str, expected: Any, outcome: dict) -> bool:
    """Every letter of the reply is lower case, and there is at least one."""
    letters = _letters(text)
    return bool(letters) and all(c.islower() for c in letters)


def _starts_with(text: str, expected: Any, outcome: dict) -> bool:
    """The reply's first words are ``expected``'s words (case and punctuation ignored: "Sure, ..." starts
    with "sure")."""
    want = words(str(expected))
    return bool(want) and words(text)[:len(want)] == want


def _word_count(text: str, expected: Any, outcome: dict) -> bool:
    """The reply has exactly ``expected`` words, as :func:`words` counts them (a number is a word, a
    hyphen splits two)."""
    return len(words(text)) == int(expected)


def _repeats(text: str, expected: Any, outcome: dict) -> bool:
    """The reply is ``expected``'s words in the same order and nothing else (case, punctuation and
    surrounding quotes ignored), so that an added preamble or a changed word refuses it."""
    want = words(str(expected))
    return bool(want) and words(text) == want


def _avoids_letter(text: str, expected: Any, outcome: dict) -> bool:
    """The reply says something (one word at least) and never uses the letter ``expected`` in any case."""
    return bool(words(text)) and str(expected).lower() not in text.lower()


def _avoids_word(text: str, expected: Any, outcome: dict) -> bool:
    """The reply says something and none of its words is one of the ``expected`` forbidden words."""
    said = words(text)
    return bool(said) and not set(said) & {str(e).lower() for e in expected}


def _without_article(w: list[str]) -> list[str]:
    return w[1:] if len(w) > 1 and w[0] in _ARTICLES else w


def _exact_field(text: str, expected: Any, outcome: dict) -> bool:
    """The reply is exactly one accepted value of the asked field (its words, case and punctuation
    ignored, a leading a/an/the allowed): "Lisbon." and "a nurse" pass, "She lives in Lisbon." does not."""
    said = _without_article(words(text))
    return any(said == _without_article(words(str(e))) for e in expected if words(str(e)))


@dataclass(frozen=True)
class Checker:
    name: str
    version: str
    check: Callable[[str, Any, dict], bool]
    expects: type | tuple[type, ...] | None   # the type `expected` must have (None: no expected value)


CHECKERS: dict[str, Checker] = {c.name: c for c in (
    Checker("yes_no", "1", _yes_no, str),
    Checker("single_word", "1", _single_word, list),
    Checker("number", "1", _number, (int, float)),
    Checker("final_number", "1", _final_number, (int, float)),
    Checker("json_keys", "1", _json_keys, list),
    Checker("contains", "1", _contains, list),
    Checker("stops", "1", _stops, None),
    Checker("uppercase", "1", _uppercase, None),
    Checker("lowercase", "1", _lowercase, None),
    Checker("starts_with", "1", _starts_with, str),
    Checker("word_count", "1", _word_count, int),
    Checker("repeats", "1", _repeats, str),
    Checker("avoids_letter", "1", _avoids_letter, str),
    Checker("avoids_word", "1", _avoids_word, list),
    Checker("exact_field", "1", _exact_field, list),
)}


def runaway_repetition(ids: list[int], ngram: int = 4, times: int = 3) -> bool:
    """True when some ``ngram``-token sequence occurs ``times`` or more in ``ids`` (a loop)."""
    counts: dict[tuple[int, ...], int] = {}
    for i in range(len(ids) - ngram + 1):
        key = tuple(ids[i:i + ngram])
        counts[key] = counts.get(key, 0) + 1
        if counts[key] >= times:
            return True
    return False


def garbage(text: str) -> bool:
    """Undecodable bytes (U+FFFD) or control characters other than newline and tab."""
    return "\ufffd" in text or any(ord(c) < 32 and c not in "\n\t\r" for c in text)
