"""Gatehouse's domain vocabulary: dtypes, tiers, peer graphs, graph file names, models and variants.

One small module that everything may import and that imports nothing of Gatehouse's own, so the
campaign loader, the exporters, the gates and the report speak of a variant the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DTYPES = ("fp32", "q8", "q4")          # the variants Gatehouse exports and may qualify
TIERS = ("ci", "benchmark")
SOURCES = ("gguf", "train", "hf", "onnx")   # harness/sources/: where a model comes from
GRAPH_FILES = {"fp32": "onnx/model.onnx", "q8": "onnx/model_quantized.onnx", "q4": "onnx/model_q4.onnx"}


@dataclass(frozen=True)
class CorpusFile:
    """One text file of a campaign's corpus (or an overlay's domain text), pinned by SHA-256."""

    path: Path
    sha256: str


@dataclass(frozen=True)
class Peer:
    """Another tool's graph of the same model: measured beside the variants, never qualified.

    ``kind`` is what a gate's ``applies_to`` names; ``label(model)`` is the dtype label its receipts
    carry (None when the model has no such peer); ``policy_dtype`` is the variant whose policy limits
    it is held to; ``marks`` are the pytest markers its parameters get (what it needs to run).
    """

    kind: str
    policy_dtype: str
    marks: tuple[str, ...]
    describe: str

    def label(self, model: "ModelSpec") -> str | None:
        """The peer's dtype label for ``model``, or None when the model does not measure it (its campaign's
        ``peers`` leaves it out, or its source cannot have it: see ``available``)."""
        if model.peers is not None and self.kind not in model.peers:
            return None
        return self.available(model)

    def available(self, model: "ModelSpec") -> str | None:
        """The label this peer would carry for ``model`` whatever its ``peers`` says; None when its source
        cannot have it."""
        if self.kind in (PEER_GENAI, PEER_GENAI_BEST):   # ORT-GenAI builds from the model's HF weights
            return self.kind if model.has_weights else None
        if self.kind == PEER_GGUF:
            if model.source != "gguf" or not model.file:
                return None
            quant = re.search(r"[.-](Q\w+|F16|F32|BF16)\.gguf$", model.file, re.I)
            return f"gguf-{quant.group(1).lower() if quant else 'unknown'}"
        raise KeyError(self.kind)


PEER_GENAI = "ort-genai-int4"   # ORT-GenAI's int4 build of the model's HF directory
PEER_GENAI_BEST = "ort-genai-kquant"   # the same builder at its best documented quality: k-quant, an int8 head
PEER_GGUF = "gguf"              # the original GGUF a model was converted from, run by llama.cpp
PEERS = {
    PEER_GENAI: Peer(PEER_GENAI, "q4", ("native",), "ORT-GenAI's int4 build of the same HF directory"),
    PEER_GENAI_BEST: Peer(PEER_GENAI_BEST, "q4", ("native",), "ORT-GenAI's int4 build of the same HF directory at its "
                          "best documented quality settings (k-quant rounding, the last MatMul in int8)"),
    PEER_GGUF: Peer(PEER_GGUF, "q4", ("native",), "the original GGUF under llama.cpp"),
}


def is_peer_label(dtype: str | None, recipe: Any = None) -> bool:
    """True for a peer graph's dtype label (never qualified), False for Gatehouse's own dtypes and for a
    recipe's label (``recipe``: the receipt's ``variant.recipe`` block, or a Recipe)."""
    return dtype is not None and dtype not in DTYPES and not recipe



@dataclass(frozen=True)
class ModelSpec:
    id: str
    tier: str
    source: str
    dtypes: tuple[str, ...]
    package: str | None = None
    file: str | None = None
    sha256: str | None = None
    train: dict[str, Any] = field(default_factory=dict)
    eval_context: int = 256
    path: Path | None = None          # gguf (a file), hf (a directory), onnx (an export directory): absolute
    hf_path: Path | None = None       # onnx: the HF directory beside the export (PyTorch reference, peers), if any
    graphs: tuple[tuple[str, str], ...] = ()   # onnx: (dtype, graph path relative to ``path``)
    config_dir: Path | None = None    # onnx: where its config and tokenizer are (``path``, or a graph's folder)
    architecture: str | None = None   # config.json's model_type (GGUF: general.architecture), read at load
    recipes: tuple[Any, ...] = ()     # harness.recipes.Recipe: the campaign's [[recipes]] that name this model
    browser: tuple[str, ...] | None = None   # the variants (dtypes, recipe ids) delivered to the browser; None: all
    peers: tuple[str, ...] | None = None     # the PEERS kinds measured beside it; None: every one its source has

    def in_browser(self, label: str) -> bool:
        """Whether the variant ``label`` (a dtype or recipe id) is delivered to the browser: the browser gates
        time and judge it, and its qualification needs them."""
        return self.browser is None or label in self.browser

    @property
    def has_weights(self) -> bool:
        """True when Gatehouse can load the model in PyTorch (every source but an onnx export on its own)."""
        return self.source != "onnx" or self.hf_path is not None

    def graph_file(self, dtype: str) -> str:
        """The graph of ``dtype`` relative to the export directory (the transformers.js layout unless the
        onnx source named or found another)."""
        return dict(self.graphs).get(dtype) or GRAPH_FILES[dtype]


@dataclass(frozen=True)
class Variant:
    """One model at one dtype (or one peer graph of it): what a gate test is parametrized over."""

    model: ModelSpec
    dtype: str
    peer: str | None = None   # the peer kind when this is another tool's graph
    recipe: Any = None        # harness.recipes.Recipe when this is a recipe of the campaign's [[recipes]]

    @property
    def id(self) -> str:
        return f"{self.model.id}-{self.dtype}"

    @property
    def policy_dtype(self) -> str:
        """The dtype whose policy limits apply: the variant's own, a recipe's by its bits, or the one its
        peer is held to."""
        if self.recipe is not None:
            return self.recipe.policy_dtype
        return PEERS[self.peer].policy_dtype if self.peer else self.dtype

    @property
    def own(self) -> bool:
        """Gatehouse's own export (a fixed dtype or a recipe): may be qualified; a peer graph never is."""
        return self.peer is None

    def as_dict(self) -> dict[str, Any]:
        d = {"model": self.model.id, "dtype": self.dtype, "tier": self.model.tier}
        if self.peer is None:
            d["browser"] = self.model.in_browser(self.dtype)
        if self.recipe is not None:
            d["recipe"] = self.recipe.as_dict()
        return d
