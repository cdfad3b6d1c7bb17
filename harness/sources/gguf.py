"""``source = "gguf"``: a GGUF file, shipped by an installed package (``package`` + ``file``) or on disk
(``path``), pinned by ``sha256``. Its header is read at load: the architecture and every tensor type must
be ones the converter handles (harness/models/gguf.py names them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import fields
from ..errors import ArtifactError
from ..fields import Where
from .paths import resolve

KEYS = {"package", "file", "path", "sha256"}


def parse(table: dict[str, Any], where: Where, base: Path) -> dict[str, Any]:
    from ..models import gguf as reader

    sha = fields.sha256(where.child("sha256"), table.get("sha256"))
    if "path" in table:
        if "package" in table or "file" in table:
            raise where.fail("a gguf model takes either path or package + file, not both")
        if not isinstance(table["path"], str) or not table["path"]:
            raise where.child("path").fail(f"expected a path to a .gguf file, got {table['path']!r}")
        path = resolve(base, table["path"])
        if not path.is_file():
            raise where.child("path").fail(f"{path} does not exist or is not a file")
        try:
            info = reader.inspect(path)
            reader.check_supported(path, info)
        except (ArtifactError, ValueError) as exc:
            raise where.child("path").fail(str(exc)) from None
        return {"path": path, "file": path.name, "sha256": sha, "architecture": info.get("architecture")}
    for key in ("package", "file"):
        if not isinstance(table.get(key), str) or not table[key]:
            raise where.fail(f"a gguf model needs path = \"<file.gguf>\", or package and file; {key!r} is "
                             f"{table.get(key)!r}")
    return {"package": table["package"], "file": table["file"], "sha256": sha}
