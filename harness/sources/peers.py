"""A model's ``peers`` key: which other tools' graphs of it (``harness.domain.PEERS``) are built and measured
beside its own variants, never qualified. Absent (or ``true``): every peer its source can have (ORT-GenAI's
builds of the Hugging Face weights; llama.cpp on a GGUF); ``false`` or ``[]``: none; a list: those kinds.
``bin/gatehouse init`` writes ``peers = []`` for an ``onnx`` source unless told ``--peers`` (opt-in), and for
any source given ``--no-peers``."""

from __future__ import annotations

from typing import Any

from .. import fields
from ..domain import PEERS, ModelSpec
from ..fields import Where

KEY = "peers"


def parse(table: dict[str, Any], where: Where, source: str, found: dict[str, Any]) -> dict[str, Any]:
    """The ModelSpec field ``peers`` from ``table`` ({} when absent or true); ``found`` is the source parser's
    output, which says what the model can have. A listed peer it cannot have is refused by name."""
    value = table.get(KEY)
    w = where.child(KEY)
    if value is None or value is True:
        return {}
    if value is False:
        return {"peers": ()}
    kinds = fields.strings(w, value, tuple(PEERS), nonempty=False)
    have = possible(source, found)
    for i, kind in enumerate(kinds):
        if kind not in have:
            raise w.child(i).fail(f"{kind!r} is not a peer this model can have ({PEERS[kind].describe}); its "
                                  f"source's peers: {', '.join(have) or 'none'}")
    return {"peers": kinds}


def possible(source: str, found: dict[str, Any]) -> tuple[str, ...]:
    """The peer kinds a model of ``source`` with the parsed fields ``found`` can have."""
    model = ModelSpec(id="-", tier="-", source=source, dtypes=(), **found)
    return tuple(kind for kind, peer in PEERS.items() if peer.available(model))
