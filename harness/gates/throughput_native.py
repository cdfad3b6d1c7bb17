"""The native throughput gate: the C++ probe on the ONNX Runtime C API, per variant and on ORT-GenAI's graph."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from .. import fmt
from .lanes import FIGURES, LaneEvidence, LanePolicy, decide, parity_dtypes
from .spec import GateSpec

if TYPE_CHECKING:
    from ..view import ReceiptView


@dataclass(frozen=True)
class NativePolicy(LanePolicy):
    # our fp32 graph against Python onnxruntime, and the probe on ORT-GenAI's graph against ORT-GenAI's own loop
    require_parity_dtypes: tuple[str, ...] = parity_dtypes(("fp32", "ort-genai-int4", "ort-genai-kquant"))


def section(views: Sequence[ReceiptView]) -> list[fmt.Section]:
    """Every lane of the run side by side (the probe, Python onnxruntime, ORT-GenAI, llama.cpp, the
    browser lanes): one workload, one run, so the probe's figures are read against its peers'."""
    lanes = sorted((v.lane for v in views if v.lane is not None), key=lambda l: (str(l.model), str(l.dtype), l.lane))
    if not lanes:
        return []
    cols = sorted({c for l in lanes for c in l.cells})
    rows = [[l.model, l.dtype, l.lane, l.outcome, *(fmt.num(l.speed(c)) for c in cols),
             *(fmt.num(l.cells[c].prefill_ms if c in l.cells else None) for c in cols),
             fmt.num(l.load_ms), fmt.pct(l.steal_fraction), fmt.pct(l.foreign_cpu_share)] for l in lanes]
    return [fmt.Section("Throughput, every lane side by side (same workload, same run)", (
        "Steal and foreign CPU: what the machine did during the lane's timing (the hypervisor's steal, and "
        "processes outside the test's own, as fractions of the machine's CPU time; see the machine table).", "",
        fmt.table_of(["model", "dtype", "lane", "outcome", *(f"decode tok/s {c}" for c in cols),
                      *(f"prefill ms {c}" for c in cols), "load ms", "steal", "foreign CPU"],
                     "llll" + "r" * (2 * len(cols) + 3), rows)))]


SPEC = GateSpec(
    name="throughput_native", level="variant", applies_to=("fp32", "q8", "q4", "recipe", "ort-genai-int4", "ort-genai-kquant"), policy=NativePolicy,
    evidence=LaneEvidence, decide=decide, figures=FIGURES, section=section,
    describe="decode tokens/s and prefill ms of the native probe on the shared workload, greedy-id parity on fp32")
