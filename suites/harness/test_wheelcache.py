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


def env_echo_package(tmp_path):
    """A package whose build records the CMAKE_ARGS it was given, so the test reads what the build saw."""
    src = tmp_path / "src-echo"
    (src / "echowheel").mkdir(parents=True)
    (src / "echowheel" / "__init__.py").write_text("")
    (src / "setup.py").write_text(
        "import os\nfrom setuptools import setup\n"
        "open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'echowheel', 'cmake_args.txt'), 'w')"
        ".write(os.environ.get('CMAKE_ARGS', ''))\n"
        "setup(name='echowheel', version='1.0', packages=['echowheel'], package_data={'echowheel': ['*.txt']})\n")
    return src


def test_a_project_include_reaches_the_build_and_is_keyed_by_content_not_path(tmp_path, monkeypatch):
    import zipfile

    monkeypatch.delenv("CMAKE_ARGS", raising=False)
    store = ArtifactStore(tmp_path / "store")
    builds = []
    store.on_acquire = builds.append
    src = env_echo_package(tmp_path)
    include = tmp_path / "a" / "no-common.cmake"
    include.parent.mkdir()
    include.write_text("set(LLAMA_BUILD_COMMON OFF)\n")
    built = wheelcache.wheel(str(src), "-DX=1", store, ("--no-build-isolation",),
                             project_includes=(("llama.cpp", include),))
    seen = zipfile.ZipFile(built).read("echowheel/cmake_args.txt").decode()
    assert seen == f"-DX=1 -DCMAKE_PROJECT_llama.cpp_INCLUDE={include.resolve()}", seen
    plain = wheelcache.wheel(str(src), "-DX=1", store, ("--no-build-isolation",))
    assert builds[-1]["hit"] is False and plain.parent != built.parent     # with and without: two entries
    moved = tmp_path / "b" / "no-common.cmake"                                # the same content elsewhere: reused
    moved.parent.mkdir()
    moved.write_text(include.read_text())
    assert wheelcache.wheel(str(src), "-DX=1", store, ("--no-build-isolation",),
                            project_includes=(("llama.cpp", moved),)) == built and builds[-1]["hit"] is True
    moved.write_text("set(LLAMA_BUILD_COMMON ON)\n")                          # other content: another entry
    wheelcache.wheel(str(src), "-DX=1", store, ("--no-build-isolation",), project_includes=(("llama.cpp", moved),))
    assert builds[-1]["hit"] is False
    other = tmp_path / "b" / "other.cmake"                                  # two projects' includes swapped: another entry
    other.write_text("set(X ON)\n")
    wheelcache.wheel(str(src), "-DX=1", store, ("--no-build-isolation",), project_includes=(("p", moved), ("q", other)))
    assert builds[-1]["hit"] is False
    wheelcache.wheel(str(src), "-DX=1", store, ("--no-build-isolation",), project_includes=(("p", other), ("q", moved)))
    assert builds[-1]["hit"] is False
    with pytest.raises(ArtifactError, match=r"missing\.cmake: the CMake project include for 'llama.cpp' is not a file"):
        wheelcache.wheel(str(src), "", store, project_includes=(("llama.cpp", tmp_path / "missing.cmake"),))


def test_the_command_line_takes_cmake_args_that_begin_with_a_dash_and_names_a_bad_include():
    assert wheelcache.parse_args(["pkg==1", "-DA=1 '-DB=2 3'", "--project-include", "llama.cpp=/x/y.cmake"]) == (
        "pkg==1", "-DA=1 '-DB=2 3'", (("llama.cpp", __import__("pathlib").Path("/x/y.cmake")),))
    assert wheelcache.parse_args(["pkg==1"]) == ("pkg==1", "", ())
    for bad, why in ((["pkg", "--project-include"], "needs PROJECT=FILE"),
                     (["pkg", "--project-include", "nofile"], "'nofile': expected PROJECT=FILE"),
                     ([], "got 0 arguments"), (["a", "b", "c"], "got 3 arguments")):
        with pytest.raises(ValueError, match=why):
            wheelcache.parse_args(bad)


def test_the_installed_llama_cpp_wheel_has_no_common_library():
    """The set-up's wheel is built without llama.cpp's common library (native/llama/no-common.cmake): libllama and
    ggml are installed, libllama-common (which the wheel put in site-packages/lib) is not."""
    pytest.importorskip("llama_cpp")
    from importlib import metadata

    names = [str(f) for f in metadata.files("llama_cpp_python") or ()]
    libs = sorted(n for n in names if ".so" in n)
    assert any("llama_cpp/lib/libllama.so" in n for n in libs) and any("libggml-base.so" in n for n in libs), libs
    assert not [n for n in names if "common" in n.lower()], f"llama.cpp's common library is in the wheel: {libs}"
