"""What a gate is: one declaration read by the plugin, the campaign loader and the report.

A :class:`GateSpec` spells the gate's name once, says whether it judges a variant or the run,
which dtypes and peer graphs it applies to, which typed :class:`Policy` the campaign's
``[policy.<name>]`` table parses into (checked when the campaign loads, long before an artifact is
built), the pure ``decide(evidence, policy) -> Verdict`` every gate shares, and the gate's own report
section.  Adding a gate is one module that declares its spec plus one test file.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Literal, Mapping, Sequence

from ..fields import Where, table
from ..verdict import Verdict

Evidence = Mapping[str, Any]


@dataclass(frozen=True)
class Policy:
    """A gate's policy: a frozen dataclass whose ``parse`` names file, field and value on error.

    The base class parses a table of scalar fields by their annotations' defaults; gates with nested
    tables override :meth:`parse`.  ``REQUIRED`` says the campaign must have the table (no defaults
    would be honest), else a missing table means the defaults.
    """

    REQUIRED: ClassVar[bool] = False

    @classmethod
    def parse(cls, raw: Any, where: Where) -> "Policy":
        if raw is None:
            if cls.REQUIRED:
                raise where.fail("missing table")
            return cls()
        names = {f.name for f in dataclasses.fields(cls)}
        table(where, raw, names)
        if raw:
            raise where.fail(f"{cls.__name__} has no parser for keys {', '.join(sorted(raw))}")
        return cls()

    def as_dict(self) -> dict[str, Any]:
        def plain(v):
            if dataclasses.is_dataclass(v):
                return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
            if isinstance(v, Mapping):
                return {k: plain(x) for k, x in v.items()}
            if isinstance(v, (tuple, list)):
                return [plain(x) for x in v]
            return v
        return plain(self)


@dataclass(frozen=True)
class NoPolicy(Policy):
    """A gate with nothing to configure: any key in its table is refused."""


# A gate's report section: every receipt view of the run (harness.view.ReceiptView; a section may
# span several gates' receipts, as the lane table does) -> Markdown lines.
Section = Callable[[Sequence[Any]], list[str]]


RECIPE = "recipe"   # applies_to: the campaign's [[recipes]] of a dtype the gate also names


@dataclass(frozen=True)
class GateSpec:
    name: str                                   # the one place the gate's string is spelled
    level: Literal["variant", "run"]            # judges one variant, or the run (never counted toward a variant)
    applies_to: tuple[str, ...]                 # dtypes, "recipe" and peer kinds (harness.domain.PEERS); () = not per variant
    policy: type[Policy]
    decide: Callable[[Evidence, Any], Verdict]  # pure: recorded evidence and the parsed policy -> Verdict
    describe: str
    required: bool = True                       # a variant-level gate whose missing receipt blocks qualification
    section: Section | None = None              # the gate's report section: receipt views -> Markdown lines
    browser_only: bool = False                  # judges only the variants a model delivers to the browser

    def __post_init__(self):
        if not self.name.isidentifier() or self.name != self.name.lower():
            raise ValueError(f"gate name {self.name!r} must be a lowercase identifier (it is a pytest marker)")
        if self.level not in ("variant", "run"):
            raise ValueError(f"gate {self.name}: level must be 'variant' or 'run', got {self.level!r}")

    def applies(self, dtype: str | None, peer: str | None = None, recipe=None) -> bool:
        """Whether the gate judges this variant: a dtype or peer kind it names; a recipe (harness.recipes) when
        it names "recipe" and the recipe's policy dtype."""
        if recipe is not None:
            return RECIPE in self.applies_to and recipe.policy_dtype in self.applies_to
        return (peer or dtype) in self.applies_to
