"""The routing gate's evidence (issue 34): φ read from the variant's own graph, selection subspaces fitted here, and
the held-out prompts routed by the native probe over the skill's bundle.

φ(x) (:func:`harness.overlay.routing.phi_of_values`) is the mean and the spread over the prompt's tokens of the
graph's ``present.L.value`` after a prefill of the prompt alone on the backbone (:func:`phi`, ``OrtDecoder``): what
any decoder graph outputs, so the probe computes the same φ from its cache at serve time (equal to float tolerance,
suites/harness/test_probe_routing.py). A router decides before the skill applies, so the overlay plays no part.

:func:`gather` fits the subspaces and routes the held-out prompts in Python (a decoder and four id sequences in);
:func:`for_variant` reads the campaign's texts and memoizes the result per variant and policy in the session's
``models`` fixture; :func:`probe_routes` sends held-out prompts to the probe loaded with bundles and returns each
choice and the time routing added.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import EvidenceError
from ..hashing import sha256_bytes
from ..overlay import routing
from ..overlay.bundle import Feature, Routing
from ..overlay.routing import GENERAL, SKILL


def phi(decoder, prompt: Sequence[int], layer: int) -> np.ndarray:
    """φ of one prompt: a prefill from an empty cache, then :func:`routing.phi_of_values` of its
    ``present.{layer}.value``."""
    ids = np.asarray([list(prompt)], np.int64)
    n = ids.shape[1]
    _, presents = decoder.forward(ids, np.ones((1, n), np.int64), np.arange(n, dtype=np.int64)[None],
                                  decoder.empty_past(1))
    return routing.phi_of_values(presents[2 * layer + 1][0][:, :n])


def features(decoder, prompts: Sequence[Sequence[int]], layer: int) -> np.ndarray:
    """(N, 2 * kv_heads * head_dim) float64: each prompt's φ."""
    return np.stack([phi(decoder, p, layer) for p in prompts])


def _cut(ids: Sequence[int], count: int, length: int, what: str) -> list[tuple[int, ...]]:
    try:
        return routing.windows(ids, count, length)
    except ValueError as exc:
        raise EvidenceError(f"{what}: {exc}; lower [policy.overlay_routing] prompts or prompt_tokens") from None


