"""The native engine against the PyTorch reference and the validator, with a small untrained model;
and its refusals of bad input (NaN samples, bad flags) through the real capture; an odd byte count is refused
by the capture before anything starts, and by the engine itself."""

import hashlib
import json
import re
import subprocess

import numpy as np
import pytest
import torch

from harness.errors import ArtifactError
from harness.streaming import engine
from harness.streaming import model as M
from harness.streaming.capture import Limits, run_stream
from harness.streaming.engine import FEEDER, build_engine, engine_command
from harness.streaming.profile import StreamProfile
from harness.streaming.protocol import ModelIdentity
from harness.streaming.tokens import TokenTable
from harness.streaming.validate import validate

pytestmark = pytest.mark.native
WORDS = ("alpha", "beta", "gamma", "delta", "stop")
LIMITS = Limits(ready_timeout_seconds=20, run_timeout_seconds=30, max_events=2000, kill_grace_seconds=0.5)


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    root = tmp_path_factory.mktemp("engine")
    build_engine(root / "build")
    torch.manual_seed(3)
    model = M.StreamModel(M.ModelConfig(vocab=len(WORDS) + 1, d_model=32, layers=2, heads=4, ffn=64)).eval()
    with torch.no_grad():
        model.head.bias[1:] += 3.0  # an untrained model that still emits words now and then
    sha = M.export(model, root / "weights.bin")
    table = TokenTable.from_words(WORDS)
    (root / "vocab.tsv").write_text(table.dump())
    return {"root": root, "binary": root / "build" / "gatehouse-stream", "feeder": root / "build" / FEEDER, "model": model, "table": table,
            "identity": ModelIdentity(sha, table.size, model.cfg.cache_bytes_per_token)}


def command(rig, profile):
    return engine_command(rig["binary"], rig["root"] / "weights.bin", rig["root"] / "vocab.tsv", profile)


@pytest.mark.parametrize("profile", [
    StreamProfile("rt240_b1", "realtime", 240, 1, 40, 4),
    StreamProfile("hf80_b4", "hf", 80, 4, 40, 4),
], ids=lambda p: p.name)
def test_engine_equals_reference_and_passes_the_validator(rig, profile, tmp_path):
    rng = np.random.default_rng(7)
    audio = (rng.normal(0, 0.05, 16000 * 2 + 517)).astype(np.float32)
    capture = run_stream(command(rig, profile), audio.astype("<f4").tobytes(), tmp_path / "ev", LIMITS, feeder=rig["feeder"])
    assert capture.failure is None, capture.failure
    verdict = validate(list(capture.events), profile, samples=len(audio), model=rig["identity"], table=rig["table"],
                       require_trim=True)
    assert verdict.passed, verdict.render()
    ref = M.reference_decode(rig["model"], audio, profile)
    ids = [e["token_id"] for e in capture.events if e["kind"] == "window"]
    assert ids == ref["ids"]
    assert capture.events[0]["model_sha256"] == hashlib.sha256((rig["root"] / "weights.bin").read_bytes()).hexdigest()


PROFILE = StreamProfile("rt80_b1", "realtime", 80, 1, 40, 4)


def test_odd_byte_count_is_refused(rig, tmp_path):
    """Refused twice: by the capture before the feeder or the engine starts (``run_stream``), and by the engine
    itself when odd bytes reach its stdin some other way."""
    odd = b"\0" * (4 * 3000 + 3)
    with pytest.raises(ArtifactError, match=r"^odd\.f32: partial F32 sample: 12003 bytes is not a whole number"):
        run_stream(command(rig, PROFILE), odd, tmp_path / "ev", LIMITS, feeder=rig["feeder"], source="odd.f32")
    assert not (tmp_path / "ev").exists()
    done = subprocess.run(command(rig, PROFILE), input=odd, capture_output=True, timeout=60)
    assert done.returncode == 2
    assert "odd byte count" in done.stderr.decode()
    assert any(json.loads(line).get("reason", "").startswith("odd byte count on stdin")
               for line in done.stdout.decode().splitlines())


def test_nan_sample_is_refused(rig, tmp_path):
    audio = np.zeros(8000, np.float32)
    audio[4321] = np.nan
    capture = run_stream(command(rig, PROFILE), audio.astype("<f4").tobytes(), tmp_path / "ev", LIMITS, feeder=rig["feeder"])
    assert capture.returncode == 2
    assert "non-finite sample (NaN) at sample index 4321" in capture.failure
    assert capture.group_left == () and (tmp_path / "ev" / "events.jsonl").exists()


def test_bad_flags_and_bad_model_are_refused(rig, tmp_path):
    bad = command(rig, PROFILE)
    bad[bad.index("--batch") + 1] = "3"
    capture = run_stream(bad, b"\0" * 4000, tmp_path / "a", LIMITS, feeder=rig["feeder"])
    assert "--batch must be 1, 2 or 4" in capture.failure
    broken = rig["root"] / "broken.bin"
    broken.write_bytes((rig["root"] / "weights.bin").read_bytes()[:-100])
    capture = run_stream([str(rig["binary"]), "--model", str(broken), "--vocab", str(rig["root"] / "vocab.tsv"),
                          *PROFILE.engine_args()], b"\0" * 4000, tmp_path / "b", LIMITS, feeder=rig["feeder"])
    assert "truncated" in capture.failure


def test_the_artifact_key_covers_every_shared_header_the_programs_include():
    """A header the engine or the feeder includes from native/common/ but the key leaves out would let an
    edit to it reuse a stale build."""
    included = set()
    for src in (engine.SOURCE_DIR / "engine.cpp", engine.SOURCE_DIR / "feeder.cpp"):
        included |= {engine.INCLUDE_DIR / h for h in re.findall(r'#include "(common/[^"]+)"', src.read_text())}
    assert included and all(h.is_file() for h in included)
    assert included <= set(engine.SOURCES)
