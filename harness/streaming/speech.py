"""Synthetic speech from espeak-ng: a bank of single-word clips per voice, joined into aligned utterances."""

from __future__ import annotations

import io
import shutil
import subprocess
import wave
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from harness.errors import ArtifactError

SAMPLE_RATE = 16_000
# A closed vocabulary of acoustically distinct command words; one token per word.
WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
         "turn", "on", "off", "the", "light", "kitchen", "door", "open", "close", "left",
         "right", "up", "down", "stop", "go", "yes", "no", "red", "green", "blue",
         "play", "music", "volume", "timer", "minute", "hour")


@dataclass(frozen=True)
class Voice:
    """One espeak-ng voice setting: ``voice`` (with an optional ``+variant``), words per minute, pitch 0-99."""

    voice: str
    speed: int
    pitch: int

    @property
    def key(self) -> str:
        return f"{self.voice}/s{self.speed}/p{self.pitch}"


def _voices(names, speeds, pitches):
    return tuple(Voice(v, s, p) for v in names for s in speeds for p in pitches)


TRAIN_VOICES = _voices(("en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-029", "en-us+f2", "en-gb+m2",
                        "en-us+m4", "en-gb-x-rp+f4"), (140, 185), (35, 65))
CI_TRAIN_VOICES = _voices(("en-us", "en-gb", "en-gb-x-rp+f4"), (150, 180), (50,))
# Held out: voice variants and a speed never used in training.
HELDOUT_VOICES = (Voice("en-us+m3", 165, 50), Voice("en-gb+f3", 165, 45), Voice("en-gb-x-rp+m1", 160, 55),
                  Voice("en-029+f1", 170, 50))


def espeak_path() -> str:
    path = shutil.which("espeak-ng")
    if path is None:
        raise ArtifactError("espeak-ng is not installed (Debian package espeak-ng); synthetic speech needs it")
    return path


def resample(x: np.ndarray, rate: int, target: int = SAMPLE_RATE) -> np.ndarray:
    """Band-limited resampling by truncating (or zero-padding) the spectrum."""
    if rate == target:
        return x.astype(np.float32)
    n = len(x)
    m = max(int(round(n * target / rate)), 1)
    spec = np.fft.rfft(x.astype(np.float64))
    out = np.zeros(m // 2 + 1, dtype=complex)
    k = min(len(out), len(spec))
    out[:k] = spec[:k]
    return (np.fft.irfft(out, m) * (m / n)).astype(np.float32)


def trim_silence(x: np.ndarray, threshold: float = 0.01, margin: int = 160) -> np.ndarray:
    loud = np.nonzero(np.abs(x) > threshold)[0]
    if len(loud) == 0:
        return x[:0]
    return x[max(loud[0] - margin, 0):loud[-1] + margin + 1]


def synthesize(text: str, voice: Voice) -> np.ndarray:
    """One espeak-ng call: mono float32 at 16 kHz."""
    cmd = [espeak_path(), "-v", voice.voice, "-s", str(voice.speed), "-p", str(voice.pitch), "--stdout", text]
    result = subprocess.run(cmd, capture_output=True, timeout=60)
    if result.returncode != 0 or not result.stdout:
        raise ArtifactError(f"espeak-ng {voice.key} {text!r} failed: {result.stderr.decode(errors='replace')}")
    with wave.open(io.BytesIO(result.stdout)) as w:
        rate, data = w.getframerate(), w.readframes(w.getnframes())
    x = np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0
    return resample(x, rate)


def word_bank(voices, words=WORDS, workers: int = 2) -> dict[str, list[np.ndarray]]:
    """``voice.key -> [clip per word]``, silence-trimmed."""
    jobs = [(v, w) for v in voices for w in words]
    with ThreadPoolExecutor(workers) as pool:
        clips = list(pool.map(lambda job: trim_silence(synthesize(job[1], job[0])), jobs))
    bank: dict[str, list[np.ndarray]] = {}
    for (v, _), clip in zip(jobs, clips):
        if len(clip) == 0:
            raise ArtifactError(f"espeak-ng produced silence for a word in voice {v.key}")
        bank.setdefault(v.key, []).append(clip)
    return bank


@dataclass(frozen=True)
class Utterance:
    """Audio with the words spoken and the sample at which each word ends."""

    audio: np.ndarray
    words: tuple[int, ...]  # indices into WORDS
    ends: tuple[int, ...]
    voice: str

    @property
    def text(self) -> str:
        return " ".join(WORDS[w] for w in self.words)


def utterance(rng: np.random.Generator, bank, voice_key: str, n_words: int, *, lead: float = 0.2,
              gap=(0.04, 0.3), tail: float = 0.25, gain=1.0, noise: float = 0.0) -> Utterance:
    """Concatenate ``n_words`` random word clips of one voice with random gaps; alignment is exact."""
    clips = bank[voice_key]
    words = rng.integers(0, len(clips), n_words)
    parts, ends, pos = [np.zeros(int(lead * SAMPLE_RATE), np.float32)], [], int(lead * SAMPLE_RATE)
    for n, w in enumerate(words):
        if n:
            g = np.zeros(int(rng.uniform(*gap) * SAMPLE_RATE), np.float32)
            parts.append(g)
            pos += len(g)
        parts.append(clips[w])
        pos += len(clips[w])
        ends.append(pos)
    parts.append(np.zeros(int(tail * SAMPLE_RATE), np.float32))
    audio = np.concatenate(parts) * gain
    if noise:
        audio = audio + rng.normal(0, noise, len(audio)).astype(np.float32)
    return Utterance(audio.astype(np.float32), tuple(int(w) for w in words), tuple(ends), voice_key)
