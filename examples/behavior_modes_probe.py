"""How long a behavior evaluation takes with each mode on its own against both modes from one prefill, and whether
any id differs (docs/measurements.md, "Issue 32: one prefill for both modes").

Usage (in the checkout; builds the model's export or HF directory when the store lacks them):
    PROBE_SUBJECT=q8 PROBE_N=1020 .venv/bin/pytest examples/behavior_modes_probe.py -m benchmark -p no:xdist -s

PROBE_MODEL (default smollm2-135m), PROBE_SUBJECT (a dtype of its export, ``torch`` for the PyTorch reference, or
``ort-genai-int4`` for ORT-GenAI's int4 peer graph), PROBE_N (every k-th case of the suite, N of them; 1020 is the
whole chat-v3 suite). Both ways run the evaluation's own groups (batch 16, one prompt length each) on one backend:
``generate_batch`` once per mode (the evaluation before) and ``generate_modes`` (the evaluation now); a peer runs
one case at a time: ``generate`` once per mode, against ``generate_each_mode`` (one prefill, resumed per mode).
Prints one JSON line.
"""

import json
import os
import time

import pytest

from harness.behavior import evaluate, generate
from harness.domain import Variant


@pytest.mark.benchmark
def test_modes_apart_and_together(campaign, models, behavior):
    spec = next(m for m in campaign.models if m.id == os.environ.get("PROBE_MODEL", "smollm2-135m"))
    subject = os.environ.get("PROBE_SUBJECT", "fp32")
    rendered, contract = behavior.suite(spec), behavior.contract(spec)
    n = int(os.environ.get("PROBE_N", "256"))
    cases = rendered.cases[::max(1, len(rendered.cases) // n)][:n]
    peer = subject.startswith("ort-genai")
    groups = [[i] for i in range(len(cases))] if peer else evaluate.batches(cases, behavior.batch(None))

    def backend():
        if subject == "torch":
            return generate.TorchBackend(models.torch_model(spec), contract.threads)
        return generate.OrtBackend(models.decoder(Variant(spec, subject, peer=subject if peer else None)))

    seconds, found = {}, {}
    for how in ("apart", "together"):
        be, got = backend(), {m: {} for m in contract.modes}
        t0 = time.perf_counter()
        for g in groups:
            prompts, budgets = [list(cases[i].prompt_ids) for i in g], [cases[i].case.max_new_tokens for i in g]
            ids = [cases[i].case.id for i in g]
            if peer:
                results = {m: [r] for m, r in (
                    {m: generate.generate(be, prompts[0], budgets[0], contract, m, ids[0]) for m in contract.modes}
                    if how == "apart" else
                    generate.generate_each_mode(be, prompts[0], budgets[0], contract, ids[0])).items()}
            elif how == "apart":
                results = {m: generate.generate_batch(be, prompts, budgets, contract, m, ids) for m in contract.modes}
            else:
                results = generate.generate_modes(be, prompts, budgets, contract, contract.modes, ids)
            for m in contract.modes:
                got[m].update(zip(g, results[m]))
        seconds[how], found[how] = round(time.perf_counter() - t0, 1), got
    same = {m: sum(found["apart"][m][i] == found["together"][m][i] for i in found["apart"][m]) for m in contract.modes}
    print(json.dumps({"model": spec.id, "subject": subject, "cases": len(cases), "groups": len(groups),
                      "seconds": seconds, "identical_ids": same}))
    assert all(v == len(cases) for v in same.values()), same
