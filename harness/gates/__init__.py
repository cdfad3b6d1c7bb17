"""The gate registry: every gate's :class:`~harness.gates.spec.GateSpec`, the only list of gates.

The plugin parametrizes and marks gate tests from it, the campaign loader parses each
``[policy.<name>]`` table with the spec's policy, and the report decides which receipts count toward
a variant's qualification and draws each gate's section from it.
"""

from __future__ import annotations

import importlib
import pkgutil

from ..domain import DTYPES, PEERS, ModelSpec, Variant
from .spec import RECIPE, Evidence, Figure, GateSpec, NoEvidence, NoPolicy, Policy  # noqa: F401  (a gate declaration's names)

# The report's section order of the gates that predate discovery; a gate module added later sorts after them, by name.
_ORDER = ("cache", "quantization", "behavior", "behavior_calibration", "throughput_native", "throughput_python",
          "peer_ortgenai", "peer_llamacpp", "peer_wllama", "throughput_browser", "step_latency", "throughput_goal",
          "winrule", "streaming", "training", "export", "overlay_delta", "overlay_quality", "overlay_cost",
          "overlay_behavior", "overlay_routing")


def discover(package: str, path) -> list[GateSpec]:
    """Every module of ``package`` (its ``path``) that declares ``SPEC`` (or ``SPECS``, several gates), in module
    name order: adding a gate is adding its module."""
    found: list[GateSpec] = []
    for info in sorted(pkgutil.iter_modules(path), key=lambda i: i.name):
        module = importlib.import_module(f"{package}.{info.name}")
        found += [s for s in (getattr(module, "SPEC", None), *getattr(module, "SPECS", ())) if isinstance(s, GateSpec)]
    names = [s.name for s in found]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"gate name(s) declared by more than one module of {package}: {', '.join(twice)}")
    return found


def _ordered(specs: list[GateSpec]) -> dict[str, GateSpec]:
    rank = {n: i for i, n in enumerate(_ORDER)}
    return {s.name: s for s in sorted(specs, key=lambda s: (rank.get(s.name, len(rank)), s.name))}


GATES: dict[str, GateSpec] = _ordered(discover(__name__, __path__))


def register(spec: GateSpec) -> GateSpec:
    """Add a gate declared outside this package (a project's conftest, the suite's own tests).

    Must run before the campaign loads (a ``conftest.py`` at import time), so its policy table is checked
    with the others; a name is registered once.
    """
    if spec.name in GATES and GATES[spec.name] is not spec:
        raise ValueError(f"gate {spec.name!r} is already registered")
    GATES[spec.name] = spec
    return spec


def get(name: str) -> GateSpec:
    try:
        return GATES[name]
    except KeyError:
        raise KeyError(f"unknown gate {name!r} (registered: {', '.join(GATES)})") from None


def targets(spec: GateSpec, model: ModelSpec) -> list[Variant]:
    """The variants and peer graphs of ``model`` a gate is parametrized over, in a stable order (a browser-only
    gate: the own variants the model delivers to the browser)."""
    out = [Variant(model, d) for d in model.dtypes if d in spec.applies_to]
    out += [Variant(model, r.id, recipe=r) for r in sorted(model.recipes, key=lambda r: r.expected_cost())
            if spec.applies(r.id, recipe=r)]
    if spec.browser_only:
        out = [v for v in out if model.in_browser(v.dtype)]
    for kind, peer in PEERS.items():
        label = peer.label(model) if kind in spec.applies_to else None
        if label is not None:
            out.append(Variant(model, label, peer=kind))
    return out


def qualifying(dtype: str, recipe=None, browser: bool = True) -> list[GateSpec]:
    """The variant-level gates a variant of ``dtype`` (a recipe: ``recipe``, a Recipe or a receipt's recipe
    block) must pass, each with a receipt, to be qualified; the browser-only gates when it is delivered to the
    browser (``browser``)."""
    required = [s for s in GATES.values() if s.level == "variant" and s.required and (browser or not s.browser_only)]
    if recipe is not None:
        policy_dtype = recipe["policy_dtype"] if isinstance(recipe, dict) else recipe.policy_dtype
        return [s for s in required if RECIPE in s.applies_to and policy_dtype in s.applies_to]
    return [s for s in required if dtype in s.applies_to and dtype in DTYPES]


def table_figures() -> tuple[str, ...]:
    """The figures the report's variants table shows: every registered gate's figures marked ``table``."""
    return tuple(dict.fromkeys(f.name for s in GATES.values() for f in s.figures if f.table))


def level(name: str) -> str:
    """A receipt's gate level; a gate this harness no longer knows is reported at run level."""
    spec = GATES.get(name)
    return spec.level if spec else "run"

