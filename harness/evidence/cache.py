"""Collect cache-allclose evidence: incremental vs full recompute, padded vs unpadded, graph vs PyTorch."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ..runtime import OrtDecoder
from ..stats import max_errors


def prompts_from(ids: Sequence[int], lengths: Sequence[int]) -> list[list[int]]:
    """Slices of real held-out text, one per length, none overlapping another."""
    out, start = [], 0
    for n in lengths:
        out.append(list(ids[start:start + n]))
        start += n + 17
    return out


def _agree(a: Sequence[int], b: Sequence[int]) -> int:
    return int(sum(int(x) == int(y) for x, y in zip(a, b)))


def _prefix_agree(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if int(x) != int(y):
            break
        n += 1
    return n


def _flip_margins(tokens: Sequence[int], logits: np.ndarray) -> list[float]:
    """Where a greedy token differs from ``logits``' argmax: how far the argmax's logit is above the
    token's (0 is an exact tie); a flip within the comparison's tolerance is not evidence of a bug."""
    out = []
    for t, tok in enumerate(tokens):
        best = int(np.argmax(logits[t]))
        if best != int(tok):
            out.append(float(logits[t, best] - logits[t, int(tok)]))
    return out


def collect(decoder: OrtDecoder, prompts: Sequence[list[int]], steps: int, pad_pair: tuple[list[int], list[int]],
            torch_logits: Callable[[list[int]], np.ndarray] | None, torch_gated: bool,
            twin: OrtDecoder | None = None, gated: bool = True, graph: str = "graph",
            rounding: bool = False) -> dict[str, Any]:
    """Run every comparison on ``decoder`` and return JSON-safe evidence (no raw logits).

    - incremental_vs_full: prefill + ``steps`` one-token calls against one full call on
      prompt + generated tokens (the same graph); greedy agreement compares the
      incremental tokens with the full call's argmax at each decode position.
    - padded_vs_unpadded: a left-padded batch of two with an attention mask against
      each row decoded alone; logits are compared up to the first token where the
      rows' greedy paths part (after that the sequences differ), agreement counts
      identical greedy tokens.
    - graph_vs_torch: the graph's full-sequence logits against the PyTorch model's
      on the same ids (gated for fp32 only; reported for quantized graphs).
    - rounding_noise (with ``twin``, the same graph computing in fp32): the full call against the
      twin's on the same ids, never gated: the rounding that int8 activations add.
    - row_set_rounding (with ``rounding``, a graph that quantizes activations at run time and has no
      twin): each decode position's logits from a full call on the sequence up to it against the full
      call on the whole sequence, never gated: equal in exact arithmetic (a causal model), they differ
      by the rounding of activation scales taken over two row sets, which the rule allows for.

    ``gated`` false reports the graph-against-itself checks without deciding (an int8-activation
    graph, whose cache logic is gated on its twin); ``graph`` labels every case.
    """
    cases: list[dict[str, Any]] = []
    singles: dict[int, tuple[list[int], np.ndarray]] = {}
    for prompt in prompts:
        generated, inc = decoder.greedy(prompt, steps)
        singles[len(prompt)] = (generated, inc)
        sequence = list(prompt) + generated[:-1]
        whole = decoder.full(sequence)
        full = whole[len(prompt) - 1:]
        err = max_errors(inc, full)
        cases.append({"check": "incremental_vs_full", "gated": gated, "graph": graph, "prompt_tokens": len(prompt), "steps": steps,
                      "greedy_agree": _agree(generated, np.argmax(full, axis=-1)), "greedy_total": len(generated),
                      "flip_margins": _flip_margins(generated, full), **err})
        if twin is not None:
            cases.append({"check": "rounding_noise", "gated": False, "graph": graph, "prompt_tokens": len(prompt),
                          **max_errors(whole, twin.full(sequence))})
        if rounding:
            prefixes = np.stack([decoder.full(sequence[:t + 1])[-1] for t in range(len(prompt) - 1, len(sequence))])
            cases.append({"check": "row_set_rounding", "gated": False, "graph": graph, "prompt_tokens": len(prompt),
                          **max_errors(prefixes, full)})
        if torch_logits is not None:
            ref = torch_logits(sequence)
            err = max_errors(whole, ref)
            decode_ref = ref[len(prompt) - 1:]
            cases.append({"check": "graph_vs_torch", "gated": torch_gated, "graph": graph, "prompt_tokens": len(prompt),
                          "steps": steps, "greedy_agree": _agree(generated, np.argmax(decode_ref, axis=-1)),
                          "greedy_total": len(generated), **err})
    short, long = pad_pair
    padded_tokens, padded = decoder.greedy_padded([short, long], steps)
    for row, prompt in enumerate((short, long)):
        alone_tokens, alone = singles[len(prompt)] if len(prompt) in singles and list(prompt) in [list(p) for p in prompts if len(p) == len(prompt)] \
            else decoder.greedy(prompt, steps)
        upto = min(_prefix_agree(padded_tokens[row], alone_tokens) + 1, len(alone_tokens))
        err = max_errors(padded[row, :upto], alone[:upto])
        first = _flip_margins(padded_tokens[row][:upto], alone[:upto])
        cases.append({"check": "padded_vs_unpadded", "gated": gated, "graph": graph, "prompt_tokens": [len(short), len(long)],
                      "row": row, "steps": steps, "compared_steps": upto, "first_flip_margin": first[0] if first else None,
                      "greedy_agree": _agree(padded_tokens[row], alone_tokens), "greedy_total": len(alone_tokens), **err})
    return {"cases": cases, "steps": steps, "prompt_lengths": [len(p) for p in prompts],
            "pad_pair_lengths": [len(short), len(long)]}


def gather(models, variant, policy, fault=None) -> dict:
    """Every comparison the cache rule judges, on the variant's graph (and its full-precision twin, if any).

    ``models`` is the session's model fixture (``fixtures/models.py``); ``fault`` names a traced-export
    fault to inject (the gate's own tests). A graph that quantizes activations at run time is judged on its
    full-precision twin (:mod:`harness.export.dequant_twin`: the same graph with the activation quantization
    removed), its own differences reported; without a twin, its rounding between two row sets is measured
    for the rule to allow. ``activation_quantization`` records what was found (``dequant_twin.Twin.record``).
    """
    from .. import progress

    say = lambda what: progress.emit(f"cache {variant.id}: {what}")   # noqa: E731 - every stretch over ~10 s says so
    ids = models.heldout_ids(variant.model)
    prompts = prompts_from(ids, policy.prompt_lengths)
    say(f"{len(prompts)} prompt(s) x {policy.steps} steps, incremental against full recompute")
    short, long = prompts_from(ids[1000:], policy.pad_lengths)
    twin, quantized = models.fp32_compute_twin(variant, fault)
    torch_logits = models.torch_logits(variant.model)
    decoder = models.decoder(variant, fault=fault) if fault else models.decoder(variant)
    say("graph loaded" + ("; a full-precision twin derived" if twin is not None else ""))
    if twin is None:
        found = collect(decoder, prompts, policy.steps, (short, long), torch_logits,
                        torch_gated=variant.dtype == "fp32", rounding=bool(quantized["nodes"]))
    else:
        # the cache logic, gated on the twin (same nodes, cache and weights; no activation rounding) ...
        found = collect(twin, prompts, policy.steps, (short, long), None, torch_gated=False,
                        graph="full-precision twin")
        # ... and the graph's own comparisons and its rounding against the twin, reported
        own = collect(decoder, prompts, policy.steps, (short, long), torch_logits,
                      torch_gated=False, twin=twin, gated=False, graph="int8 activations")
        say("twin checked; now the graph's own differences")
        found["cases"] += own["cases"]
    # an onnx source without Hugging Face weights has no PyTorch model: its graph is checked against itself
    return {**found, "policy_dtype": variant.policy_dtype, "fp32_compute_twin": twin is not None,
            "activation_quantization": quantized, "torch_reference": torch_logits is not None}
