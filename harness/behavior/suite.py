"""Scenario suites: loaded from TOML, validated, rendered with the model's own chat template, hashed.

Every error names the file and the case.  Validation happens before any model runs: an unknown
checker, a duplicated case id, an expected value of the wrong type, or a rendered prompt whose
tokens plus budget exceed the model's context are refused here.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import ScenarioError
from ..hashing import sha256_file, sha256_json
from .checkers import CHECKERS

SCHEMA_VERSION = 1
_CASE_KEYS = {"id", "category", "prompt", "checker", "expected", "max_new_tokens", "system"}


@dataclass(frozen=True)
class Case:
    id: str
    category: str
    prompt: str
    checker: str
    expected: Any
    max_new_tokens: int
    system: str | None = None

    def messages(self) -> list[dict[str, str]]:
        m = [{"role": "system", "content": self.system}] if self.system else []
        return m + [{"role": "user", "content": self.prompt}]


@dataclass(frozen=True)
class Suite:
    path: Path
    name: str
    version: str
    cases: tuple[Case, ...]
    file_sha256: str

    @property
    def categories(self) -> list[str]:
        return sorted({c.category for c in self.cases})

    def sliced(self, per_category: int) -> "Suite":
        """The first ``per_category`` cases of each category, in file order (a generated suite's order within a
        category is its seeded draw, so the first cases are a fair sample); the version names the slice, so the
        rendered suite's SHA-256 differs from the whole suite's."""
        if isinstance(per_category, bool) or not isinstance(per_category, int) or per_category < 1:
            raise ScenarioError(f"{self.path}: a slice takes a positive number of cases per category, "
                                f"got {per_category!r}")
        seen: dict[str, int] = {}
        kept = []
        for c in self.cases:
            seen[c.category] = seen.get(c.category, 0) + 1
            if seen[c.category] <= per_category:
                kept.append(c)
        return Suite(self.path, self.name, f"{self.version}/first-{per_category}-per-category", tuple(kept),
                     self.file_sha256)


@dataclass(frozen=True)
class RenderedCase:
    case: Case
    prompt_ids: tuple[int, ...]


@dataclass(frozen=True)
class RenderedSuite:
    suite: Suite
    cases: tuple[RenderedCase, ...]
    context: int
    sha256: str            # rendered prompt ids, budgets, checker names/versions/expected values

    def describe(self) -> dict[str, Any]:
        return {"name": self.suite.name, "version": self.suite.version, "path": str(self.suite.path),
                "file_sha256": self.suite.file_sha256, "sha256": self.sha256, "cases": len(self.cases),
                "categories": {cat: sum(1 for r in self.cases if r.case.category == cat)
                               for cat in self.suite.categories}, "context": self.context}


def _fail(path: Path, where: str, what: str) -> ScenarioError:
    return ScenarioError(f"{path}: {where}: {what}")


def load(path: Path | str) -> Suite:
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read the scenario file: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{path}: not valid TOML: {exc}") from exc
    if raw.get("schema_version") != SCHEMA_VERSION:
        raise _fail(path, "schema_version", f"expected {SCHEMA_VERSION}, got {raw.get('schema_version')!r}")
    for key in ("name", "version"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise _fail(path, key, "expected a non-empty string")
    default_budget = raw.get("default_max_new_tokens", 24)
    cases_raw = raw.get("cases")
    if not isinstance(cases_raw, list) or not cases_raw:
        raise _fail(path, "cases", "expected a non-empty array of [[cases]] tables")
    seen: dict[str, int] = {}
    cases = []
    for i, c in enumerate(cases_raw):
        where = f"cases[{i}]"
        if not isinstance(c, dict):
            raise _fail(path, where, "expected a table")
        cid = c.get("id")
        if not isinstance(cid, str) or not cid:
            raise _fail(path, f"{where}.id", "expected a non-empty string")
        where = f"case {cid!r} ({where})"
        if cid in seen:
            raise _fail(path, where, f"duplicated case id (first at cases[{seen[cid]}])")
        seen[cid] = i
        unknown = set(c) - _CASE_KEYS
        if unknown:
            raise _fail(path, where, f"unknown keys {sorted(unknown)} (known: {sorted(_CASE_KEYS)})")
        for key in ("category", "prompt", "checker"):
            if not isinstance(c.get(key), str) or not c[key]:
                raise _fail(path, f"{where}.{key}", "expected a non-empty string")
        checker = CHECKERS.get(c["checker"])
        if checker is None:
            raise _fail(path, f"{where}.checker", f"unknown checker {c['checker']!r} (known: {', '.join(sorted(CHECKERS))})")
        expected = c.get("expected")
        if checker.expects is None:
            if expected is not None:
                raise _fail(path, f"{where}.expected", f"checker {checker.name!r} takes no expected value")
        elif not isinstance(expected, checker.expects) or isinstance(expected, bool) or expected in ([], ""):
            raise _fail(path, f"{where}.expected", f"checker {checker.name!r} needs a non-empty "
                        f"{getattr(checker.expects, '__name__', checker.expects)}, got {expected!r}")
        if isinstance(expected, list):
            expected = [str(e).lower() if checker.name != "json_keys" else str(e) for e in expected]
        budget = c.get("max_new_tokens", default_budget)
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
            raise _fail(path, f"{where}.max_new_tokens", f"expected a positive integer, got {budget!r}")
        cases.append(Case(cid, c["category"], c["prompt"], c["checker"], expected, budget, c.get("system")))
    return Suite(path, raw["name"], raw["version"], tuple(cases), sha256_file(path))


def render(suite: Suite, render_prompt: Callable[[list[dict[str, str]]], list[int]], context: int,
           template_id: str) -> RenderedSuite:
    """Render each case with ``render_prompt`` (the model's chat template) and check it fits ``context``."""
    rendered = []
    for c in suite.cases:
        ids = tuple(int(t) for t in render_prompt(c.messages()))
        if not ids:
            raise _fail(suite.path, f"case {c.id!r}", "the chat template rendered an empty prompt")
        if len(ids) + c.max_new_tokens > context:
            raise _fail(suite.path, f"case {c.id!r}", f"rendered prompt is {len(ids)} tokens; with max_new_tokens "
                        f"{c.max_new_tokens} it exceeds the model's context of {context} tokens")
        rendered.append(RenderedCase(c, ids))
    identity = {"suite": suite.name, "version": suite.version, "template": template_id,
                "cases": [{"id": r.case.id, "category": r.case.category, "prompt_ids": list(r.prompt_ids),
                           "max_new_tokens": r.case.max_new_tokens, "checker": r.case.checker,
                           "checker_version": CHECKERS[r.case.checker].version, "expected": r.case.expected}
                          for r in rendered]}
    return RenderedSuite(suite, tuple(rendered), context, sha256_json(identity))
