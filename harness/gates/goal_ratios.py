"""The goal ratios of a run: speed ratios between lanes measured in it (the fastest passing variant against
ORT-GenAI's own loop and llama.cpp, the browser against native, ...), each against the throughput_goal gate's
recorded targets.  Pure functions of receipt views; the throughput gates' sections and the report read them.
"""

from __future__ import annotations

import numbers
from typing import Any, Iterable, Mapping, Sequence

from .. import fmt
from ..domain import DTYPES, PEER_GENAI
from ..view import LaneRow, ReceiptView

# harness.gates.throughput_goal.GoalPolicy's fields (a test checks they match; that gate imports this module).
GOAL_FIELDS = ("vs_ortgenai", "vs_llamacpp", "probe_vs_ortgenai_within", "browser_over_native",
               "ort_web_over_transformers_js", "browser_over_peer")
# policy.targets spells the within-tolerance as the throughput rule reads it (GoalPolicy.rule_targets);
# v1 receipts written before GoalPolicy carry only that nested mapping.
_NESTED_NAMES = {"probe_vs_ortgenai_within": "probe_vs_ortgenai_tolerance"}



def _number(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def targets_of(policy: Mapping[str, Any]) -> dict[str, float | None]:
    """The goal targets a throughput_goal receipt's ``policy`` records (None for each it does not)."""
    nested = policy.get("targets") if isinstance(policy.get("targets"), Mapping) else {}
    out: dict[str, float | None] = {}
    for name in GOAL_FIELDS:
        value = policy.get(name, nested.get(name, nested.get(_NESTED_NAMES.get(name, ""))))
        out[name] = value if _number(value) else None
    return out


def goal_targets(goal_views: Sequence[ReceiptView], models: Iterable[str]) -> dict[str, dict[str, float | None]]:
    """Targets per model from the run's throughput_goal receipts: the model's own receipt, else the
    run's first (one campaign, one policy); with no such receipt in the run, a model has no targets."""
    by_model = {v.model: targets_of(v.policy) for v in goal_views}
    run_wide = next(iter(by_model.values()), None)
    return {m: t for m in models if (t := by_model.get(m, run_wide)) is not None}


def _best(lanes: Sequence[LaneRow], model, lane, cell, dtypes=None):
    hits = [(l.speed(cell), l.dtype) for l in lanes
            if l.model == model and l.lane == lane and l.outcome == "pass"
            and _number(l.speed(cell)) and (dtypes is None or l.dtype in dtypes)]
    return max(hits) if hits else None


def goal_ratios(lanes: Sequence[LaneRow], passing: Mapping[str, set[str]],
                targets: Mapping[str, Mapping[str, float | None]] | None = None,
                own_labels: Mapping[str, set[str]] | None = None) -> list[dict[str, Any]]:
    """Speed ratios between lanes measured in this run (passing receipts only), per model and cell.

    ``passing[model]`` holds the dtypes that passed every gate: "fastest passing variant" means those;
    ``own_labels[model]`` Gatehouse's own labels (fixed dtypes and recipes; default the fixed dtypes).
    ``targets[model]`` holds the goal targets (:data:`GOAL_FIELDS`); a ratio whose target is unknown
    (no targets for the model, or a receipt that did not record that one) has ``met`` None.
    """
    out = []
    targets = targets or {}
    for model in sorted({l.model for l in lanes if l.model}):
        t = targets.get(model) or {}
        model_cells = sorted({c for l in lanes if l.model == model for c in l.cells})
        for cell in model_cells:
            def add(name, num, den, target=None, within=None):
                if num and den:
                    r = num[0] / den[0]
                    met = (abs(r - 1) <= within) if within is not None else (None if target is None else r >= target)
                    out.append({"model": model, "cell": cell, "ratio": name, "numerator": f"{num[1]} {fmt.num(num[0])}",
                                "denominator": f"{den[1]} {fmt.num(den[0])}", "value": r, "target": target,
                                "within": within, "met": met})
            fastest = _best(lanes, model, "native-probe", cell, passing.get(model, set()))
            own = _best(lanes, model, "ort-genai", cell)
            add("fastest passing variant (probe) / ORT-GenAI own loop", fastest, own, t.get("vs_ortgenai"))
            add("fastest passing variant (probe) / llama.cpp", fastest, _best(lanes, model, "llama.cpp", cell),
                t.get("vs_llamacpp"))
            add("probe on the ORT-GenAI graph / ORT-GenAI own loop",
                _best(lanes, model, "ort-genai-probe", cell, {PEER_GENAI}),
                _best(lanes, model, "ort-genai", cell, {PEER_GENAI}), within=t.get("probe_vs_ortgenai_within"))
            mine = (own_labels or {}).get(model) or set(DTYPES)
            add("best browser variant (ort-web) / fastest passing native variant (probe)",
                _best(lanes, model, "ort-web", cell, passing.get(model, set())), fastest, t.get("browser_over_native"))
            for dtype in sorted(mine, key=lambda d: (d not in DTYPES, DTYPES.index(d) if d in DTYPES else 0, d)):
                add(f"ort-web / transformers.js on the {dtype} graph", _best(lanes, model, "ort-web", cell, {dtype}),
                    _best(lanes, model, "transformers.js", cell, {dtype}), t.get("ort_web_over_transformers_js"))
                add(f"probe / Python onnxruntime on the {dtype} graph", _best(lanes, model, "native-probe", cell, {dtype}),
                    _best(lanes, model, "python-ort", cell, {dtype}))
    return out


def ratios(views: Sequence[ReceiptView], goal_gate: str, machine: str | None = None) -> list[dict[str, Any]]:
    """The goal ratios of a run from its receipt views, after qualification (``variant_passed`` set):
    lanes from the lane receipts (of one hardware fingerprint when ``machine`` is given), targets from the
    ``goal_gate`` receipts."""
    lanes = [v.lane for v in views if v.lane is not None and (machine is None or v.machine == machine)]
    passing: dict[str, set[str]] = {}
    own: dict[str, set[str]] = {}
    for v in views:
        if v.model and v.own:
            own.setdefault(v.model, set()).add(v.dtype)
        if v.variant_passed and v.own:
            passing.setdefault(v.model, set()).add(v.dtype)
    models = {l.model for l in lanes if l.model}
    return goal_ratios(lanes, passing, goal_targets([v for v in views if v.gate == goal_gate], models), own)
