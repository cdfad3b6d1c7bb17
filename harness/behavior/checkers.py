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
