"""A wheel compiled for this machine is built once into the artifact store and reused, verified (harness.wheelcache,
what bin/gatehouse setup installs llama-cpp-python from)."""

import subprocess
import sys

import pytest

from harness import wheelcache
from harness.artifacts import ArtifactStore
from harness.errors import ArtifactError

pytest.importorskip("setuptools")


def package(tmp_path, version="1.0"):
    src = tmp_path / f"src-{version}"
    (src / "toywheel").mkdir(parents=True, exist_ok=True)
    (src / "toywheel" / "__init__.py").write_text(f"VERSION = {version!r}\n")
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "toywheel"\nversion = "{version}"\n[tool.setuptools]\npackages = ["toywheel"]\n')
    return src


def test_a_wheel_is_built_once_then_reused_and_keyed_by_the_flags(tmp_path, monkeypatch):
    monkeypatch.delenv("CMAKE_ARGS", raising=False)
    store = ArtifactStore(tmp_path / "store")
    src = package(tmp_path)
    first = wheelcache.wheel(str(src), "-DX=1", store, ("--no-build-isolation",))
    assert first.name.startswith("toywheel-1.0-") and first.suffix == ".whl"
    builds = []
    store.on_acquire = builds.append
    again = wheelcache.wheel(str(src), "-DX=1", store, ("--no-build-isolation",))
    assert again == first and builds[-1]["hit"] is True
    other = wheelcache.wheel(str(src), "-DX=2", store, ("--no-build-isolation",))   # other flags: another entry
    assert builds[-1]["hit"] is False and other.parent != first.parent
    monkeypatch.setenv("CMAKE_ARGS", "-DUSER=1")                                  # a user's own flags count too
    wheelcache.wheel(str(src), "-DX=1", store, ("--no-build-isolation",))
    assert builds[-1]["hit"] is False
    params = wheelcache.machine_params("-DX=1")
    assert params["isa_flags"] and params["python"].startswith("cpython3") and params["compiler"]


def test_a_tampered_wheel_is_refused_and_a_failed_build_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv("CMAKE_ARGS", raising=False)
    store = ArtifactStore(tmp_path / "store")
    built = wheelcache.wheel(str(package(tmp_path)), "", store, ("--no-build-isolation",))
    built.write_bytes(built.read_bytes() + b"x")
    with pytest.raises(ArtifactError, match="toywheel"):
        wheelcache.wheel(str(package(tmp_path)), "", ArtifactStore(tmp_path / "store"), ("--no-build-isolation",))
    with pytest.raises(ArtifactError, match=r"pip wheel .*missing.* failed"):
        wheelcache.wheel(str(tmp_path / "missing"), "", store, ("--no-build-isolation", "--no-index"))


def test_the_command_prints_the_wheel_path(tmp_path):
    env = {"GATEHOUSE_CACHE": str(tmp_path / "store"), "PATH": "/usr/bin:/bin", "PIP_NO_BUILD_ISOLATION": "0"}
    out = subprocess.run([sys.executable, "-m", "harness.wheelcache", str(package(tmp_path))], capture_output=True,
                         text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith(".whl") and str(tmp_path / "store") in out.stdout
    bad = subprocess.run([sys.executable, "-m", "harness.wheelcache"], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "usage" in bad.stderr
