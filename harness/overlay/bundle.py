"""One deployable file per skill (issue 34; seed 004's skill record): the overlay's tensors, the routing subspaces
that decide when to apply it, and the contract it was judged under. Python (:func:`read`) and the native probe
(``--bundle``) read it alike and strictly: every field checked, each refusal naming the file and the field.

The layout is the overlay file's (:mod:`.fileformat`: safetensors, replacement initializers by ONNX name) plus

- four tensors under reserved names (``fileformat.RESERVED``): ``__routing__/<s>/mean`` (F32 ``[dim]``) and
  ``__routing__/<s>/basis`` (F32 ``[rank, dim]``, orthonormal rows) for ``<s>`` in ``general`` and ``skill``;
- ``__metadata__`` strings beside the overlay's (``gatehouse_overlay``, ``backbone_sha256``, ...):
  ``gatehouse_bundle`` ("1"), ``skill`` (the bundle's id), and two JSON texts:

  ``routing``: ``{"version": "1", "metric": "mse", "feature": {"kind": "present_value_mean_std", "layer": L,
  "kv_heads": H, "head_dim": D, "dim": 2*H*D}, "subspaces": {"general"|"skill": {"rank", "fit_prompts",
  "prompt_tokens", "prompts_sha256", "text"}}}``: φ is :func:`harness.overlay.routing.phi_of_values` of the
  backbone's ``present.L.value`` after a prefill of the prompt;

  ``contract``: ``{"version": "1", "skill", "model", "dtype", "backbone_sha256", "gates": {name: {"outcome":
  "pass"|"fail", "reasons": [...], "figures": {name: {"value", "unit", "count"}}, "policy": {...}}},
  "not_judged": {name: why}, "harness_sha256", "suite_sha256", "campaign_sha256", "onnxruntime", "judged_at"}``.

Routing among bundles (:func:`choose`, the probe's rule): every bundle's ``general`` subspace, then every
``skill`` subspace, each group in skill-id order; the smallest reconstruction error wins, the first on a tie; a
``general`` subspace winning means the backbone. Bundles routed together must share one feature.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import CampaignError
from ..fields import Where, integer, sha256, table, text
from . import fileformat
from .fileformat import OverlayError
from .routing import FEATURE, GENERAL, MAX_RANK, SKILL, Subspace, argmin

FORMAT = "1"
SIDES = (GENERAL, SKILL)
_FIT = ("rank", "fit_prompts", "prompt_tokens", "prompts_sha256", "text")
_CONTRACT = ("version", "skill", "model", "dtype", "backbone_sha256", "gates", "not_judged", "harness_sha256",
             "suite_sha256", "campaign_sha256", "onnxruntime", "judged_at")
OUTCOMES = ("pass", "fail")


@dataclass(frozen=True)
class Feature:
    """φ's definition: ``present.{layer}.value`` of a graph with ``kv_heads`` x ``head_dim`` values per token."""

    layer: int
    kv_heads: int
    head_dim: int

    @property
    def dim(self) -> int:
        return 2 * self.kv_heads * self.head_dim

    def as_dict(self) -> dict[str, Any]:
        return {"kind": FEATURE, "layer": self.layer, "kv_heads": self.kv_heads, "head_dim": self.head_dim,
                "dim": self.dim}


@dataclass(frozen=True)
class Routing:
    feature: Feature
    subspaces: Mapping[str, Subspace]           # general, skill
    fit: Mapping[str, Mapping[str, Any]]        # general, skill: fit_prompts, prompt_tokens, prompts_sha256, text

    def as_dict(self) -> dict[str, Any]:
        return {"version": FORMAT, "metric": "mse", "feature": self.feature.as_dict(),
                "subspaces": {s: {"rank": self.subspaces[s].rank, **{k: self.fit[s][k] for k in _FIT[1:]}}
                              for s in SIDES}}


