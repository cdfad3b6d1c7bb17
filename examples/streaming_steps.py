"""How the benchmark streaming model's WER depends on its training steps (docs/measurements.md, 2026-12-06).

Usage: .venv/bin/python examples/streaming_steps.py STEPS   (0 and an artifact folder: score a built model)"""
import json, sys, time
from dataclasses import replace
from pathlib import Path
import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness.streaming import builders, speech, suite, train
from harness.streaming import model as M

steps = int(sys.argv[1])
s = suite.load()
tier = s.tiers["benchmark"]
plan, voices = builders.MODEL_KINDS["benchmark"]
if steps:
    plan = replace(plan, steps=steps, seconds_cap=10_000)
    t0 = time.monotonic()
    bank = speech.word_bank(voices)
    model, info = train.train(bank, voices, plan, log=lambda *a: None)
else:
    model = M.load(Path(sys.argv[2]) / "model.pt")
    info = json.loads((Path(sys.argv[2]) / "training.json").read_text())
out = {"steps": info["steps"], "train_seconds": round(info["train_seconds"], 1), "final_loss": info["final_loss"]}
cases = []
for name in tier.cases:
    spec = s.cases[name]
    audio, text = builders.synthesize_case(spec)
    cases.append((name, None, audio, text))
held_bank = speech.word_bank(speech.HELDOUT_VOICES)
held = train.heldout_set(held_bank, speech.HELDOUT_VOICES, 48, 77)
dev_bank = speech.word_bank([builders.DEV_VOICE])
rng = np.random.default_rng(5)
dev = [speech.utterance(rng, dev_bank, builders.DEV_VOICE.key, int(rng.integers(3, 19)), lead=0.3, gap=(0.05, 0.25), tail=0.2) for _ in range(48)]
from harness.streaming.metrics import word_error_rate
for pname in tier.profiles:
    prof = s.profiles[pname]
    pairs = [(text, train.decode_text(M.reference_decode(model, audio, prof)["ids"])) for _, _, audio, text in cases]
    out[f"{pname}.suite_cases_wer"] = word_error_rate(pairs)[0]
    out[f"{pname}.heldout48"] = train.score(model, held, prof)["wer"]
    out[f"{pname}.dev48"] = train.score(model, dev, prof)["wer"]
print(json.dumps(out))
