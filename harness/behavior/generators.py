"""Versioned, seeded generators of behavior scenario cases, and the command that writes a suite from them.

Twenty hand-written cases per category cannot tell a 0.05 change of a rate from noise, so the chat
suite from version 3 on is generated: one generator per category draws cases from the vocabulary
of :mod:`harness.behavior.vocabulary` (drawn by :mod:`harness.behavior.drafts`) with a private ``random.Random(f"{seed}:{category}:{version}")`` (no global state), keeping
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
from .drafts import (DEFAULT_MAX_NEW_TOKENS, Draft, _arithmetic_case, _extraction_case, _format_case,
                     _instruction_case, _stopping_case)

SUITE_NAME = "chat"
SUITE_VERSION = "3.0"
MAX_PROMPT_WORDS = 25          # the CI model's context is 128 tokens, chat template and budget included
MAX_PROMPT_CHARS = 160
FACTUAL_SOURCE = Path(__file__).with_name("chat-v2.toml")
FACTUAL_CATEGORY = "factual"
FACTUAL_VERSION = "chat-v2"    # the curated cases' source, named in the header instead of a generator version

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
