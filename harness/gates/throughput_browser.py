"""The browser throughput gate: onnxruntime-web and transformers.js in headless Chromium (wasm, threads, SIMD)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from .. import fmt
from ..browser import rule
from ..domain import DTYPES
from ..fields import knob
from ..verdict import Measurement, Verdict
from .spec import Evidence, Figure, GateSpec, Policy

if TYPE_CHECKING:
    from ..view import ReceiptView


@dataclass(frozen=True)
class ThreadProbe:
    cell: str = "short"
    threads: int = knob(1, lo=1)
    repeats: int = knob(3, lo=1)


@dataclass(frozen=True)
class BrowserPolicy(Policy):
    """``[policy.throughput_browser]``: where parity is required, the one-thread probe of thread scaling, and which
    variants run the diagnostics."""

    require_parity_dtypes: tuple[str, ...] = knob(("fp32",), choices=DTYPES, nonempty=False)
    thread_probe: ThreadProbe = ThreadProbe()
    # teacher-forced top-1 agreement with the native fp32 graph's continuation: the browser lane may fall short of
    # the same graph run natively by at most this fraction of the positions (a lane that computes something else)
    teacher_forced_slack: float = knob(0.1, hi=1.0)
    # model id -> the fixed dtypes whose ort-web lane also runs the diagnostics (the one-thread probe and the
    # profiled generations); a model not listed: every fixed dtype (a recipe never: it is timed, not diagnosed)
    diagnose: dict[str, tuple[str, ...]] = knob(default_factory=dict, choices=DTYPES, refers="model")

    def diagnosed(self, model_id: str, dtype: str, recipe: str | None = None) -> bool:
        """Whether the ort-web lane of this variant runs the diagnostics beside its timing."""
        return recipe is None and dtype in self.diagnose.get(model_id, DTYPES)


@dataclass(frozen=True)
class BrowserEvidence(Evidence):
    """One browser lane's run in Chromium (``harness.browser``)."""

    lane: str                                        # ort-web or transformers.js
    dtype: str
    workload: Mapping[str, Any]                      # Workload.describe(): threads, repeats, cells
    load: Mapping[str, Any]                          # load_ms, num_threads_effective, workers_started, env
    cells: Mapping[str, Mapping[str, Any]]           # cell -> summary
    parity: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)   # cell -> agreement with python-ort
    # onnxruntime-web: cell -> {browser, native}: the teacher-forced top-1 agreement with the native fp32 graph's
    # continuation in the page and on the same graph natively
    teacher_forced: Mapping[str, Mapping[str, Any]] | None = None


