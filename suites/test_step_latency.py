"""In-process decode-step latency of each graph under onnxruntime, timed by pytest-benchmark.

One step = one token with the long workload prompt as its past (`[policy.step_latency] cell`) through the Python
onnxruntime session, the same call every round, so rounds are comparable.  pytest-benchmark's
statistics (median, IQR, rounds) go into the receipt; under xdist pytest-benchmark switches itself
off, the step runs once, and the receipt says so.  The gate checks what a timing cannot: the step's
logits are finite and identical in every round.
"""

import numpy as np
import pytest

from harness.throughput import pins
from harness.verdict import Measurement


@pytest.mark.exclusive
@pytest.mark.gate("step_latency")
def test_decode_step_latency(variant, models, gate, policy, receipt, benchmark):
    work = models.workload(variant.model)
    _, identity = models.graph(variant)
    models.pin_graph(receipt, variant)
    dec = models.decoder(variant)
    receipt.record_session(dec.settings)
    prompt = list(work.cell(policy.cell).prompt_ids)
    n = len(prompt)
    logits, past = dec.forward(np.asarray([prompt], np.int64), np.ones((1, n), np.int64),
                               np.arange(n, dtype=np.int64)[None], dec.empty_past(1))
    token = np.asarray([[int(np.argmax(logits[0, -1]))]], np.int64)
    mask, pos = np.ones((1, n + 1), np.int64), np.asarray([[n]], np.int64)
    outputs = []

    def step():
        out, _ = dec.forward(token, mask, pos, past)
        outputs.append(out[0, -1].copy())

    with receipt.sampling(f"pytest-benchmark's {policy.warmup_rounds} warm-up and {policy.rounds} timed steps"):
        benchmark.pedantic(step, rounds=policy.rounds, warmup_rounds=policy.warmup_rounds)
    pins.pin_runtime(receipt, in_process=("onnxruntime",))
    receipt.set(parameters={"past_tokens": n, "threads": dec.threads,
                            "timer": "pytest-benchmark pedantic"})
    figures = {}
    if benchmark.enabled and benchmark.stats is not None:
        st = benchmark.stats.stats
        figures = {"step_ms_median": Measurement(st.median * 1e3, "ms", st.rounds),
                   "step_ms_iqr": Measurement(st.iqr * 1e3, "ms", st.rounds),
                   "step_ms_min": Measurement(st.min * 1e3, "ms", st.rounds)}
        receipt.note("pytest_benchmark", {k: getattr(st, k) for k in ("min", "max", "mean", "median", "iqr", "rounds")})
    else:
        receipt.note("pytest_benchmark", "disabled (xdist or --benchmark-disable): the step ran once, untimed")
    finite = all(np.all(np.isfinite(o)) for o in outputs)
    evidence = gate.evidence(finite=finite, figures=figures,
                             identical=finite and all(np.array_equal(o, outputs[0]) for o in outputs[1:]))
    verdict = receipt.decide(gate.decide(evidence, policy))
    assert verdict.passed, verdict.render()
