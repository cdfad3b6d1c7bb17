"""Campaign paths as the sources read them."""

from __future__ import annotations

from pathlib import Path


def resolve(base: Path, value: str) -> Path:
    """A campaign path: ``~`` expanded, relative paths taken from the campaign file's directory."""
    p = Path(value).expanduser()
    return (p if p.is_absolute() else base / p).resolve()
