"""Artifact builders for the streaming gate: a trained, exported model and a synthesized input case."""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from harness.errors import ArtifactError
from harness.streaming import model as M
from harness.streaming import speech, train
from harness.streaming.suite import CaseSpec
from harness.streaming.tokens import TokenTable

HERE = Path(__file__).resolve().parent
MODEL_SOURCES = [HERE / "speech.py", HERE / "model.py", HERE / "train.py", HERE / "builders.py"]
CASE_SOURCES = [HERE / "speech.py", HERE / "train.py", HERE / "builders.py"]
MODEL_KINDS = {"ci": (train.CI_PLAN, speech.CI_TRAIN_VOICES), "benchmark": (train.BENCHMARK_PLAN, speech.TRAIN_VOICES)}
DEV_VOICE = speech.CI_TRAIN_VOICES[0]  # a voice both models trained on


def espeak_version() -> str:
    out = subprocess.run([speech.espeak_path(), "--version"], capture_output=True, text=True, timeout=30)
    return out.stdout.strip()


def model_params(kind: str) -> dict:
    if kind not in MODEL_KINDS:
        raise ArtifactError(f"streaming model kind {kind!r} is not one of {sorted(MODEL_KINDS)}")
    plan, voices = MODEL_KINDS[kind]
    return {"kind": kind, "plan": asdict(plan), "voices": [v.key for v in voices], "words": list(speech.WORDS),
            "espeak": espeak_version()}


def build_model(outdir: Path, kind: str, log=print) -> dict:
    """Synthesize the word bank, train, and write model.pt, weights.bin, vocab.tsv and training.json."""
    plan, voices = MODEL_KINDS[kind]
    t0 = time.monotonic()
    bank = speech.word_bank(voices)
    synth = time.monotonic() - t0
    model, info = train.train(bank, voices, plan, log=log)
    outdir = Path(outdir)
    M.save(model, outdir / "model.pt")
    sha = M.export(model, outdir / "weights.bin")
    (outdir / "vocab.tsv").write_text(TokenTable.from_words(speech.WORDS).dump(), encoding="utf-8")
    record = {**info, "kind": kind, "weights_sha256": sha, "synthesis_seconds": synth,
              "cache_bytes_per_token": model.cfg.cache_bytes_per_token, "plan": asdict(plan)}
    (outdir / "training.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return {"steps": info["steps"], "train_seconds": round(info["train_seconds"], 3), "final_loss": info["final_loss"]}


@dataclass(frozen=True)
class Case:
    """A synthesized input on disk: raw mono 16 kHz float32 little-endian, its text and its role."""

    name: str
    role: str
    pcm: Path
    samples: int
    sha256: str
    reference: str
    must_trim: bool

    def audio(self) -> np.ndarray:
        data = self.pcm.read_bytes()
        if len(data) % 4:
            raise ArtifactError(f"{self.pcm}: {len(data)} bytes is not a whole number of float32 samples")
        return np.frombuffer(data, dtype="<f4").copy()


def synthesize_case(spec: CaseSpec) -> tuple[np.ndarray, str]:
    rng = np.random.default_rng(spec.seed)
    if spec.role == "heldout":
        bank = speech.word_bank(speech.HELDOUT_VOICES)
        parts = train.heldout_set(bank, speech.HELDOUT_VOICES, spec.utterances, spec.seed)
        return np.concatenate([u.audio for u in parts]), " ".join(u.text for u in parts)
    bank = speech.word_bank([DEV_VOICE])
    u = speech.utterance(rng, bank, DEV_VOICE.key, spec.words, lead=spec.lead_seconds, gap=(0.05, 0.25), tail=0.2)
    audio, text = u.audio, u.text
    if spec.end_remainder_samples is not None:
        cut = (len(audio) // 1280) * 1280 + spec.end_remainder_samples
        audio = audio[:cut] if cut <= len(audio) else np.concatenate([audio, np.zeros(cut - len(audio), np.float32)])
    return audio, text


def build_case(outdir: Path, spec: CaseSpec) -> dict:
    audio, text = synthesize_case(spec)
    data = audio.astype("<f4").tobytes()
    outdir = Path(outdir)
    (outdir / "case.f32").write_bytes(data)
    (outdir / "case.json").write_text(json.dumps({
        "name": spec.name, "role": spec.role, "samples": len(audio), "seconds": len(audio) / 16000,
        "sha256": hashlib.sha256(data).hexdigest(), "reference": text, "must_trim": spec.must_trim,
        "format": "mono_16000_f32le"}, indent=2, sort_keys=True) + "\n")
    return {"samples": len(audio)}


def load_case(directory: Path) -> Case:
    meta = json.loads((Path(directory) / "case.json").read_text())
    pcm = Path(directory) / "case.f32"
    data = pcm.read_bytes()
    if hashlib.sha256(data).hexdigest() != meta["sha256"] or len(data) != 4 * meta["samples"]:
        raise ArtifactError(f"{pcm}: contents differ from case.json (sha256 {meta['sha256']}, {meta['samples']} samples)")
    return Case(meta["name"], meta["role"], pcm, meta["samples"], meta["sha256"], meta["reference"], meta["must_trim"])
