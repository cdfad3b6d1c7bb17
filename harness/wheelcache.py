"""Wheels Gatehouse compiles for this machine, built once and kept in the artifact store.

llama-cpp-python (the llama.cpp peer) has no wheel on the package index for this machine's flags: pip compiles it
from source, minutes of a fresh machine's set-up.  ``wheel(requirement, cmake_args)`` builds it once into the
content-addressed store (kind ``wheel``), keyed by the requirement, the CMake flags, the interpreter, the
architecture, the CPU's instruction-set flags (it compiles with ``-march=native``) and the C++ compiler, so a store
imported from another machine (``bin/gatehouse cache import``) serves it only where the same flags hold; every
reuse re-verifies the wheel's SHA-256.  ``python -m harness.wheelcache REQUIREMENT [CMAKE_ARGS]`` prints the wheel's
path for ``bin/gatehouse setup`` to install.

Stdlib only: it runs in set-up, before the requirements are installed.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

from .artifacts import ArtifactStore
from .errors import ArtifactError
from .fingerprint import isa_flags


def _compiler() -> str:
    cxx = os.environ.get("CXX") or "c++"
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return f"{cxx}: not found"
    return (out.stdout or out.stderr).splitlines()[0] if (out.stdout or out.stderr) else cxx


def machine_params(cmake_args: str) -> dict[str, str | None]:
    """What decides the compiled wheel's bytes besides the requirement: the key's parameters."""
    try:
        isa = isa_flags(Path("/proc/cpuinfo").read_text())
    except OSError:
        isa = None
    return {"cmake_args": cmake_args, "python": f"{sys.implementation.name}{sys.version_info[0]}.{sys.version_info[1]}",
            "machine": platform.machine(), "isa_flags": isa, "compiler": _compiler()}


def wheel(requirement: str, cmake_args: str = "", store: ArtifactStore | None = None,
          extra_pip_args: tuple[str, ...] = ()) -> Path:
    """The wheel of ``requirement`` built with ``cmake_args`` for this machine: from the store, else built there by
    ``pip wheel`` (no pip cache: a cached wheel may hold other flags)."""
    store = store or ArtifactStore()
    cmake_args = f"{os.environ.get('CMAKE_ARGS', '')} {cmake_args}".strip()   # a user's own flags are part of the key

    def build(out: Path, progress) -> dict[str, str]:
        env = {**os.environ, "CMAKE_ARGS": cmake_args,
               "CMAKE_BUILD_PARALLEL_LEVEL": os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))}
        progress(f"compiling {requirement} (once per machine flags; kept in the artifact store)")
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps",
                               "--no-cache-dir", *extra_pip_args, "-w", str(out), requirement], env=env,
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise ArtifactError(f"pip wheel {requirement} failed (exit {done.returncode}): "
                                f"{(done.stderr or done.stdout).strip()[-2000:]}")
        wheels = sorted(out.glob("*.whl"))
        if len(wheels) != 1:
            raise ArtifactError(f"pip wheel {requirement} left {len(wheels)} wheels in {out}, expected one")
        return {"wheel": wheels[0].name}

    art = store.get_or_build("wheel", {"requirement": requirement}, machine_params(cmake_args), [Path(__file__)],
                             build, label=f"wheel {requirement}")
    return art.file(art.manifest["builder"]["wheel"])


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not 1 <= len(args) <= 2:
        print("usage: python -m harness.wheelcache REQUIREMENT [CMAKE_ARGS]", file=sys.stderr)
        return 2
    try:
        path = wheel(args[0], args[1] if len(args) > 1 else "")
    except ArtifactError as exc:
        print(f"gatehouse: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