def decide(evidence: BrowserEvidence, policy: BrowserPolicy) -> Verdict:
    """Fails when the page was not cross-origin isolated, when the runtime started fewer wasm threads than asked (a
    silent fall-back to one thread), when a cell has too few repeats, when greedy ids differ from the Python
    onnxruntime reference where parity is required (q8/q4 agreement is recorded, not judged: dynamic int8 and
    MatMulNBits kernels differ between runtimes), or when teacher-forced agreement falls below the native graph's
    by more than the slack."""
    reasons: list[str] = []
    figures: dict[str, Measurement] = {}
    load, lane = evidence.load, evidence.lane
    env = load.get("env") or {}
    if env.get("crossOriginIsolated") is not True:
        reasons.append(f"{lane}: the page was not cross-origin isolated (crossOriginIsolated="
                       f"{env.get('crossOriginIsolated')!r}); without COOP/COEP there is no SharedArrayBuffer and "
                       f"onnxruntime-web runs one thread")
    wanted, repeats = int(evidence.workload["threads"]), int(evidence.workload["repeats"])
    used = rule.threads_used(load)
    if used < wanted:
        reasons.append(f"{lane}: asked for {wanted} wasm threads, the runtime runs {used} "
                       f"(num_threads_effective={load.get('num_threads_effective')}, "
                       f"workers_started={load.get('workers_started')}): it fell back silently")
    figures["threads_used"] = Measurement(used, "threads")
    figures["load_ms"] = Measurement(float(load["load_ms"]), "ms")
    for name, cell in sorted(evidence.cells.items()):
        if cell["repeats"] < repeats:
            reasons.append(f"{lane}: cell {name} has {cell['repeats']} measured repeats, the workload asks for "
                           f"{repeats}")
        figures[f"decode_tok_s_{name}"] = Measurement(cell["decode_tok_s"], "tokens/s", cell["repeats"])
        figures[f"decode_tok_s_{name}_cv"] = Measurement(cell["decode_tok_s_cv"], "ratio", cell["repeats"])
        figures[f"prefill_ms_{name}"] = Measurement(cell["prefill_ms_median"], "ms", cell["repeats"])
        figures[f"prefill_ms_{name}_iqr"] = Measurement(cell["prefill_ms_iqr"], "ms", cell["repeats"])
    strict = evidence.dtype in policy.require_parity_dtypes
    for name, agree in sorted(evidence.parity.items()):
        figures[f"greedy_agreement_{name}"] = Measurement(agree["fraction"], "fraction", agree["of"])
        if strict and not agree["identical"]:
            reasons.append(f"{lane}: {evidence.dtype} greedy ids differ from the Python onnxruntime reference "
                           f"in cell {name}: {agree['equal']}/{agree['of']} equal, first divergence at token "
                           f"{agree['first_divergence']}")
    slack = policy.teacher_forced_slack
    for name, tf in sorted((evidence.teacher_forced or {}).items()):
        b, n = tf["browser"], tf["native"]
        figures[f"teacher_forced_top1_{name}"] = Measurement(b["fraction"], "fraction", b["of"])
        figures[f"teacher_forced_top1_native_{name}"] = Measurement(n["fraction"], "fraction", n["of"])
        if b["fraction"] < n["fraction"] - slack:
            reasons.append(f"{lane}: teacher-forced top-1 agreement with the native fp32 graph's continuation in cell "
                           f"{name} is {b['equal']}/{b['of']} in the browser against {n['equal']}/{n['of']} for the "
                           f"same graph natively (slack {slack}): the browser lane computes something else")
    return Verdict.from_checks(reasons, figures)


def browser_goals(views: Sequence[ReceiptView]) -> list[dict[str, Any]]:
    """The browser goals per model and cell, from the run's receipts after qualification: the fastest qualified
    onnxruntime-web variant against wllama (the browser peer); the fastest qualified variant whose download is at
    most half of fp32's against wllama; the fastest qualified browser variant against the fastest qualified native
    one (probe). Each row: (name, numerator label and tok/s, denominator label and tok/s, ratio, target)."""
    from .goal_ratios import goal_targets
    from .throughput_goal import SPEC as GOAL, GoalPolicy

    rows: list[dict[str, Any]] = []
    lanes = [(v, v.lane) for v in views if v.lane is not None and v.outcome == "pass"]
    models = sorted({l.model for _, l in lanes if l.model})
    # the targets the run's goal receipts recorded ([policy.throughput_goal]), else the policy's defaults
    targets = goal_targets([v for v in views if v.gate == GOAL.name], models)
    for model in models:
        t = targets.get(model) or {}
        peer_target = t.get("browser_over_peer") or GoalPolicy.browser_over_peer
        native_target = t.get("browser_over_native") or GoalPolicy.browser_over_native
        web = [(v, l) for v, l in lanes if l.model == model and l.lane == "ort-web" and v.variant_passed]
        peer = [l for _, l in lanes if l.model == model and l.lane == "wllama"]
        native = [l for v, l in lanes if l.model == model and l.lane == "native-probe" and v.variant_passed]
        fp32_download = next((v.measurements.get("download_bytes") for v, l in lanes if l.model == model
                              and l.lane == "ort-web" and l.dtype == "fp32"), None)
        cells = sorted({c for _, l in web for c in l.cells})
        for cell in cells:
            def best(items):
                hits = [(l.speed(cell), l.dtype) for l in items if isinstance(l.speed(cell), (int, float))]
                return max(hits) if hits else None

            fastest = best(l for _, l in web)
            small = best(l for v, l in web if fp32_download and isinstance(v.measurements.get("download_bytes"),
                                                                             (int, float))
                         and v.measurements["download_bytes"] <= 0.5 * fp32_download)
            for name, num, den, target in (
                    ("fastest qualified browser variant / wllama", fastest, best(peer), peer_target),
                    ("fastest qualified variant downloading at most half of fp32 / wllama", small, best(peer),
                     peer_target),
                    ("fastest qualified browser variant / fastest qualified native variant", fastest, best(native),
                     native_target)):
                rows.append({"model": model, "cell": cell, "ratio": name, "numerator": num, "denominator": den,
                             "value": num[0] / den[0] if num and den else None, "target": target})
    return rows