def gather(decoder, *, fit: Mapping[str, Sequence[int]], judge: Mapping[str, Sequence[int]], layer: int, rank: int,
           prompt_tokens: int, fit_prompts: int, judge_prompts: int,
           names: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Fit one subspace per side of ``fit`` (``skill``, ``general``: token ids) from ``fit_prompts`` windows of
    ``prompt_tokens`` ids, and route ``judge_prompts`` windows of each side of ``judge`` in Python. ``names`` says
    where each text came from (errors, the bundle's record). Returns the bundle's :class:`Routing` (``routing``),
    the held-out windows (``judge_windows``, for the probe), what :func:`harness.gates.overlay_routing.decide` reads
    (``routes``, ``subspaces``; here Python's routes) and every prompt's SHA-256, each held-out prompt's errors and
    the timings."""
    layers = int(decoder.n_layers)
    if not 0 <= layer < layers:
        raise EvidenceError(f"policy.overlay_routing.layer: layer {layer} is out of 0..{layers - 1} for "
                            f"{decoder.graph} ({layers} decoder layers: φ reads present.<layer>.value)")
    names = names or {}
    t0 = time.monotonic()
    fit_windows = {side: _cut(fit[side], fit_prompts, prompt_tokens, names.get(f"fit.{side}", f"fit {side} text"))
                   for side in (SKILL, GENERAL)}
    judge_windows = {side: _cut(judge[side], judge_prompts, prompt_tokens,
                                names.get(f"judge.{side}", f"held-out {side} text")) for side in (SKILL, GENERAL)}
    subspaces = {side: routing.fit(features(decoder, fit_windows[side], layer), rank) for side in (SKILL, GENERAL)}
    t1 = time.monotonic()
    assessed = {side: routing.assess(features(decoder, judge_windows[side], layer), subspaces)
                for side in (SKILL, GENERAL)}
    t2 = time.monotonic()
    pins = {stage: {side: [routing.prompt_sha256(w) for w in ws[side]] for side in (SKILL, GENERAL)}
            for stage, ws in (("fit", fit_windows), ("judge", judge_windows))}
    feature = Feature(layer, int(decoder.kv_heads), int(decoder.head_dim))
    fitted = {side: {"fit_prompts": len(fit_windows[side]), "prompt_tokens": prompt_tokens,
                     "prompts_sha256": sha256_bytes("\n".join(pins["fit"][side]).encode()),
                     "text": names.get(f"fit.{side}", f"fit {side} text")} for side in (SKILL, GENERAL)}
    return {
        "layer": layer, "num_layers": layers, "feature": feature.as_dict(), "prompt_tokens": prompt_tokens,
        "rank_requested": rank, "routing": Routing(feature, subspaces, fitted), "judge_windows": judge_windows,
        "subspaces": {side: {"rank": s.rank, "fit_prompts": len(fit_windows[side])} for side, s in subspaces.items()},
        "prompts": pins,
        "routes": {side: [a["route"] for a in assessed[side]] for side in (SKILL, GENERAL)},
        "errors": {side: [a["errors"] for a in assessed[side]] for side in (SKILL, GENERAL)},
        "seconds": {"fit": t1 - t0, "judge": t2 - t1},
    }


def for_variant(models, variant, campaign, policy) -> tuple[dict[str, Any], bool]:
    """The evidence for ``variant``'s graph under ``policy`` (``[policy.overlay_routing]``), computed once per
    process and reused (φ is the backbone graph's, whatever the donor; the domain text is the campaign's
    ``[overlay]`` text, not a donor's). Returns ``(evidence, reused)``."""
    from .. import corpus
    from ..overlay import donor as donors

    key = ("overlay-routing", variant.id, tuple(sorted(policy.as_dict().items())))
    built = []
    ov = campaign.overlay
    if ov is None:
        raise EvidenceError(f"{campaign.path}: the routing gate needs the campaign's [overlay] domain text")

    def tokenized():   # once per model: every dtype reads the same four texts
        tokenizer = models.tokenizer(variant.model)

        def ids(text: str) -> list[int]:
            return list(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

        t0 = time.monotonic()
        fit = {SKILL: ids(donors.read_domain(ov.domain_train, ov.domain_package)),
               GENERAL: ids(corpus.read(campaign.corpus_train))}
        judge = {SKILL: ids(donors.read_domain(ov.domain_heldout, ov.domain_package)),
                 GENERAL: ids(corpus.read(campaign.corpus_heldout))}
        return fit, judge, time.monotonic() - t0

    def make():
        built.append(True)
        fit, judge, tokenize_s = models.memo(("overlay-routing-ids", variant.model.id), tokenized)
        names = {"fit.skill": f"[overlay] domain_train ({', '.join(_file(f) for f in ov.domain_train)})",
                 "judge.skill": f"[overlay] domain_heldout ({', '.join(_file(f) for f in ov.domain_heldout)})",
                 "fit.general": f"[corpus] train ({', '.join(str(f.path) for f in campaign.corpus_train)})",
                 "judge.general": f"[corpus] heldout ({', '.join(str(f.path) for f in campaign.corpus_heldout)})"}
        t1 = time.monotonic()
        decoder = models.decoder(variant)
        load_s = time.monotonic() - t1
        evidence = gather(decoder, fit=fit, judge=judge, layer=policy.layer_of(int(decoder.n_layers)),
                          rank=policy.rank, prompt_tokens=policy.prompt_tokens, fit_prompts=policy.fit_prompts,
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


def _file(f) -> str:
    return str(f.file if getattr(f, "file", None) else f.path)


def probe_routes(binary: Path, graph: Path, bundles: Sequence[Path], windows: Mapping[str, Sequence[Sequence[int]]],
                 threads: int, *, new_tokens: int = 1, with_phi: bool = False) -> dict[str, Any]:
    """Each window of each side sent to the probe loaded with ``bundles``: ``{"load": its load record, "routes":
    {side: [the result's "route" record plus "generated_ids" and "generate_prefill_ms" (the chosen session's)]}}``."""
    from ..throughput import probe

    longest = max((len(w) for ws in windows.values() for w in ws), default=1)
    out: dict[str, list[dict[str, Any]]] = {side: [] for side in windows}
    with probe.ProbeProcess(binary, graph, threads, max_seq=longest + new_tokens + 8, bundles=tuple(bundles)) as p:
        load = p.load
        for side, ws in windows.items():
            for w in ws:
                r = p.request({"id": f"{side}-{len(out[side])}", "prompt_ids": list(w), "max_new_tokens": new_tokens,
                               "mode": "greedy", "stop_ids": [], "threads": threads, "phi": with_phi})
                out[side].append({**r["route"], "generated_ids": r["generated_ids"],
                                  "generate_prefill_ms": r["prefill_ms"]})
        status = p.close()
    if status != 0:
        raise probe.ProbeError(f"{' '.join(p.cmd)}: exited with status {status} after routing")
    return {"load": load, "routes": out}
