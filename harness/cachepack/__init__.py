"""Portable artifact caches: ``bin/gatehouse cache export PATH`` / ``import PATH`` / ``list``.

A cache archive carries entries of the content-addressed artifact store (:mod:`harness.artifacts`) from one
machine to another, so a shard or a socket host starts warm: :mod:`.writer` writes the verified entries and a
manifest of every file's SHA-256 into one tar, atomically; :mod:`.reader` re-verifies every file against that
manifest and the entry's own ``artifact.json`` before the entry becomes visible in the store, and refuses a
corrupt or foreign entry by name; :mod:`.entries` is what an entry is and how it verifies; :mod:`.cli` the
command.
"""

from .entries import Entry, Listed, scan, verify
from .reader import Imported, import_
from .writer import FORMAT, HEADER, VERSION, Exported, export, write_archive

__all__ = ["FORMAT", "HEADER", "VERSION", "Entry", "Exported", "Imported", "Listed", "export", "import_", "scan",
           "verify", "write_archive"]
