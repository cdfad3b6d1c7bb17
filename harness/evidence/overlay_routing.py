"""The routing gate's evidence: pinned prompts, the backbone's features φ(x) in PyTorch, fitted subspaces, routes.

φ(x) is the hidden state after decoder layer ``layer`` (transformers' ``hidden_states[layer]``: 0 = the
embeddings, the last one after the model's final norm) averaged over the prompt's tokens, from the backbone's
own weights: a router decides before the skill is applied, so the skill's tensors play no part. Every prompt
has the same length, so a batch needs no padding and no mask.

:func:`gather` is the measurement (a model and four id sequences in, the evidence out); :func:`for_model`
reads the campaign's texts, tokenizes them and memoizes the evidence per model and policy in the session's
``models`` fixture, so the gate test and the suite's own tests run exactly the same thing.
"""

from __future__ import annotations

import time
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import EvidenceError
from ..overlay import routing
from ..overlay.routing import GENERAL, SKILL

BATCH = 16   # prompts per forward pass: 16 x 64 tokens keeps SmolLM2's activations small


def features(model, prompts: Sequence[Sequence[int]], layer: int, batch: int = BATCH) -> np.ndarray:
    """(N, hidden) float64: each prompt's hidden state at ``layer`` averaged over its tokens."""
    import torch

    body = model.base_model   # the decoder without the LM head: φ never needs the logits
    rows = []
    with torch.no_grad():
        for s in range(0, len(prompts), batch):
            ids = torch.tensor([list(p) for p in prompts[s:s + batch]], dtype=torch.long)
            out = body(input_ids=ids, output_hidden_states=True, use_cache=False)
            rows.append(out.hidden_states[layer].float().mean(1).double().numpy())
    return np.concatenate(rows)


def _cut(ids: Sequence[int], count: int, length: int, what: str) -> list[tuple[int, ...]]:
    try:
        return routing.windows(ids, count, length)
    except ValueError as exc:
        raise EvidenceError(f"{what}: {exc}; lower [policy.overlay_routing] prompts or prompt_tokens") from None


def gather(model, *, fit: Mapping[str, Sequence[int]], judge: Mapping[str, Sequence[int]], layer: int, rank: int,
           prompt_tokens: int, fit_prompts: int, judge_prompts: int,
           names: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Fit one subspace per side of ``fit`` (``skill``, ``general``: token ids) from ``fit_prompts`` windows of
    ``prompt_tokens`` ids, and route ``judge_prompts`` windows of each side of ``judge``. ``names`` says where
    each text came from (for errors). Returns what :func:`harness.gates.overlay_routing.decide` reads
    (``routes``, ``subspaces``) plus every prompt's SHA-256, each held-out prompt's errors and the timings."""
    num_layers = int(model.config.num_hidden_layers)
    if not 0 <= layer <= num_layers:
        raise EvidenceError(f"policy.overlay_routing.layer: layer {layer} is out of 0..{num_layers} for this model "
                            f"({num_layers} decoder layers)")
    names = names or {}
    t0 = time.monotonic()
    fit_windows = {side: _cut(fit[side], fit_prompts, prompt_tokens, names.get(f"fit.{side}", f"fit {side} text"))
                   for side in (SKILL, GENERAL)}
    judge_windows = {side: _cut(judge[side], judge_prompts, prompt_tokens,
                                names.get(f"judge.{side}", f"held-out {side} text")) for side in (SKILL, GENERAL)}
    subspaces = {side: routing.fit(features(model, fit_windows[side], layer), rank) for side in (SKILL, GENERAL)}
    t1 = time.monotonic()
    assessed = {side: routing.assess(features(model, judge_windows[side], layer), subspaces)
                for side in (SKILL, GENERAL)}
    t2 = time.monotonic()
    return {
        "layer": layer, "num_layers": num_layers, "hidden_size": int(model.config.hidden_size),
        "prompt_tokens": prompt_tokens, "rank_requested": rank,
        "subspaces": {side: {"rank": s.rank, "fit_prompts": len(fit_windows[side])} for side, s in subspaces.items()},
        "prompts": {stage: {side: [routing.prompt_sha256(w) for w in ws[side]] for side in (SKILL, GENERAL)}
                    for stage, ws in (("fit", fit_windows), ("judge", judge_windows))},
        "routes": {side: [a["route"] for a in assessed[side]] for side in (SKILL, GENERAL)},
        "errors": {side: [a["errors"] for a in assessed[side]] for side in (SKILL, GENERAL)},
        "seconds": {"fit": t1 - t0, "judge": t2 - t1},
    }


def for_model(models, spec, campaign, policy) -> tuple[dict[str, Any], bool]:
    """The evidence for model ``spec`` under ``policy`` (``[policy.overlay_routing]``), computed once per process
    and reused (the features are the backbone's: every dtype and every donor of the model shares them; the
    domain text is the campaign's ``[overlay]`` text, not a donor's). Returns ``(evidence, reused)``."""
    from .. import corpus
    from ..overlay import donor as donors

    key = ("overlay-routing", spec.id, tuple(sorted(policy.as_dict().items())))
    built = []

    def make():
        built.append(True)
        ov = campaign.overlay
        if ov is None:
            raise EvidenceError(f"{campaign.path}: the routing gate needs the campaign's [overlay] domain text")
        tokenizer = models.tokenizer(spec)

        def ids(text: str) -> list[int]:
            return list(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

        t0 = time.monotonic()
        fit = {SKILL: ids(donors.read_domain(ov.domain_train, ov.domain_package)),
               GENERAL: ids(corpus.read(campaign.corpus_train))}
        judge = {SKILL: ids(donors.read_domain(ov.domain_heldout, ov.domain_package)),
                 GENERAL: ids(corpus.read(campaign.corpus_heldout))}
        tokenize_s = time.monotonic() - t0
        names = {"fit.skill": f"[overlay] domain_train ({', '.join(f.file for f in ov.domain_train)})",
                 "judge.skill": f"[overlay] domain_heldout ({', '.join(f.file for f in ov.domain_heldout)})",
                 "fit.general": f"[corpus] train ({', '.join(str(f.path) for f in campaign.corpus_train)})",
                 "judge.general": f"[corpus] heldout ({', '.join(str(f.path) for f in campaign.corpus_heldout)})"}
        t1 = time.monotonic()
        model = models.torch_model(spec)
        load_s = time.monotonic() - t1
        layer = policy.layer_of(int(model.config.num_hidden_layers))
        evidence = gather(model, fit=fit, judge=judge, layer=layer, rank=policy.rank,
                          prompt_tokens=policy.prompt_tokens, fit_prompts=policy.fit_prompts,
                          judge_prompts=policy.judge_prompts, names=names)
        evidence["seconds"].update(tokenize=tokenize_s, load=load_s)
        evidence["texts"] = {"domain_train": donors.domain_identity(ov.domain_train, ov.domain_package),
                             "domain_heldout": donors.domain_identity(ov.domain_heldout, ov.domain_package),
                             "corpus_train": [{"path": str(f.path), "sha256": f.sha256} for f in campaign.corpus_train],
                             "corpus_heldout": [{"path": str(f.path), "sha256": f.sha256}
                                                for f in campaign.corpus_heldout],
                             "tokens": {f"{stage}.{side}": len(v[side]) for stage, v in (("fit", fit), ("judge", judge))
                                        for side in (SKILL, GENERAL)}}
        return evidence

    evidence = models.memo(key, make)
    return evidence, not built