@dataclass(frozen=True)
class Bundle:
    path: Path
    skill: str
    overlay: fileformat.Overlay      # the tensors the probe applies (``overlay.tensors``)
    routing: Routing
    contract: Mapping[str, Any]


def write(path: Path | str, overlay: fileformat.Overlay, skill: str, routing: Routing,
          contract: Mapping[str, Any]) -> Bundle:
    """Write the bundle of ``overlay`` (atomically, :func:`fileformat.write`) and read it back strictly."""
    tensors = dict(overlay.tensors)
    for side in SIDES:
        s = routing.subspaces[side]
        tensors[f"{fileformat.RESERVED}{side}/mean"] = np.asarray(s.mean, np.float32)
        tensors[f"{fileformat.RESERVED}{side}/basis"] = np.asarray(s.basis, np.float32).reshape(s.rank,
                                                                                                routing.feature.dim)
    meta = {k: v for k, v in overlay.metadata.items() if k != "gatehouse_overlay"}
    meta.update(gatehouse_bundle=FORMAT, skill=skill, routing=json.dumps(routing.as_dict(), sort_keys=True),
                contract=json.dumps(contract, sort_keys=True, allow_nan=False))
    fileformat.write(path, tensors, meta)
    return read(path, overlay.backbone_sha256)


def read(path: Path | str, backbone_sha256: str | None = None) -> Bundle:
    """Read and check a bundle: the overlay file's checks, then its routing and its contract, field by field."""
    ov = fileformat.read(path, backbone_sha256)
    where = Where(ov.path, "__metadata__")
    try:
        if ov.metadata.get("gatehouse_bundle") != FORMAT:
            found = ov.metadata.get("gatehouse_bundle")
            raise where.child("gatehouse_bundle").fail(f"must be {FORMAT!r}, got {found!r}: an overlay file, not a "
                                                       f"skill bundle")
        skill = text(where.child("skill"), ov.metadata.get("skill"))
        routing = _routing(where.child("routing"), ov)
        contract = _contract(where.child("contract"), ov, skill)
    except CampaignError as exc:
        raise OverlayError(str(exc)) from None
    return Bundle(ov.path, skill, ov, routing, contract)


