"""Model sources: where a campaign's model comes from, each checked when the campaign loads.

A ``[[models]]`` table's ``source`` names one of these; its parser reads the source's own keys and
returns the :class:`~harness.domain.ModelSpec` fields it fills, or raises a
:class:`~harness.errors.CampaignError` naming the file, the field and the value. What a source
needs from the disk (a directory's ``config.json``, a GGUF's header, an export's graphs, opened by
``onnx_graph``) is read here, before any artifact is built; what is costly (an onnxruntime session, a
tokenizer) is checked by the first fixture that opens it, with the same kind of message.

- ``train``: the CI model, trained here (``[models.train]``).
- ``gguf``: a GGUF file, from an installed package (``package`` + ``file``) or on disk (``path``),
  pinned by ``sha256``; dequantized to a Hugging Face directory, then exported by Gatehouse.
- ``hf``: a local Hugging Face directory; exported by Gatehouse.
- ``onnx``: an existing export directory; Gatehouse builds nothing and measures its graphs.

Every source also takes ``peers`` (:mod:`.peers`): which other tools' graphs of the model are measured beside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ..fields import Where
from . import gguf, hf, onnx, peers, train

Parser = Callable[[dict[str, Any], Where, Path], dict[str, Any]]


def _with_peers(source: str, parse: Parser) -> Parser:
    """``parse`` followed by the ``peers`` key every source takes (:mod:`.peers`), checked against what it found."""
    def parse_model(table: dict[str, Any], where: Where, base: Path) -> dict[str, Any]:
        found = parse(table, where, base)
        return {**found, **peers.parse(table, where, source, found)}
    return parse_model


# source name -> parse(table, where, base directory of relative paths) -> ModelSpec keyword arguments
PARSERS: dict[str, Parser] = {name: _with_peers(name, parse) for name, parse in
                              {"train": train.parse, "gguf": gguf.parse, "hf": hf.parse, "onnx": onnx.parse}.items()}
KEYS: dict[str, set[str]] = {name: keys | {peers.KEY} for name, keys in
                             {"train": train.KEYS, "gguf": gguf.KEYS, "hf": hf.KEYS, "onnx": onnx.KEYS}.items()}

