"""The gate contract the registry promises: every gate's evidence is a frozen dataclass its rule reads, its
figures are declared, and its policy is its fields (parsed generically, every error naming file, field and
value)."""

import dataclasses
from dataclasses import dataclass

import pytest

from harness import gates
from harness.errors import CampaignError, EvidenceError
from harness.fields import Where, knob, parse_fields
from harness.gates.spec import Evidence, NoEvidence, Policy

W = Where("c.toml", "policy.x")
# a policy whose campaign keys cannot be one field each (two keys read together) keeps a parser of its own
OWN_PARSERS = {"streaming"}


@pytest.mark.parametrize("name", sorted(gates.GATES))
def test_every_gate_declares_a_frozen_evidence_type_and_its_figures(name):
    spec = gates.GATES[name]
    assert issubclass(spec.evidence, Evidence) and spec.evidence is not NoEvidence
    assert spec.evidence.__dataclass_params__.frozen
    names = [f.name for f in spec.figures]
    assert len(names) == len(set(names)), names


@pytest.mark.parametrize("name", sorted(gates.GATES))
def test_every_policy_is_its_fields(name):
    policy = gates.GATES[name].policy
    if name not in OWN_PARSERS:
        assert policy.parse.__func__ is Policy.parse.__func__, f"{policy.__name__} overrides parse"
    if not policy.REQUIRED:
        assert policy.parse(None, W) == policy()
    with pytest.raises(CampaignError, match=r"c\.toml: policy\.x: unknown key\(s\) no_such_key"):
        policy.parse({"no_such_key": 1}, W)


def test_the_table_figures_include_the_quantization_and_behavior_figures():
    shown = gates.table_figures()
    assert {"relative_increase", "kld_mean", "quality_index", "step_ms_median", "download_bytes"} <= set(shown)


@dataclass(frozen=True)
class Inner:
    n: int = knob(1, lo=1)
    label: str = knob("a", choices=("a", "b"))


@dataclass(frozen=True)
class Toy(Policy):
    rate: float = knob(0.5, hi=1.0)
    count: int = knob(3, lo=0, hi=9)
    name: str | None = None
    names: tuple[str, ...] = knob(("x",), choices=("x", "y"), nonempty=False)
    sizes: tuple[int, ...] = knob((1,), lo=1)
    limits: dict[str, float] = knob(default_factory=dict, keys=lambda k: k.startswith("q"), keys_doc="expected a qN")
    inner: Inner = Inner()
    inners: dict[str, Inner] = dataclasses.field(default_factory=dict)
    flag: bool = False
    must: int = knob(0, required=True)


def parse(raw):
    return Toy.parse(raw, W)


def test_the_generic_parser_reads_each_type_by_its_annotation():
    p = parse({"rate": 1, "count": 9, "name": "n", "names": ["y"], "sizes": [2, 3], "limits": {"q4": 0.25},
               "inner": {"n": 4}, "inners": {"k": {"label": "b"}}, "flag": True, "must": 7})
    assert p == Toy(1.0, 9, "n", ("y",), (2, 3), {"q4": 0.25}, Inner(4, "a"), {"k": Inner(1, "b")}, True, 7)
    assert isinstance(p.rate, float)


@pytest.mark.parametrize("raw, says", [
    ({"must": 1, "rate": 1.5}, r"policy\.x\.rate: must be <= 1\.0, got 1\.5"),
    ({"must": 1, "rate": -0.1}, r"policy\.x\.rate: must be >= 0\.0"),
    ({"must": 1, "rate": True}, r"policy\.x\.rate: expected a finite number, got True"),
    ({"must": 1, "count": 10}, r"policy\.x\.count: must be <= 9, got 10"),
    ({"must": 1, "count": 2.0}, r"policy\.x\.count: expected an integer, got 2\.0"),
    ({"must": 1, "name": ""}, r"policy\.x\.name: expected a non-empty string"),
    ({"must": 1, "names": ["z"]}, r"policy\.x\.names\[0\]: expected one of x, y, got 'z'"),
    ({"must": 1, "sizes": [1, 0]}, r"policy\.x\.sizes\[1\]: must be >= 1, got 0"),
    ({"must": 1, "sizes": []}, r"policy\.x\.sizes: expected a non-empty list"),
    ({"must": 1, "limits": {"fp32": 0.1}}, r"policy\.x\.limits\.fp32: expected a qN, got 'fp32'"),
    ({"must": 1, "inner": {"label": "c"}}, r"policy\.x\.inner\.label: expected one of a, b, got 'c'"),
    ({"must": 1, "inner": {"extra": 1}}, r"policy\.x\.inner: unknown key\(s\) extra"),
    ({"must": 1, "inners": {"k": {"n": 0}}}, r"policy\.x\.inners\.k\.n: must be >= 1, got 0"),
    ({"must": 1, "flag": "yes"}, r"policy\.x\.flag: expected true or false"),
    ({"rate": 0.2}, r"policy\.x: missing required key 'must'"),
])
def test_the_generic_parser_names_file_field_and_value(raw, says):
    with pytest.raises(CampaignError, match=says):
        parse(raw)


def test_finish_checks_across_fields():
    @dataclass(frozen=True)
    class Pair(Policy):
        low: int = 0
        high: int = 1

        @classmethod
        def finish(cls, values, where):
            if values.get("low", cls.low) > values.get("high", cls.high):
                raise where.fail("low is above high")
            return values

    assert Pair.parse({"low": 1, "high": 2}, W) == Pair(1, 2)
    with pytest.raises(CampaignError, match=r"c\.toml: policy\.x: low is above high"):
        Pair.parse({"low": 3}, W)


def test_evidence_pick_takes_the_fields_and_names_what_is_missing():
    @dataclass(frozen=True)
    class E(Evidence):
        a: int
        b: str = "d"

    assert E.pick({"a": 1, "other": 2}) == E(1, "d")
    assert E.pick({"a": 1}, b="x") == E(1, "x")
    with pytest.raises(EvidenceError, match=r"E: the record has no a \(it has other\)"):
        E.pick({"other": 2})


def test_parse_fields_works_on_any_dataclass():
    assert parse_fields(Inner, {"n": 2}, W) == Inner(2, "a")
