"""The token table and an independent text oracle: what text a sequence of token ids must produce."""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ArtifactError

KINDS = ("pad", "word")


@dataclass(frozen=True)
class TokenTable:
    """Token ids to pieces.  ``pad`` tokens are emitted when no word ends; they add no text."""

    pieces: tuple[str, ...]
    kinds: tuple[str, ...]

    def __post_init__(self):
        if len(self.pieces) != len(self.kinds) or not self.pieces:
            raise ArtifactError("token table: pieces and kinds must be non-empty and of equal length")
        for i, (piece, kind) in enumerate(zip(self.pieces, self.kinds)):
            if kind not in KINDS:
                raise ArtifactError(f"token table: id {i} has kind {kind!r}, not one of {KINDS}")
            if kind == "word" and (not piece or any(c.isspace() for c in piece)):
                raise ArtifactError(f"token table: word id {i} piece {piece!r} is empty or has whitespace")

    @classmethod
    def from_words(cls, words) -> "TokenTable":
        words = tuple(words)
        return cls(pieces=("<pad>",) + words, kinds=("pad",) + ("word",) * len(words))

    @classmethod
    def load(cls, path: Path) -> "TokenTable":
        """Read ``id<TAB>kind<TAB>piece`` lines, ids dense from 0."""
        pieces, kinds = [], []
        for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            parts = line.split("\t")
            if len(parts) != 3 or parts[0] != str(len(pieces)):
                raise ArtifactError(f"{path}: line {n} is not '{len(pieces)}<TAB>kind<TAB>piece': {line!r}")
            kinds.append(parts[1])
            pieces.append(parts[2])
        return cls(tuple(pieces), tuple(kinds))

    def dump(self) -> str:
        return "".join(f"{i}\t{k}\t{p}\n" for i, (p, k) in enumerate(zip(self.pieces, self.kinds)))

    @property
    def size(self) -> int:
        return len(self.pieces)

    @property
    def words(self) -> tuple[str, ...]:
        return tuple(p for p, k in zip(self.pieces, self.kinds) if k == "word")

    def word_id(self, word: str) -> int:
        try:
            i = self.pieces.index(word)
        except ValueError:
            raise ArtifactError(f"token table: no word {word!r}") from None
        if self.kinds[i] != "word":
            raise ArtifactError(f"token table: {word!r} is a {self.kinds[i]} token")
        return i


@dataclass(frozen=True)
class Oracle:
    """What the engine's text must be: deltas as ``(window index, text)``, the text and its counts."""

    deltas: tuple[tuple[int, str], ...]
    text: str
    visible_tokens: int
    skipped_tokens: int


def oracle(ids, table: TokenTable) -> Oracle:
    """Words join with one space; each visible token adds one append-only delta."""
    deltas, text, visible, skipped = [], "", 0, 0
    for index, i in enumerate(ids):
        if table.kinds[i] == "pad":
            skipped += 1
            continue
        piece = table.pieces[i] if not text else " " + table.pieces[i]
        deltas.append((index, piece))
        text += piece
        visible += 1
    return Oracle(tuple(deltas), text, visible, skipped)


def ids_digest(ids) -> str:
    """SHA-256 over the ids as little-endian uint32."""
    return hashlib.sha256(b"".join(struct.pack("<I", i) for i in ids)).hexdigest()
