"""The engine files a timing ran on, pinned in its receipt by SHA-256 and size: the native probe binary, the
ONNX Runtime shared library the probe (or this process) loaded, and the other in-process engines' libraries.

A throughput figure describes a graph *and* the code that ran it: two receipts with the same graph and a
different ``libonnxruntime`` are not the same measurement.  :func:`pin_runtime` is the one way a timing
test pins them (roles ``probe_binary``, ``onnxruntime_library`` and those of :data:`ENGINES`); the report's
staleness check then covers them as it covers graphs.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import ArtifactError
from ..hashing import sha256_file_once
from . import probe

# In-process engines: for each, the shared objects it runs on, as (role, package whose directory holds them,
# file-name pattern).  Python onnxruntime's runtime is linked into its pybind11 module (libonnxruntime.so.*
# beside it is what ORT-GenAI and the probe load); only what the engine runs on is pinned, so a receipt's
# artifacts do not depend on what else the process loaded earlier.
ENGINES = {
    "onnxruntime": (("onnxruntime_library", "onnxruntime", "onnxruntime_pybind11_state*"),),
    "onnxruntime_genai": (("onnxruntime_genai_library", "onnxruntime_genai", "*.so*"),
                          ("onnxruntime_library", "onnxruntime", "libonnxruntime.so*")),
    "llama_cpp": (("llama_cpp_library", "llama_cpp", "lib*.so*"),),
}
PROBE_ROLE = "probe_binary"
RUNTIME_ROLE = "onnxruntime_library"

def identity(path: Path | str) -> dict[str, Any]:
    """``{"path", "sha256", "bytes"}`` of a file (its resolved path), hashed once per process per
    (path, device, inode, size, mtime_ns, ctime_ns).

    Sound for engine files: rewriting a file changes its mtime and ctime, replacing it (pip, a rebuild's
    rename) changes its inode, and no user-space call sets ctime back; so a changed library is hashed again,
    while the 35 MB runtime every timing test pins is hashed once per process rather than once per test.
    """
    p = Path(path).resolve()
    try:
        st = p.stat()
    except OSError as exc:
        raise ArtifactError(f"{p}: cannot pin an engine file that is not there ({exc.strerror})") from exc
    return {"path": str(p), "sha256": sha256_file_once(p), "bytes": st.st_size}


def mapped_files(maps: str | None = None) -> list[str]:
    """Paths of the files mapped into this process (``/proc/self/maps``, or ``maps``), sorted, unique."""
    if maps is None:
        try:
            maps = Path("/proc/self/maps").read_text()
        except OSError:
            return []
    return sorted({line.split(None, 5)[5].strip() for line in maps.splitlines()
                   if len(line.split(None, 5)) == 6 and line.split(None, 5)[5].startswith("/")})


def _is_shared_object(path: str) -> bool:
    name = Path(path).name
    return name.endswith(".so") or ".so." in name


def loaded_shared_objects(package: str, pattern: str = "*", maps: str | None = None) -> list[Path]:
    """The shared objects this process has mapped from ``package``'s directory whose name matches ``pattern``."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ArtifactError(f"cannot pin {package}'s libraries: the package is not installed")
    roots = [Path(d).resolve() for d in spec.submodule_search_locations]
    found = []
    for f in mapped_files(maps):
        p = Path(f)
        if _is_shared_object(f) and p.match(pattern) and any(p.is_relative_to(r) for r in roots):
            found.append(p)
    return found


def probe_runtime_library(probe_load: Mapping[str, Any] | None) -> Path:
    """The ONNX Runtime library a probe process ran on: the path its load record names (resolved by the
    probe with dladdr), else the one native/setup.sh linked the build against (``native/build/probe/RUNTIME``)."""
    named = (probe_load or {}).get("runtime_library")
    if named and named != "unknown":
        return Path(named)
    record = probe.BUILD / "RUNTIME"
    try:
        return Path(record.read_text().strip())
    except OSError as exc:
        raise ArtifactError(f"{record}: the probe's runtime library is not recorded ({exc.strerror}); "
                            f"rebuild with native/setup.sh") from exc


def pin_runtime(receipt, *, probe_binary: Path | str | None = None, probe_load: Mapping[str, Any] | None = None,
                in_process: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Pin into ``receipt`` the engine files a timing ran on (SHA-256 and size); returns the identities pinned.

    - ``probe_binary``: the native probe (role ``probe_binary``) and the ONNX Runtime library it loaded
      (role ``onnxruntime_library``, from ``probe_load``, the probe's load record; see
      :func:`probe_runtime_library`).
    - ``in_process``: engines of :data:`ENGINES` this process ran the timing on (``"onnxruntime"`` for the
      Python lane and in-process step timing, ``"onnxruntime_genai"``, ``"llama_cpp"``): their loaded shared
      objects; one that has none loaded is refused (the timing did not run on what the caller says).
    """
    pinned: list[tuple[str, dict[str, Any]]] = []
    if probe_binary is not None:
        pinned.append((PROBE_ROLE, identity(probe_binary)))
        pinned.append((RUNTIME_ROLE, identity(probe_runtime_library(probe_load))))
    for engine in in_process:
        if engine not in ENGINES:
            raise ValueError(f"pin_runtime: unknown in-process engine {engine!r} (known: {', '.join(ENGINES)})")
        for role, package, pattern in ENGINES[engine]:
            files = loaded_shared_objects(package, pattern)
            if not files:
                raise ArtifactError(f"cannot pin {engine}'s {role}: no {package} shared object matching {pattern!r} "
                                    f"is loaded in this process (pid {os.getpid()})")
            pinned += [(role, identity(f)) for f in files]
    for role, ident in pinned:
        receipt.pin_identity(role, ident["path"], ident["sha256"], ident["bytes"])
    return [{"role": role, **ident} for role, ident in pinned]