def _goals(views: Sequence[ReceiptView]) -> list[fmt.Section]:
    rows = browser_goals(views)
    if not rows:
        return []
    cells = []
    for r in rows:
        shown = lambda x: f"{x[1]} {fmt.num(x[0])}" if x else "— (none)"
        met = "—" if r["value"] is None else ("met" if r["value"] >= r["target"] else "missed")
        cells.append([r["model"], r["cell"], r["ratio"], shown(r["numerator"]), shown(r["denominator"]),
                      fmt.num(r["value"]), f"≥ {fmt.num(r['target'])}: {met}"])
    return [fmt.Section("Browser goals (onnxruntime-web lanes of qualified variants, wllama the browser peer)", (
        "Sequential lane receipts of one run (each lane timed in its own page); a variant's download is what its "
        "page fetched (the graph, or a packed recipe's skeleton and pack).", "",
        fmt.table_of(["model", "cell", "ratio", "numerator", "denominator", "value", "goal"], "lllllrl", cells)))]


def section(views: Sequence[ReceiptView]) -> list[fmt.Section]:
    return [*_goals(views), *_where(views)]


def _where(views: Sequence[ReceiptView]) -> list[fmt.Section]:
    """Where the browser time goes, per variant and cell: the step, session.run, the cache it copies in
    and out of the wasm heap, thread scaling and a profiled generation's kernels (DEVELOPERS.md explains
    why the long prompt costs the step more than its kernels)."""
    web = sorted((l for l in (v.lane for v in views) if l is not None and l.lane == "ort-web"
                  and any("decode_step_ms" in f.step for f in l.cells.values())), key=lambda l: (str(l.model), str(l.dtype)))
    if not web:
        return []
    cells = []
    for l in web:
        for c, f in sorted((c, f) for c, f in l.cells.items() if "decode_step_ms" in f.step):
            tops = sorted(((op.lower(), v) for op, v in (f.profile.get("top_kernels_ms") or {}).items()
                           if isinstance(v, (int, float))), key=lambda kv: -kv[1])
            kv = f.step.get("kv_bytes")
            cells.append([l.model, l.dtype, c, fmt.num(f.step.get("decode_step_ms")),
                          fmt.num(f.step.get("session_run_ms")), fmt.num(kv / 1e6 if kv else None),
                          fmt.num(f.step.get("kv_copy_floor_ms")), fmt.num(f.step.get("thread_speedup")),
                          fmt.num(f.profile.get("kernel_ms")), fmt.num(f.profile.get("outside_model_run_ms")),
                          ", ".join(f"{op} {fmt.num(v)}" for op, v in tops) or "—"])
    return [fmt.Section("Where the browser time goes (onnxruntime-web, per decode step)", (
        "Step and session.run: the measured repeats. Cache copy: one JS copy of the cache the step feeds "
        "(its floor; session.run copies it into the wasm heap and the new cache back out). Profiled: a "
        "separate generation with onnxruntime-web's profiler on, which slows every node, so its "
        "milliseconds compare with each other only; outside run = session.run minus the runtime's own run.", "",
        fmt.table_of(["model", "dtype", "cell", "step ms", "session.run ms", "cache MB", "cache copy ms",
                      "2-thread speedup", "profiled kernel ms", "profiled outside run ms",
                      "top kernels (profiled ms)"], "lllrrrrrrrl", cells)))]


SPEC = GateSpec(
    name="throughput_browser", level="variant", applies_to=("fp32", "q8", "q4", "recipe"), policy=BrowserPolicy,
    evidence=BrowserEvidence, decide=decide, section=section, browser_only=True,
    figures=(Figure("download_bytes", "bytes", "lower", table=True), Figure("load_ms", "ms", "lower"),
             Figure("threads_used", "threads"), Figure("decode_tok_s_<cell>", "tokens/s", "higher"),
             Figure("prefill_ms_<cell>", "ms", "lower"), Figure("greedy_agreement_<cell>", "fraction", "higher"),
             Figure("teacher_forced_top1_<cell>", "fraction", "higher")),
    describe="decode tokens/s in headless Chromium, cross-origin isolated, on as many wasm threads as asked")