def _json(where: Where, raw: Any) -> dict:
    if not isinstance(raw, str):
        raise where.fail("missing: a skill bundle records it as a JSON text")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise where.fail(f"is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise where.fail(f"expected a JSON object, got {value!r}")
    return value


def _routing(where: Where, ov: fileformat.Overlay) -> Routing:
    raw = table(where, _json(where, ov.metadata.get("routing")), {"version", "metric", "feature", "subspaces"},
                {"version", "metric", "feature", "subspaces"})
    text(where.child("version"), raw["version"], (FORMAT,))
    text(where.child("metric"), raw["metric"], ("mse",))
    fw = where.child("feature")
    f = table(fw, raw["feature"], {"kind", "layer", "kv_heads", "head_dim", "dim"},
              {"kind", "layer", "kv_heads", "head_dim", "dim"})
    text(fw.child("kind"), f["kind"], (FEATURE,))
    feature = Feature(integer(fw.child("layer"), f["layer"], 0), integer(fw.child("kv_heads"), f["kv_heads"], 1),
                      integer(fw.child("head_dim"), f["head_dim"], 1))
    if integer(fw.child("dim"), f["dim"]) != feature.dim:
        raise fw.child("dim").fail(f"expected 2 x kv_heads x head_dim = {feature.dim}, got {f['dim']}")
    sw = where.child("subspaces")
    table(sw, raw["subspaces"], SIDES, SIDES)
    names = {f"{fileformat.RESERVED}{s}/{k}" for s in SIDES for k in ("mean", "basis")}
    for name in sorted(set(ov.reserved) - names):
        raise OverlayError(f"{ov.path}: tensor {name!r}: not a routing tensor (a bundle holds "
                           f"{', '.join(sorted(names))})")
    subspaces, fit = {}, {}
    for side in SIDES:
        w = sw.child(side)
        entry = table(w, raw["subspaces"][side], _FIT, _FIT)
        rank = integer(w.child("rank"), entry["rank"], 0, MAX_RANK)
        fit[side] = {"fit_prompts": integer(w.child("fit_prompts"), entry["fit_prompts"], 1),
                     "prompt_tokens": integer(w.child("prompt_tokens"), entry["prompt_tokens"], 1),
                     "prompts_sha256": sha256(w.child("prompts_sha256"), entry["prompts_sha256"]),
                     "text": text(w.child("text"), entry["text"])}
        if rank > max(0, fit[side]["fit_prompts"] - 1):
            raise w.child("rank").fail(f"{rank} is above fit_prompts - 1 = {fit[side]['fit_prompts'] - 1}")
        mean = _tensor(ov, f"{side}/mean", (feature.dim,))
        basis = _tensor(ov, f"{side}/basis", (rank, feature.dim))
        subspaces[side] = Subspace(mean.astype(np.float64), basis.astype(np.float64))
    return Routing(feature, subspaces, fit)


def _tensor(ov: fileformat.Overlay, name: str, shape: tuple[int, ...]) -> np.ndarray:
    full = f"{fileformat.RESERVED}{name}"
    arr = ov.reserved.get(full)
    if arr is None:
        raise OverlayError(f"{ov.path}: tensor {full!r} is missing (__metadata__.routing names it)")
    if arr.dtype.newbyteorder("=") != np.float32 or tuple(arr.shape) != shape:
        raise OverlayError(f"{ov.path}: tensor {full!r} is {arr.dtype}{list(arr.shape)}, __metadata__.routing says "
                           f"float32{list(shape)}")
    if not np.all(np.isfinite(arr)):
        raise OverlayError(f"{ov.path}: tensor {full!r} holds a value that is not finite")
    return arr


def _contract(where: Where, ov: fileformat.Overlay, skill: str) -> dict[str, Any]:
    c = table(where, _json(where, ov.metadata.get("contract")), _CONTRACT, _CONTRACT)
    text(where.child("version"), c["version"], (FORMAT,))
    text(where.child("skill"), c["skill"], (skill,))
    text(where.child("backbone_sha256"), c["backbone_sha256"], (ov.backbone_sha256,))
    for key in ("model", "dtype", "onnxruntime", "judged_at"):
        text(where.child(key), c[key])
    sha256(where.child("harness_sha256"), c["harness_sha256"])
    for key in ("suite_sha256", "campaign_sha256"):
        if c[key] is not None:
            sha256(where.child(key), c[key])
    gw = where.child("gates")
    if not table(gw, c["gates"]):
        raise gw.fail("no gate verdict: a contract records at least one")
    for name, g in c["gates"].items():
        w = gw.child(name)
        table(w, g, ("outcome", "reasons", "figures", "policy"), ("outcome", "reasons", "figures", "policy"))
        text(w.child("outcome"), g["outcome"], OUTCOMES)
        if not isinstance(g["reasons"], list) or not all(isinstance(r, str) and r for r in g["reasons"]):
            raise w.child("reasons").fail(f"expected a list of reasons, got {g['reasons']!r}")
        if (g["outcome"] == "pass") != (not g["reasons"]):
            raise w.child("reasons").fail(f"a {g['outcome']} verdict with {len(g['reasons'])} reason(s)")
        table(w.child("policy"), g["policy"])
        for fname, m in table(w.child("figures"), g["figures"]).items():
            fw = w.child("figures").child(fname)
            table(fw, m, ("value", "unit", "count"), ("value", "unit", "count"))
            if not (m["value"] is None or isinstance(m["value"], (int, float, str, bool))):
                raise fw.child("value").fail(f"expected a number, a string, true/false or null, got {m['value']!r}")
            text(fw.child("unit"), m["unit"])
            if m["count"] is not None:
                integer(fw.child("count"), m["count"], 0)
    for name, why in table(where.child("not_judged"), c["not_judged"]).items():
        text(where.child("not_judged").child(name), why)
    return c


def contract(*, skill: str, model: str, dtype: str, backbone_sha256: str, verdicts: Mapping[str, Any],
             policies: Mapping[str, Mapping[str, Any]], not_judged: Mapping[str, str], harness_sha256: str,
             suite_sha256: str | None, campaign_sha256: str | None, onnxruntime: str, judged_at: str) -> dict:
    """A contract from the gates' verdicts (:class:`harness.verdict.Verdict`) and the policies they were decided
    with, in the shape :func:`read` checks."""
    gates = {name: {"outcome": "pass" if v.passed else "fail", "reasons": list(v.reasons),
                    "figures": {k: m.as_dict() for k, m in sorted(v.figures.items())},
                    "policy": dict(policies[name])} for name, v in sorted(verdicts.items())}
    return {"version": FORMAT, "skill": skill, "model": model, "dtype": dtype, "backbone_sha256": backbone_sha256,
            "gates": gates, "not_judged": dict(not_judged), "harness_sha256": harness_sha256,
            "suite_sha256": suite_sha256, "campaign_sha256": campaign_sha256, "onnxruntime": onnxruntime,
            "judged_at": judged_at}


def check_set(bundles: Sequence[Bundle]) -> None:
    """Bundles routed together: distinct skills, one feature (their errors are compared), one backbone."""
    if not bundles:
        raise OverlayError("no bundle to route among")
    first = bundles[0]
    seen: dict[str, Path] = {}
    for b in bundles:
        if b.skill in seen:
            raise OverlayError(f"{b.path}: __metadata__.skill {b.skill!r} is also the skill of {seen[b.skill]}")
        seen[b.skill] = b.path
        if b.routing.feature != first.routing.feature:
            raise OverlayError(f"{b.path}: __metadata__.routing.feature {b.routing.feature.as_dict()} differs from "
                               f"{first.path}'s {first.routing.feature.as_dict()}: errors in different features "
                               f"cannot be compared")
        if b.overlay.backbone_sha256 != first.overlay.backbone_sha256:
            raise OverlayError(f"{b.path}: __metadata__.backbone_sha256 {b.overlay.backbone_sha256} differs from "
                               f"{first.path}'s {first.overlay.backbone_sha256}")


def check_graph(b: Bundle, layers: int, kv_heads: int, head_dim: int) -> None:
    """Refuse a bundle whose feature the graph cannot give (a layer it lacks, other cache dims)."""
    f = b.routing.feature
    if f.layer >= layers:
        raise OverlayError(f"{b.path}: __metadata__.routing.feature.layer: {f.layer} is out of 0..{layers - 1} "
                           f"(the graph has {layers} layers)")
    if (f.kv_heads, f.head_dim) != (kv_heads, head_dim):
        raise OverlayError(f"{b.path}: __metadata__.routing.feature: kv_heads {f.kv_heads}, head_dim {f.head_dim}; "
                           f"the graph's cache has {kv_heads} and {head_dim}")


def candidates(bundles: Sequence[Bundle]) -> list[tuple[str, Subspace]]:
    """The probe's order: every bundle's general subspace, then every skill subspace, each in skill-id order."""
    ordered = sorted(bundles, key=lambda b: b.skill)
    return [(f"{b.skill}/{side}", b.routing.subspaces[side]) for side in SIDES for b in ordered]


def choose(phi: np.ndarray, bundles: Sequence[Bundle]) -> tuple[str | None, str, dict[str, float]]:
    """(the chosen skill, or None for the backbone; the winning subspace's name; every subspace's error)."""
    name, errors = argmin(phi, candidates(bundles))
    skill, side = name.rsplit("/", 1)
    return (skill if side == SKILL else None), name, errors
