"""The behavior rule's own error rates on each model (run level): null conditions pass, damaged ones fail.

Null: the fp32 graph under another intra-op thread count and under ONNX Runtime's basic graph optimizations
(against the same graph at the campaign's settings); the sampled mode under other seeds, disjoint from the
reference's (the campaign's seed and its confirmation seeds), judged by the gate's two-stage rule. Damaged: the PyTorch model with relative noise on every decoder linear weight, and without its last
decoder layer (against the PyTorch reference), each with its held-out loss increase measured. Every evaluation
runs the campaign's rendered suite and is cached like the behavior gate's; the rates resample each condition's
cases (harness/behavior/calibration.py).
"""

import dataclasses
import time

import pytest

from harness import progress
from harness.behavior import calibration, damage, generate
from harness.runtime import OrtDecoder


def _metrics(bp, rows, modes):
    """The behavior policy's metrics that these transcripts measure, in the given modes."""
    cats = {r["category"] for r in rows}
    out = []
    for m in bp.metrics:
        mode, name = m.split(".", 1)
        if mode in modes and (name in cats or name in ("stopped", "agreement") or name in calibration.paired.COUNTERS):
            out.append(m)
    return out


@pytest.mark.slow   # cold: a PyTorch reference and an evaluation per graph
@pytest.mark.gate("behavior_calibration")
def test_behavior_calibration(variant, models, behavior, campaign, policy, gate, receipt):
    spec = variant.model
    bp = campaign.policy["behavior"]
    if bp.rule != "paired":
        pytest.skip(f"[policy.behavior] rule = {bp.rule!r}: the calibration measures the paired rule")
    if not spec.has_weights:
        pytest.skip(f"{spec.id}: damaged conditions are built from the PyTorch weights, which this source lacks")
    rendered, contract = behavior.suite(spec), behavior.contract(spec)
    graph, ident = models.graph(variant)
    models.pin_graph(receipt, variant)
    receipt.pin(rendered.suite.path, "scenario_suite")
    receipt.set(parameters={"suite": rendered.describe(), "contract": contract.as_dict(), "rule": bp.as_dict(),
                            "calibration": policy.as_dict()})
    rule = dict(margins=bp.margins, margin=bp.effective_margin, confidence=bp.confidence,
                agreement_tokens=bp.agreement_tokens, resamples=policy.resamples)
    conditions = []

    def measure(name, kind, describe, ref_rows, rows, modes, seed, measured=None, confirm=None):
        c = calibration.measure(name, kind, describe, ref_rows, rows, _metrics(bp, rows, modes), seed=seed,
                                measured=measured, confirm=confirm, **rule)
        print(f"\n{spec.id} {name} ({kind}): rule {'FAIL' if c.failed else 'pass'} on the real pair "
              f"{'(' + ', '.join(c.failing) + ')' if c.failing else ''}"
              f"{f' (sampled confirmed on {c.seeds} seeds)' if c.pooled else ''}; resampled fail rate {c.fail_rate:.3f}")
        conditions.append(c)

    def reference_seed(k):
        """The fp32 graph's sampled rows on the campaign's seed + k (the gate's own confirmation evaluations)."""
        return behavior.evaluate(variant, seed_offset=k)[2] if k else [r for r in base_rows if r["mode"] == "sampled"]

    def needs_confirmation(ref_rows, rows, modes):
        flips = calibration.case_matrix(ref_rows, rows, _metrics(bp, rows, modes), bp.agreement_tokens).flips()
        return confirm_seeds > 0 and calibration.paired.needs_confirmation(
            calibration.paired.decide(flips, bp.margins, bp.effective_margin, bp.confidence))

    confirm_seeds = bp.confirm_seeds
    _, _, base_rows = behavior.evaluate(variant)
    onnx = {"kind": "onnx", "model": spec.id, "dtype": "fp32", "graph_sha256": ident["sha256"]}
    threads = policy.other_threads or (1 if campaign.threads > 1 else 2)
    for name, subject, make, c0, describe, seed in (
            ("threads", f"threads-{threads}", lambda: generate.OrtBackend(OrtDecoder(graph, threads)),
             dataclasses.replace(contract, threads=threads),
             f"fp32 graph on {threads} intra-op threads, not {campaign.threads}", 1),
            ("ort-basic", "ort-basic-optimizations",
             lambda: generate.OrtBackend(OrtDecoder(graph, campaign.threads, optimization="basic")), contract,
             "fp32 graph with ONNX Runtime's basic graph optimizations, not all", 2)):
        rows = behavior.evaluate_custom(spec, {**onnx, "condition": subject}, make, c0, f"{variant.id} {subject}")
        confirm = None
        if "sampled" in contract.modes and needs_confirmation(base_rows, rows, contract.modes):
            confirm = [(reference_seed(k),
                        behavior.evaluate_custom(spec, {**onnx, "condition": subject}, make,
                                                 dataclasses.replace(c0, seed=c0.seed + k, modes=("sampled",)),
                                                 f"{variant.id} {subject}, seed + {k}"))
                       for k in range(1, confirm_seeds + 1)]
        measure(name, "null", describe, base_rows, rows, contract.modes, seed, confirm=confirm)
    if "sampled" in contract.modes:
        # the candidate's seeds are disjoint from the reference's (campaign seed .. + confirm_seeds)
        stride = confirm_seeds + 1
        ort = lambda: generate.OrtBackend(OrtDecoder(graph, campaign.threads))   # noqa: E731
        for k in range(1, policy.seeds + 1):
            runs = []
            for j in range(stride):
                offset = k * stride + j
                c = dataclasses.replace(contract, seed=contract.seed + offset, modes=("sampled",))
                runs.append(behavior.evaluate_custom(spec, {**onnx, "condition": f"seed+{offset}"}, ort, c,
                                                     f"{variant.id} sampled, seed + {offset}"))
            confirm = [(reference_seed(j), runs[j]) for j in range(1, stride)]
            measure(f"seed+{k}", "null",
                    f"sampled mode under seeds {contract.seed} + {k * stride}..{k * stride + stride - 1} against the "
                    f"reference's {contract.seed} + 0..{stride - 1}", reference_seed(0), runs[0], ("sampled",),
                    2 + k, confirm=confirm)

    _, _, ref_rows = behavior.evaluate(None, spec)
    model = models.torch_model(spec)
    heldout = models.heldout_ids(spec)

    def loss_of(m, label: str) -> float:
        """The held-out loss (2,048 tokens in PyTorch: about 15 s for SmolLM2 on 2 cores), announced."""
        t0 = time.monotonic()
        progress.emit(f"{spec.id} PyTorch, {label}: held-out loss on 2,048 tokens")
        loss = damage.heldout_loss(m, heldout, spec.eval_context, 2048)
        progress.emit(f"{spec.id} PyTorch, {label}: held-out loss {loss:.4f} in {time.monotonic() - t0:.1f} s")
        return loss

    base_loss = loss_of(model, "as given")
    torch_subject = {"kind": "torch", "model": spec.id, "hf_key": models.hf(spec).key}
    damaged = [(f"noise-{s:g}", f"PyTorch weights + noise of {s:g} x each decoder linear weight's std",
                lambda s=s: damage.noisy(model, s, seed=campaign.seed)) for s in policy.noise]
    if policy.truncate:
        damaged.append((f"truncate-{policy.truncate}", f"PyTorch model without its last {policy.truncate} decoder "
                        f"layer(s)", lambda: damage.truncated(model, policy.truncate)))
    per_category = policy.damaged_per_category or None
    for i, (name, describe, build) in enumerate(damaged):
        broken = build()
        loss = loss_of(broken, name)
        rows = behavior.evaluate_custom(spec, {**torch_subject, "condition": name},
                                        lambda b=broken: generate.TorchBackend(b, contract.threads), contract,
                                        f"{spec.id} PyTorch, {name}", per_category)
        held = {(r["mode"], r["case"]) for r in rows}   # a slice: the reference's same cases
        cases, total = len({c for _, c in held}), len({r["case"] for r in ref_rows})
        if cases < total:
            describe += f" ({cases} of {total} cases, the first of each category: power at this size)"
        measure(name, "damaged", describe, [r for r in ref_rows if (r["mode"], r["case"]) in held], rows,
                contract.modes, 10 + i, {"heldout_loss_increase": loss / base_loss - 1.0})
        del broken

    records = [c.as_dict() for c in conditions]
    receipt.record_calibration(records)
    for c in conditions:
        receipt.measure(c.figure, c.fail_rate, "fraction", c.resamples)
    verdict = receipt.decide(gate.decide(gate.evidence(tuple(records)), policy))
    assert verdict.passed, verdict.render()
