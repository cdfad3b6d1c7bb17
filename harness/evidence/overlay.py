"""Held-out perplexity of a backbone graph against the same graph with a skill overlay applied by onnxruntime."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ..runtime import OrtDecoder
from .quantization import collect


def quality(graph: Path, overlay: Path, general_ids: Sequence[int], domain_ids: Sequence[int], *, context: int,
            max_tokens: int, threads: int) -> dict[str, Any]:
    """Per-token NLL of the backbone (``nll_reference``) and the overlaid graph (``nll_candidate``) on the general
    held-out ids and the held-out domain ids, each scored as the quantization gate scores (second half of each
    window)."""
    backbone = OrtDecoder(graph, threads)
    overlaid = OrtDecoder(graph, threads, overlay=overlay)
    out: dict[str, Any] = {"overlay_tensors": len(overlaid.overlay.tensors) if overlaid.overlay else 0}
    for part, ids in (("general", general_ids), ("domain", domain_ids)):
        e = collect(backbone, overlaid, ids, context, max_tokens,
                    what=f"overlay quality {graph.parent.name}/{graph.name}: {part} held-out windows")
        out[part] = {k: e[k] for k in ("nll_reference", "nll_candidate", "windows", "context")}
    return out
