"""Training data: band-limited resampling, exact frame-domain features, and word labels at end slot + delay."""

import shutil

import numpy as np
import pytest
import torch

from harness.streaming import speech, train
from harness.streaming.model import ModelConfig, StreamModel


def test_resample_keeps_duration_and_a_tone():
    t = np.arange(22050) / 22050
    y = speech.resample(np.sin(2 * np.pi * 440 * t).astype(np.float32), 22050)
    assert len(y) == 16000
    spectrum = np.abs(np.fft.rfft(y))
    assert abs(np.argmax(spectrum) - 440) <= 1


def test_clip_power_equals_the_frontend_on_the_placed_clip():
    model = StreamModel(ModelConfig(vocab=3, d_model=16, heads=2, ffn=16))
    clip = np.random.default_rng(0).normal(0, 0.1, 1000).astype(np.float32)
    powers = train.clip_power(model.frontend, clip)
    for off, p in zip(train.OFFSETS, powers):
        x = np.zeros(len(p) * 320, np.float32)
        x[off:off + len(clip)] = clip
        fe = model.frontend
        with torch.no_grad():
            logmel = (torch.log(p + 1e-6) - fe.mean) * fe.inv_std
            direct = fe(torch.from_numpy(x).view(-1, 320))
        assert torch.allclose(logmel, direct, atol=1e-4)


def test_labels_sit_at_the_word_end_slot_plus_delay():
    cfg = ModelConfig(vocab=3, d_model=16, heads=2, ffn=16)
    # Two "words" of 9 and 3 frames of constant power; lengths in samples are known.
    power = {"v": [([torch.ones(9, 40)] * 4, 9 * 320 - 100), ([torch.ones(3, 40)] * 4, 3 * 320 - 10)]}
    voices = [type("V", (), {"key": "v"})()]
    rng = np.random.default_rng(5)
    for delay in (1, 6):
        feats, targets = train.sample_stream(rng, power, voices, delay, cfg)
        words = np.nonzero(targets)[0]
        assert len(words) >= 2 and feats.shape == (len(targets), 4, 40)
        assert (targets[:cfg.left_pad_tokens + delay] == 0).all()
        assert len(targets) >= words[-1] + 1 + cfg.eof_drain_tokens - 1


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
def test_espeak_word_bank_and_aligned_utterance():
    bank = speech.word_bank([speech.CI_TRAIN_VOICES[0]], words=("one", "stop"))
    clips = bank[speech.CI_TRAIN_VOICES[0].key]
    assert len(clips) == 2 and all(0.1 < len(c) / 16000 < 1.5 for c in clips)
    u = speech.utterance(np.random.default_rng(1), bank, speech.CI_TRAIN_VOICES[0].key, 4, lead=0.5)
    assert list(u.ends) == sorted(u.ends) and u.ends[-1] <= len(u.audio)
    assert u.ends[0] - len(clips[u.words[0]]) == 8000
