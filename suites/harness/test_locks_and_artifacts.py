"""The machine lock and the artifact store, across real processes."""

import multiprocessing as mp
import time

import pytest

from harness import locks
from harness.artifacts import ArtifactStore
from harness.errors import ArtifactError, HarnessError


def _hold_shared(lock_dir, ready, release):
    import os

    os.environ["GATEHOUSE_LOCK_DIR"] = lock_dir
    os.environ.pop(locks.HELD_ENV, None)  # act as an unrelated process, not as this test's child
    with locks.machine(exclusive=False):
        ready.set()
        release.wait(10)


def test_exclusive_waits_for_shared_holders_in_other_processes(tmp_path, monkeypatch):
    monkeypatch.setenv("GATEHOUSE_LOCK_DIR", str(tmp_path))
    ctx = mp.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    p = ctx.Process(target=_hold_shared, args=(str(tmp_path), ready, release))
    p.start()
    try:
        assert ready.wait(30)
        with pytest.raises(HarnessError, match="exclusive"):
            with locks.flock(tmp_path / "machine.lock", exclusive=True, timeout_s=0.3):
                pass
        with locks.flock(tmp_path / "machine.lock", exclusive=False, timeout_s=1):
            pass  # shared holders coexist
    finally:
        release.set()
        p.join(10)
    with locks.flock(tmp_path / "machine.lock", exclusive=True, timeout_s=5) as held:
        assert held.mode == "exclusive"


def test_reentry_in_one_process_does_not_deadlock(tmp_path, monkeypatch):
    monkeypatch.setenv("GATEHOUSE_LOCK_DIR", str(tmp_path))
    monkeypatch.delenv(locks.HELD_ENV, raising=False)
    with locks.machine(exclusive=True):
        with locks.machine(exclusive=False) as inner:
            assert inner.nested


def _build_once(root, counter):
    store = ArtifactStore(root)

    def build(out, progress):
        with open(counter, "a") as f:
            f.write("built\n")
        time.sleep(0.5)
        (out / "w.bin").write_bytes(b"x" * 1000)

    return store.get_or_build("toy", {"a": 1}, {"p": 2}, [__file__], build).key


def test_concurrent_builders_build_once(tmp_path):
    counter = tmp_path / "count.txt"
    with mp.get_context("spawn").Pool(2) as pool:
        keys = pool.starmap(_build_once, [(tmp_path / "store", counter)] * 2)
    assert keys[0] == keys[1]
    assert counter.read_text().count("built") == 1


def test_reuse_verifies_and_names_a_changed_file(tmp_path):
    store = ArtifactStore(tmp_path)
    art = store.get_or_build("toy", {}, {}, [__file__], lambda out, p: (out / "w.bin").write_bytes(b"abc"))
    assert not art.hit and store.get_or_build("toy", {}, {}, [__file__], None).hit
    (art.path / "w.bin").write_bytes(b"abd")
    with pytest.raises(ArtifactError, match="w.bin.*differs from its pin"):
        ArtifactStore(tmp_path).get_or_build("toy", {}, {}, [__file__], None)
    assert (art.path / "w.bin").exists()  # evidence is not deleted


def test_a_crashed_build_leaves_nothing(tmp_path):
    store = ArtifactStore(tmp_path)

    def crash(out, progress):
        (out / "half.bin").write_bytes(b"x")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        store.get_or_build("toy", {"k": 1}, {}, [__file__], crash)
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".") or p.name.startswith(".tmp")] == []


def _child_takes_the_machine_lock(lock_dir):
    import os

    os.environ["GATEHOUSE_LOCK_DIR"] = lock_dir
    with locks.machine(exclusive=False) as held:
        return held.nested


def test_a_child_of_a_holder_does_not_wait_for_the_turnstile(tmp_path, monkeypatch):
    """A test's subprocess runs as part of it; while a timing test waits, it must not deadlock."""
    monkeypatch.setenv("GATEHOUSE_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv(locks.HELD_ENV, "shared")  # what an outermost holder exports to its children
    with locks.flock(tmp_path / "machine.turnstile", exclusive=True):  # as a waiting timing test holds it
        with mp.get_context("spawn").Pool(1) as pool:
            assert pool.apply_async(_child_takes_the_machine_lock, (str(tmp_path),)).get(timeout=30)


def test_a_key_naming_a_machine_path_is_refused_by_kind_field_and_value(tmp_path):
    """A key holding a path of the checkout, the venv, the store or home changes with the clone's location: an
    exported cache would not travel and every fresh clone would rebuild (the CI donors did, keyed by the venv's
    copy of the domain text).  The store refuses it by name; a system path (the compiler) and content pass."""
    import sys

    from harness.fingerprint import REPO_ROOT

    store = ArtifactStore(tmp_path / "store")
    for value in (str(REPO_ROOT / "campaigns" / "default.toml"), f"{sys.prefix}/lib/site-packages/torch/x.py",
                  str(tmp_path / "store" / "hf-0"), str(REPO_ROOT)):
        with pytest.raises(ArtifactError,
                           match=r"artifact kind 'donor': key field inputs\.domain\.files\[0\]\.path = "):
            store.key("donor", {"domain": {"files": [{"file": "x", "path": value}]}}, {}, [])
    assert store.key("engine", {"files": [{"file": "x", "sha256": "a" * 64}]}, {"compiler": "/usr/bin/c++"}, [])
    # a sibling directory whose name merely starts like the checkout's is not under it
    assert store.key("x", {"p": str(REPO_ROOT) + "-other/file"}, {}, [])
