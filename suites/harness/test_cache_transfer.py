"""Cache archives (harness/cachepack): real store entries exported, tampered with, imported, on real files."""

import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from harness import cachepack
from harness.artifacts import ArtifactStore
from harness.cachepack import entries, writer
from harness.errors import ArtifactError
from harness.hashing import sha256_bytes

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [Path(__file__)]
SPECS = {"toy": ({"corpus": "a"}, {"dtype": "q4"}), "other": ({"corpus": "b"}, {"dtype": "fp32"})}


def _builder(tag: str):
    def build(out, progress):
        (out / "onnx").mkdir()
        (out / "onnx" / "model.onnx").write_bytes(tag.encode() * 4096)
        (out / "config.json").write_text(json.dumps({"tag": tag}))
    return build


def _never(out, progress):
    raise AssertionError("the imported cache was not hit: the builder ran")


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A store with two real entries (``toy`` and ``other``); returns (root, {kind: artifact})."""
    monkeypatch.setenv("GATEHOUSE_LOCK_DIR", str(tmp_path / "locks"))
    s = ArtifactStore(tmp_path / "a")
    arts = {kind: s.get_or_build(kind, inputs, params, SOURCES, _builder(kind)) for kind, (inputs, params) in SPECS.items()}
    return s.root, arts


def _flip_byte(archive: Path, member: str) -> None:
    with tarfile.open(archive) as tar:
        offset = tar.getmember(member).offset_data
    with open(archive, "r+b") as f:
        f.seek(offset + 7)
        byte = f.read(1)
        f.seek(offset + 7)
        f.write(bytes([byte[0] ^ 0x01]))


def _leftovers(root: Path) -> list[str]:
    return [p.name for p in root.iterdir() if p.name.startswith(".import-")]


def test_a_store_started_from_an_imported_archive_builds_nothing(store, tmp_path):
    root, arts = store
    done = cachepack.export(root, tmp_path / "cache.tar")
    assert sorted(e.name for e in done.entries) == sorted(a.path.name for a in arts.values()) and not done.skipped
    mask = os.umask(0o022)
    os.umask(mask)
    assert done.path.stat().st_mode & 0o777 == 0o666 & ~mask    # shareable, not mkstemp's 0600
    got = cachepack.import_(tmp_path / "cache.tar", tmp_path / "shard")
    assert sorted(got.imported) == sorted(a.path.name for a in arts.values()) and not got.refused
    shard = ArtifactStore(tmp_path / "shard")
    for kind, (inputs, params) in SPECS.items():
        art = shard.get_or_build(kind, inputs, params, SOURCES, _never)
        assert art.hit and art.key == arts[kind].key and art.path.name == arts[kind].path.name
        assert art.file("onnx/model.onnx").read_bytes() == arts[kind].file("onnx/model.onnx").read_bytes()
    assert _leftovers(tmp_path / "shard") == []


def test_an_entry_whose_kind_holds_hyphens_travels_too(tmp_path, monkeypatch):
    """The store takes any kind (a suite test's evaluation is ``content-key-test``); the archive once recognised
    only ``[A-Za-z0-9_]`` kinds, so exporting a shard's keys failed on such an entry ("no entry has that key")."""
    monkeypatch.setenv("GATEHOUSE_LOCK_DIR", str(tmp_path / "locks"))
    art = ArtifactStore(tmp_path / "a").get_or_build("content-key-test", {"corpus": "c"}, {}, SOURCES,
                                                    _builder("content-key-test"))
    done = cachepack.export(tmp_path / "a", tmp_path / "cache.tar", keys=[art.key])
    assert [e.name for e in done.entries] == [art.path.name] and [e.kind for e in done.entries] == ["content-key-test"]
    assert cachepack.import_(tmp_path / "cache.tar", tmp_path / "b").imported == [art.path.name]
    again = ArtifactStore(tmp_path / "b").get_or_build("content-key-test", {"corpus": "c"}, {}, SOURCES, _never)
    assert again.hit and again.key == art.key


def test_a_tampered_entry_is_refused_by_name_and_the_others_import(store, tmp_path):
    root, arts = store
    archive = tmp_path / "cache.tar"
    cachepack.export(root, archive)
    toy, other = arts["toy"].path.name, arts["other"].path.name
    _flip_byte(archive, f"entries/{toy}/onnx/model.onnx")
    got = cachepack.import_(archive, tmp_path / "shard")
    assert got.imported == [other] and [name for name, _ in got.refused] == [toy]
    why = got.refused[0][1]
    pinned = arts["toy"].manifest["files"]["onnx/model.onnx"]["sha256"]
    assert "onnx/model.onnx" in why and f"differs from the archive manifest's {pinned}" in why, why
    assert not (tmp_path / "shard" / toy).exists() and _leftovers(tmp_path / "shard") == []


def test_a_tampered_artifact_json_and_a_relabelled_entry_are_refused(store, tmp_path):
    root, arts = store
    archive = tmp_path / "cache.tar"
    cachepack.export(root, archive, kinds=["toy"])
    toy = arts["toy"].path.name
    _flip_byte(archive, f"entries/{toy}/artifact.json")
    got = cachepack.import_(archive, tmp_path / "shard")
    assert got.refused[0][0] == toy and "artifact.json: SHA-256" in got.refused[0][1]
    # a foreign entry: a copy of toy under another key, its manifest rewritten to match (the key is no longer
    # the content address of its inputs); export skips it, and an archive carrying it is refused by its name
    fake_key = "f" * 64
    fake = root / f"toy-{fake_key[:20]}"
    shutil.copytree(arts["toy"].path, fake)
    (fake / "artifact.json").write_text(json.dumps({**arts["toy"].manifest, "key": fake_key}))
    assert any(n == fake.name and "foreign entry" in why for n, why in writer.select(root).skipped)
    raw = (fake / "artifact.json").read_bytes()
    e = entries.Entry(fake.name, "toy", fake_key, sha256_bytes(raw), len(raw), arts["toy"].manifest["files"])
    cachepack.write_archive(archive, writer.header(root, [e]), writer.members(root, [e]))
    got = cachepack.import_(archive, tmp_path / "shard2")
    assert got.refused[0][0] == fake.name and "foreign entry" in got.refused[0][1] and not got.imported


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _info(name: str, data: bytes = b"", type_=tarfile.REGTYPE, link: str = "") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = type_, link, len(data) if type_ == tarfile.REGTYPE else 0
    return info, data


def test_a_foreign_archive_is_refused_by_its_path(tmp_path):
    shard = tmp_path / "shard"
    plain = _tar(tmp_path / "plain.tar", [_info("notes.txt", b"hello")])
    with pytest.raises(ArtifactError, match=f"{plain}: not a Gatehouse cache archive .*'notes.txt'"):
        cachepack.import_(plain, shard)
    junk = tmp_path / "junk.tar"
    junk.write_bytes(os.urandom(4096))
    with pytest.raises(ArtifactError, match=f"{junk}: not a Gatehouse cache archive"):
        cachepack.import_(junk, shard)
    future = _tar(tmp_path / "v2.tar", [_info("gatehouse-cache.json", json.dumps(
        {"format": "gatehouse-cache", "version": 2, "entries": []}).encode())])
    with pytest.raises(ArtifactError, match=f"{future}: gatehouse-cache.json version 2"):
        cachepack.import_(future, shard)
    assert not shard.exists() or list(shard.iterdir()) == []


def test_paths_outside_the_store_and_links_are_refused_by_member(store, tmp_path):
    root, arts = store
    good = tmp_path / "good.tar"
    cachepack.export(root, good)
    toy, other = arts["toy"].path.name, arts["other"].path.name
    members = []
    with tarfile.open(good) as tar:
        for m in tar.getmembers():
            if m.name == f"entries/{toy}/config.json":   # toy's config.json becomes a link
                members.append(_info(m.name, type_=tarfile.SYMTYPE, link="/etc/passwd"))
            else:
                members.append((m, tar.extractfile(m).read()))
            if m.name == "gatehouse-cache.json":
                members += [_info("../evil", b"x"), _info("/tmp/evil-abs", b"x"),
                            _info(f"entries/{other}/../../evil2", b"x")]
    evil = _tar(tmp_path / "evil.tar", members)
    got = cachepack.import_(evil, tmp_path / "shard")
    refused = dict(got.refused)
    assert "'..'" in refused["../evil"] and "absolute" in refused["/tmp/evil-abs"]
    assert "symbolic link" in refused[toy] and "/etc/passwd" in refused[toy]
    assert "evil2" in refused[other] and "'..'" in refused[other]   # the entry the bad member claims is refused
    assert got.imported == [] and not (tmp_path / "evil").exists() and not (tmp_path / "evil2").exists()
    assert not Path("/tmp/evil-abs").exists() and _leftovers(tmp_path / "shard") == []


def test_importing_twice_finds_everything_present_and_never_overwrites(store, tmp_path):
    root, arts = store
    archive = tmp_path / "cache.tar"
    cachepack.export(root, archive)
    shard = tmp_path / "shard"
    assert len(cachepack.import_(archive, shard).imported) == 2
    again = cachepack.import_(archive, shard)
    assert sorted(again.present) == sorted(a.path.name for a in arts.values()) and not again.imported
    assert not again.refused
    toy = shard / arts["toy"].path.name / "onnx" / "model.onnx"
    toy.write_bytes(b"changed on this machine")
    third = cachepack.import_(archive, shard)
    assert [n for n, _ in third.refused] == [arts["toy"].path.name] and "never overwritten" in third.refused[0][1]
    assert toy.read_bytes() == b"changed on this machine"   # the evidence stays


def test_a_crash_while_exporting_leaves_no_archive(store, tmp_path):
    root, arts = store
    dest = tmp_path / "out" / "cache.tar"

    def crashing():
        yield from list(writer.members(root, [entries.verify(arts["toy"].path)]))[:2]
        raise RuntimeError("disk pulled")

    with pytest.raises(RuntimeError, match="disk pulled"):
        cachepack.write_archive(dest, {"format": "gatehouse-cache"}, crashing())
    assert list(dest.parent.iterdir()) == []
    cachepack.export(root, dest)
    before = dest.read_bytes()
    with pytest.raises(RuntimeError):
        cachepack.write_archive(dest, {"format": "gatehouse-cache"}, crashing())
    assert dest.read_bytes() == before and [p.name for p in dest.parent.iterdir()] == ["cache.tar"]


def test_selection_by_kind_and_key_and_what_is_skipped(store, tmp_path):
    root, arts = store
    toy, other = arts["toy"], arts["other"]
    assert [e.name for e in writer.select(root, kinds=["toy"]).entries] == [toy.path.name]
    assert [e.name for e in writer.select(root, keys=[other.key[:12]]).entries] == [other.path.name]
    assert [e.name for e in writer.select(root, keys=[toy.path.name]).entries] == [toy.path.name]
    with pytest.raises(ArtifactError, match="--kind nope: no entry of that kind .*other, toy"):
        writer.select(root, kinds=["nope"])
    with pytest.raises(ArtifactError, match="--key 0123abcd"):
        writer.select(root, keys=["0123abcd"])
    (root / f".tmp-toy-{'1' * 20}-999").mkdir()            # a build in progress
    (root / f"toy-{'2' * 20}").mkdir()                      # no artifact.json
    skipped = dict(writer.select(root).skipped)
    assert "build in progress" in skipped[f".tmp-toy-{'1' * 20}-999"] and "artifact.json" in skipped[f"toy-{'2' * 20}"]


def test_a_truncated_or_compressed_archive(store, tmp_path):
    root, _ = store
    archive = tmp_path / "cache.tar"
    cachepack.export(root, archive)
    gz = tmp_path / "cache.tar.gz"
    gz.write_bytes(gzip.compress(archive.read_bytes(), compresslevel=1))
    assert len(cachepack.import_(gz, tmp_path / "from-gz").imported) == 2
    with tarfile.open(archive) as tar:
        last = tar.getmembers()[-1]
    with open(archive, "r+b") as f:
        f.truncate(last.offset_data + 100)
    got = cachepack.import_(archive, tmp_path / "shard")
    assert len(got.imported) == 1 and {n for n, _ in got.refused} == {str(archive), last.name.split("/")[1]}
    assert _leftovers(tmp_path / "shard") == []


def _cli(*args, env):
    return subprocess.run([sys.executable, "-m", "harness.cachepack", *map(str, args)], check=False, cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_command_exit_codes_and_refusals(store, tmp_path):
    root, arts = store
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GATEHOUSE_CACHE": str(root)}
    archive, shard = tmp_path / "cache.tar", tmp_path / "shard"
    out = _cli("export", archive, "--kind", "toy", "--kind", "other", env=env)
    assert out.returncode == 0 and "2 entries" in out.stdout, out.stderr
    digest = out.stdout.split("sha256 ")[1].split()[0]
    bad = _cli("import", archive, "--root", shard, "--expect-sha256", "0" * 64, env=env)
    assert bad.returncode == 2 and f"{archive}: SHA-256 {digest} differs" in bad.stderr
    _flip_byte(archive, f"entries/{arts['other'].path.name}/config.json")
    got = _cli("import", archive, "--root", shard, env=env)
    assert got.returncode == 2 and "imported 1" in got.stdout and "refused 1" in got.stdout
    assert f"refused {arts['other'].path.name}: config.json: SHA-256" in got.stdout
    assert got.stderr.startswith("bin/gatehouse cache import: 1 refused (first: other-")
    listed = _cli("list", "--root", shard, env=env)
    assert listed.returncode == 0 and f"{arts['toy'].key}" in listed.stdout and " ok" in listed.stdout
    foreign = _cli("import", tmp_path / "nothing.tar", "--root", shard, env=env)
    assert foreign.returncode == 2 and f"{tmp_path / 'nothing.tar'}: no such archive file" in foreign.stderr
    assert _cli("export", env=env).returncode == 2 and _cli("export", archive, "--kind", "x", env=env).returncode == 2
    (shard / arts["toy"].path.name / "config.json").write_text("{}")
    failing = _cli("list", "--root", shard, env=env)
    assert failing.returncode == 1 and "fails" in failing.stdout and "config.json" in failing.stdout
