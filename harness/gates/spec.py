"""What a gate is: one declaration read by the plugin, the campaign loader and the report.

A :class:`GateSpec` spells the gate's name once, says whether it judges a variant or the run,
which dtypes and peer graphs it applies to, which typed :class:`Policy` the campaign's
``[policy.<name>]`` table parses into (checked when the campaign loads, long before an artifact is
built), its frozen ``evidence`` type, the pure ``decide(evidence, policy) -> Verdict`` every gate shares, the
``figures`` its verdicts carry, and the gate's own report section.  Adding a gate is one module that declares its spec plus one test file.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Literal, Mapping, Sequence

from .. import fmt  # noqa: F401  (the section type)
from ..errors import EvidenceError
from ..fields import Where, parse_fields
from ..verdict import Verdict



@dataclass(frozen=True)
class Evidence:
    """The base of a gate's evidence type: a frozen dataclass of what its test recorded.

    ``pick`` builds one from a larger record (a fixture's dict), taking the fields the type names and refusing a
    record that lacks one, by name.
    """

    @classmethod
    def pick(cls, record: Mapping[str, Any], **more: Any):
        data = {**record, **more}
        fs = [f for f in dataclasses.fields(cls) if f.init]
        missing = [f.name for f in fs
                   if f.name not in data and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        if missing:
            raise EvidenceError(f"{cls.__qualname__}: the record has no {', '.join(missing)} "
                                f"(it has {', '.join(sorted(data)) or 'nothing'})")
        return cls(**{f.name: data[f.name] for f in fs if f.name in data})


@dataclass(frozen=True)
class NoEvidence(Evidence):
    """A gate whose test records nothing its rule reads."""


@dataclass(frozen=True)
class Figure:
    """A figure a gate's verdict carries (a ``Measurement`` of that name): its unit, which way is better, and
    whether the report's variants table shows it."""

    name: str
    unit: str
    better: Literal["lower", "higher", "neither"] = "neither"
    table: bool = False


@dataclass(frozen=True)
class Policy:
    """A gate's policy: a frozen dataclass whose fields are its campaign keys.

    ``parse`` is generic (:func:`harness.fields.parse_fields`): each field is read by its type, with bounds,
    choices and required-ness from :func:`harness.fields.knob` metadata, and every error names file, field and
    value; a class checks across fields in a ``finish(values, where)`` classmethod.  ``REQUIRED`` says the campaign
    must have the table (no defaults would be honest), else a missing table means the defaults.
    """

    REQUIRED: ClassVar[bool] = False

    @classmethod
    def parse(cls, raw: Any, where: Where) -> "Policy":
        if raw is None:
            if cls.REQUIRED:
                raise where.fail("missing table")
            return cls()
        return parse_fields(cls, raw, where)

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


# A gate's report sections: every receipt view of the run (harness.view.ReceiptView; a section may span several
# gates' receipts, as the lane table does) -> the sections it shows (harness.fmt.Section: a heading, then lines and
# tables as data), none when the run holds nothing of it.
Section = Callable[[Sequence[Any]], "list[fmt.Section]"]


RECIPE = "recipe"   # applies_to: the campaign's [[recipes]] of a dtype the gate also names


@dataclass(frozen=True)
class GateSpec:
    name: str                                   # the one place the gate's string is spelled
    level: Literal["variant", "run"]            # judges one variant, or the run (never counted toward a variant)
    applies_to: tuple[str, ...]                 # dtypes, "recipe" and peer kinds (harness.domain.PEERS); () = not per variant
    policy: type[Policy]
    evidence: type                              # the frozen dataclass ``decide`` reads (the gate's recorded evidence)
    decide: Callable[[Any, Any], Verdict]       # pure: (evidence, parsed policy) -> Verdict
    describe: str
    figures: tuple[Figure, ...] = ()            # the figures its verdicts carry
    required: bool = True                       # a variant-level gate whose missing receipt blocks qualification
    section: Section | None = None              # the gate's report sections: receipt views -> [fmt.Section]
    browser_only: bool = False                  # judges only the variants a model delivers to the browser

    def __post_init__(self):
        if not self.name.isidentifier() or self.name != self.name.lower():
            raise ValueError(f"gate name {self.name!r} must be a lowercase identifier (it is a pytest marker)")
        if self.level not in ("variant", "run"):
            raise ValueError(f"gate {self.name}: level must be 'variant' or 'run', got {self.level!r}")
        if not (dataclasses.is_dataclass(self.evidence) and self.evidence.__dataclass_params__.frozen):
            raise ValueError(f"gate {self.name}: evidence must be a frozen dataclass, got {self.evidence!r}")

    def applies(self, dtype: str | None, peer: str | None = None, recipe=None) -> bool:
        """Whether the gate judges this variant: a dtype or peer kind it names; a recipe (harness.recipes) when
        it names "recipe" and the recipe's policy dtype."""
        if recipe is not None:
            return RECIPE in self.applies_to and recipe.policy_dtype in self.applies_to
        return (peer or dtype) in self.applies_to
