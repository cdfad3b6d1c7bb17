"""Builds the native reference engine and writes the command line that runs it on a profile."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from harness.errors import ArtifactError
from harness.streaming.profile import StreamProfile

ROOT = Path(__file__).resolve().parents[2]
SOURCE_DIR = ROOT / "native" / "streaming"
INCLUDE_DIR = ROOT / "native"  # the headers shared with the probe, included as "common/..."
COMMON_DIR = INCLUDE_DIR / "common"
# Everything the engine and the feeder are built from: the artifact key hashes these.
SOURCES = (SOURCE_DIR / "engine.cpp", SOURCE_DIR / "feeder.cpp", COMMON_DIR / "sha256.hpp", COMMON_DIR / "json.hpp")
BINARY = "gatehouse-stream"
FEEDER = "gatehouse-feed"  # native/streaming/feeder.cpp: the paced feeder process
FLAGS = ("-std=c++17", "-O2", "-Wall", "-Wextra", "-fno-fast-math")


def compiler() -> str:
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not cxx:
        raise ArtifactError("no C++17 compiler: set CXX or install g++ (Debian package g++)")
    return cxx


def _compile(outdir: Path, binary: str, source: Path, log: str) -> list[str]:
    cmd = [compiler(), *FLAGS, "-I", str(INCLUDE_DIR), "-o", str(outdir / binary), str(source)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    (outdir / log).write_text(" ".join(cmd) + "\n" + result.stdout + result.stderr)
    if result.returncode != 0:
        raise ArtifactError(f"building {source} failed (status {result.returncode}): {result.stderr[-2000:]}")
    (outdir / binary).chmod(0o755)
    return cmd


def build_feeder(outdir: Path, progress=None) -> dict:
    """Compile only the feeder into ``outdir`` (for tests that run fake engines)."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    return {"feeder_command": _compile(outdir, FEEDER, SOURCE_DIR / "feeder.cpp", "build-feeder.log")}


def build_engine(outdir: Path, progress=None) -> dict:
    """Compile the engine and the feeder into ``outdir`` (a build directory outside the git tree); an artifact
    builder."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    return {"command": _compile(outdir, BINARY, SOURCE_DIR / "engine.cpp", "build.log"), **build_feeder(outdir)}


def engine_command(binary: Path, weights: Path, vocab: Path, profile: StreamProfile) -> list[str]:
    return [str(binary), "--model", str(weights), "--vocab", str(vocab), *profile.engine_args()]
