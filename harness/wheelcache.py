"""Wheels Gatehouse compiles for this machine, built once and kept in the artifact store.

llama-cpp-python (the llama.cpp peer) has no wheel on the package index for this machine's flags: pip compiles it
from source, minutes of a fresh machine's set-up.  ``wheel(requirement, cmake_args)`` builds it once into the
content-addressed store (kind ``wheel``), keyed by the requirement, the CMake flags, the interpreter, the
architecture, the CPU's instruction-set flags (it compiles with ``-march=native``) and the C++ compiler, so a store
imported from another machine (``bin/gatehouse cache import``) serves it only where the same flags hold; every
reuse re-verifies the wheel's SHA-256.  A CMake file included after a named project's ``project()`` call (the
``--project-include`` below) is keyed by its content.  ``python -m harness.wheelcache REQUIREMENT [CMAKE_ARGS]
[--project-include PROJECT=FILE]...`` prints the wheel's path for ``bin/gatehouse setup`` to install.

Stdlib only: it runs in set-up, before the requirements are installed.
"""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

from .artifacts import ArtifactStore
from .errors import ArtifactError
from .fingerprint import isa_flags
from .hashing import sha256_file


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


def project_include_args(includes: tuple[tuple[str, Path], ...]) -> str:
    """CMake flags that include each file right after the named project's ``project()`` call
    (``CMAKE_PROJECT_<name>_INCLUDE``), shell-quoted: scikit-build-core splits CMAKE_ARGS like a shell."""
    return " ".join(shlex.quote(f"-DCMAKE_PROJECT_{name}_INCLUDE={Path(path).resolve()}") for name, path in includes)


def wheel(requirement: str, cmake_args: str = "", store: ArtifactStore | None = None,
          extra_pip_args: tuple[str, ...] = (), project_includes: tuple[tuple[str, Path], ...] = ()) -> Path:
    """The wheel of ``requirement`` built with ``cmake_args`` for this machine: from the store, else built there by
    ``pip wheel`` (no pip cache: a cached wheel may hold other flags).  ``project_includes``: (CMake project name,
    file) pairs, each file included right after that project's ``project()`` call; the key holds each project's name
    with its file's SHA-256, never the path, so the entry travels between clones."""
    store = store or ArtifactStore()
    cmake_args = f"{os.environ.get('CMAKE_ARGS', '')} {cmake_args}".strip()   # a user's own flags are part of the key
    for name, path in project_includes:
        if not Path(path).is_file():
            raise ArtifactError(f"{path}: the CMake project include for {name!r} is not a file")
    build_cmake_args = f"{cmake_args} {project_include_args(project_includes)}".strip()

    def build(out: Path, progress) -> dict[str, str]:
        env = {**os.environ, "CMAKE_ARGS": build_cmake_args,
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

    params = machine_params(cmake_args)
    if project_includes:   # each project with its file's content; absent when there are none
        params["project_includes"] = [[name, sha256_file(path)] for name, path in project_includes]
    art = store.get_or_build("wheel", {"requirement": requirement}, params, [Path(__file__)], build,
                             label=f"wheel {requirement}")
    return art.file(art.manifest["builder"]["wheel"])


USAGE = "usage: python -m harness.wheelcache REQUIREMENT [CMAKE_ARGS] [--project-include PROJECT=FILE]..."


def parse_args(args: list[str]) -> tuple[str, str, tuple[tuple[str, Path], ...]]:
    """(requirement, cmake_args, project_includes) from the command line, or ValueError naming what is wrong.  Not
    argparse: CMAKE_ARGS itself begins with a dash."""
    rest: list[str] = []
    includes: list[tuple[str, Path]] = []
    i = 0
    while i < len(args):
        if args[i] == "--project-include":
            if i + 1 >= len(args):
                raise ValueError("--project-include needs PROJECT=FILE")
            name, sep, path = args[i + 1].partition("=")
            if not sep or not name or not path:
                raise ValueError(f"--project-include {args[i + 1]!r}: expected PROJECT=FILE")
            includes.append((name, Path(path)))
            i += 2
        else:
            rest.append(args[i])
            i += 1
    if not 1 <= len(rest) <= 2:
        raise ValueError(f"expected REQUIREMENT and at most one CMAKE_ARGS, got {len(rest)} arguments")
    return rest[0], rest[1] if len(rest) > 1 else "", tuple(includes)


def main(argv: list[str] | None = None) -> int:
    try:
        requirement, cmake_args, includes = parse_args(sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        print(f"{USAGE}\n{exc}", file=sys.stderr)
        return 2
    try:
        path = wheel(requirement, cmake_args, project_includes=includes)
    except ArtifactError as exc:
        print(f"gatehouse: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
