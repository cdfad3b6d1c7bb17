"""The causal streaming transformer, its log-mel front end, its weight export and the reference decode."""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from harness.errors import ArtifactError
from harness.streaming.profile import DELAYS_MS, FRAME_SAMPLES, FRAMES_PER_TOKEN, SAMPLE_RATE, TOKEN_PERIOD_MS
from harness.streaming.profile import StreamProfile
from harness.streaming.rolling import RollingState, roll

MAGIC = "GHSTRM01"
DELAY_TOKENS = tuple(d // TOKEN_PERIOD_MS for d in DELAYS_MS)  # conditioning index per supported delay


@dataclass(frozen=True)
class ModelConfig:
    """Sizes of the model.  ``left_pad_tokens`` and ``eof_drain_tokens`` are part of the stream it was trained on."""

    vocab: int
    d_model: int = 128
    layers: int = 2
    heads: int = 4
    ffn: int = 384
    n_mels: int = 40
    dilations: tuple[int, ...] = (1, 2, 4, 8)
    left_pad_tokens: int = 16
    eof_drain_tokens: int = 2

    @property
    def cache_bytes_per_token(self) -> int:
        return self.layers * 2 * self.d_model * 4


def mel_matrix(n_mels: int, n_fft: int = FRAME_SAMPLES, rate: int = SAMPLE_RATE) -> np.ndarray:
    """Triangular HTK-mel filters over the ``n_fft // 2 + 1`` DFT bins."""
    mel = lambda f: 2595 * np.log10(1 + f / 700)
    hz = lambda m: 700 * (10 ** (m / 2595) - 1)
    bins = np.linspace(0, rate / 2, n_fft // 2 + 1)
    edges = hz(np.linspace(mel(40), mel(rate / 2), n_mels + 2))
    out = np.zeros((n_fft // 2 + 1, n_mels), np.float32)
    for m in range(n_mels):
        lo, mid, hi = edges[m:m + 3]
        out[:, m] = np.clip(np.minimum((bins - lo) / (mid - lo), (hi - bins) / (hi - mid)), 0, None)
    return out


class Frontend(nn.Module):
    """20 ms frames -> Hann window -> DFT power (as matrix products) -> log mel -> standardized."""

    def __init__(self, n_mels: int):
        super().__init__()
        n = torch.arange(FRAME_SAMPLES, dtype=torch.float64)
        k = torch.arange(FRAME_SAMPLES // 2 + 1, dtype=torch.float64)
        window = 0.5 - 0.5 * torch.cos(2 * math.pi * n / FRAME_SAMPLES)
        angle = 2 * math.pi * n[:, None] * k[None, :] / FRAME_SAMPLES
        self.register_buffer("dft_cos", (window[:, None] * torch.cos(angle)).float())
        self.register_buffer("dft_sin", (window[:, None] * torch.sin(angle)).float())
        self.register_buffer("mel", torch.from_numpy(mel_matrix(n_mels)))
        self.register_buffer("mean", torch.zeros(n_mels))
        self.register_buffer("inv_std", torch.ones(n_mels))

    def forward(self, frames: torch.Tensor) -> torch.Tensor:  # [..., 320] -> [..., n_mels]
        re, im = frames @ self.dft_cos, frames @ self.dft_sin
        logmel = torch.log((re * re + im * im) @ self.mel + 1e-6)
        return (logmel - self.mean) * self.inv_std


class StreamModel(nn.Module):
    """Per 80 ms position: four frames' features through dilated causal convolutions, plus the previous
    token and the delay embedding, through causal ALiBi self-attention; one token out per position."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.frontend = Frontend(cfg.n_mels)
        self.in1 = nn.Linear(FRAMES_PER_TOKEN * cfg.n_mels, d)
        self.in2 = nn.Linear(d, d)
        self.convs = nn.ModuleList(nn.Linear(3 * d, d) for _ in cfg.dilations)
        self.tok = nn.Embedding(cfg.vocab, d)
        self.delay = nn.Embedding(len(DELAY_TOKENS), d)
        self.blocks = nn.ModuleList(Block(d, cfg.heads, cfg.ffn) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, cfg.vocab)
        slopes = [2 ** (-8 * (h + 1) / cfg.heads) for h in range(cfg.heads)]
        self.register_buffer("slopes", torch.tensor(slopes, dtype=torch.float32))

    def audio(self, frames: torch.Tensor) -> torch.Tensor:
        """[B, T, 4, 320] samples -> [B, T, d] before the convolutions."""
        return self.embed(self.frontend(frames))

    def embed(self, feats: torch.Tensor) -> torch.Tensor:
        """[..., 4, n_mels] standardized features -> [..., d]."""
        return self.in2(F.gelu(self.in1(feats.flatten(-2))))

    def forward(self, frames, prev, delay_index):
        """Teacher-forced pass over whole sequences: [B,T,4,320], [B,T], [B] -> [B,T,vocab]."""
        return self.forward_features(self.frontend(frames), prev, delay_index)

    def forward_features(self, feats, prev, delay_index):
        """The same from standardized features [B,T,4,n_mels] (training precomputes them)."""
        x = self.embed(feats)
        for conv, dil in zip(self.convs, self.cfg.dilations):
            pad = F.pad(x, (0, 0, 2 * dil, 0))
            t = x.shape[1]
            x = x + F.gelu(conv(torch.cat([pad[:, :t], pad[:, dil:dil + t], pad[:, 2 * dil:2 * dil + t]], -1)))
        h = x + self.tok(prev) + self.delay(delay_index)[:, None]
        t = h.shape[1]
        pos = torch.arange(t)
        dist = (pos[:, None] - pos[None, :]).float()
        bias = -self.slopes[:, None, None] * dist
        bias = bias.masked_fill(dist < 0, float("-inf"))
        for block in self.blocks:
            h = block(h, bias)
        return self.head(self.ln_f(h))


class Block(nn.Module):
    def __init__(self, d, heads, ffn):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ff1, self.ff2 = nn.Linear(d, ffn), nn.Linear(ffn, d)

    def forward(self, h, bias):
        b, t, d = h.shape
        q, k, v = self.qkv(self.ln1(h)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias[None])
        h = h + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return h + self.ff2(F.gelu(self.ff1(self.ln2(h))))


def delay_index(delay_tokens: int) -> int:
    if delay_tokens not in DELAY_TOKENS:
        raise ArtifactError(f"delay of {delay_tokens} tokens is not one the model is conditioned on {DELAY_TOKENS}")
    return DELAY_TOKENS.index(delay_tokens)


# ---- export -------------------------------------------------------------------------------------------

def tensors(model: StreamModel) -> list[tuple[str, torch.Tensor]]:
    """The weights in the engine's order, each as the engine indexes it (Linear weights as [out, in])."""
    m, out = model, []
    fe = m.frontend
    out += [("dft_cos", fe.dft_cos), ("dft_sin", fe.dft_sin), ("mel", fe.mel), ("mean", fe.mean),
            ("inv_std", fe.inv_std)]
    for name in ("in1", "in2"):
        out += [(f"{name}.w", getattr(m, name).weight), (f"{name}.b", getattr(m, name).bias)]
    for i, c in enumerate(m.convs):
        out += [(f"conv{i}.w", c.weight), (f"conv{i}.b", c.bias)]
    out += [("tok", m.tok.weight), ("delay", m.delay.weight), ("slopes", m.slopes)]
    for i, b in enumerate(m.blocks):
        for name in ("ln1", "ln2"):
            ln = getattr(b, name)
            out += [(f"b{i}.{name}.g", ln.weight), (f"b{i}.{name}.b", ln.bias)]
        for name in ("qkv", "proj", "ff1", "ff2"):
            lin = getattr(b, name)
            out += [(f"b{i}.{name}.w", lin.weight), (f"b{i}.{name}.b", lin.bias)]
    out += [("ln_f.g", m.ln_f.weight), ("ln_f.b", m.ln_f.bias), ("head.w", m.head.weight), ("head.b", m.head.bias)]
    return out


def export(model: StreamModel, path: Path) -> str:
    """Write the engine's weight file (text header, then float32 little-endian) and return its SHA-256."""
    cfg = model.cfg
    header = [MAGIC]
    for key in ("vocab", "d_model", "layers", "heads", "ffn", "n_mels", "left_pad_tokens", "eof_drain_tokens"):
        header.append(f"{key} {getattr(cfg, key)}")
    header.append("dilations " + " ".join(str(d) for d in cfg.dilations))
    header.append("delays " + " ".join(str(d) for d in DELAY_TOKENS))
    blobs = []
    for name, t in tensors(model):
        a = t.detach().float().contiguous().numpy().astype("<f4")
        header.append(f"tensor {name} {a.size}")
        blobs.append(a.tobytes())
    header.append("end")
    data = ("\n".join(header) + "\n").encode() + b"".join(blobs)
    Path(path).write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def save(model: StreamModel, path: Path) -> None:
    torch.save({"config": asdict(model.cfg), "state": model.state_dict()}, path)


def load(path: Path) -> StreamModel:
    blob = torch.load(path, map_location="cpu", weights_only=True)
    cfg = blob["config"]
    cfg["dilations"] = tuple(cfg["dilations"])
    model = StreamModel(ModelConfig(**cfg))
    model.load_state_dict(blob["state"])
    return model.eval()


# ---- the reference streaming decode -----------------------------------------------------------------

class _Stream:
    """One decode's state: conv histories and the rolling KV cache, trimmed exactly as the engine trims."""

    def __init__(self, model: StreamModel, profile: StreamProfile):
        self.m, self.p, cfg = model, profile, model.cfg
        d = cfg.d_model
        self.hist = [torch.zeros(2 * dil, d) for dil in cfg.dilations]
        self.k = torch.zeros(cfg.layers, profile.context_tokens, d)
        self.v = torch.zeros(cfg.layers, profile.context_tokens, d)
        self.state = RollingState()
        self.dly = model.delay.weight[delay_index(profile.delay_tokens)]

    def admit(self, incoming: int):
        before = self.state
        self.state, drop = roll(before, incoming, self.p.context_tokens, self.p.trim_tokens)
        if drop:
            keep, n = self.p.stable_prefix_tokens, before.cached
            for cache in (self.k, self.v):
                cache[:, keep:n - drop] = cache[:, keep + drop:n].clone()
        return self.state.cached - incoming  # first free slot

    def step(self, frames: torch.Tensor, prev: int, slot: int) -> torch.Tensor:
        m, cfg = self.m, self.m.cfg
        x = m.audio(frames[None, None])[0, 0]
        for i, (conv, dil) in enumerate(zip(m.convs, cfg.dilations)):
            hist = self.hist[i]
            x_in = x
            x = x + F.gelu(conv(torch.cat([hist[0], hist[dil], x])))
            self.hist[i] = torch.cat([hist[1:], x_in[None]])
        h = x + m.tok.weight[prev] + self.dly
        n = slot + 1
        dist = torch.arange(slot, -1, -1, dtype=torch.float32)  # slot - j for j in 0..slot
        for li, b in enumerate(m.blocks):
            d, heads = cfg.d_model, cfg.heads
            q, k, v = b.qkv(b.ln1(h)).view(3, d)
            self.k[li, slot], self.v[li, slot] = k, v
            qh = q.view(heads, d // heads)
            kh = self.k[li, :n].view(n, heads, d // heads)
            vh = self.v[li, :n].view(n, heads, d // heads)
            scores = torch.einsum("hd,nhd->hn", qh, kh) / math.sqrt(d // heads) - m.slopes[:, None] * dist
            att = torch.einsum("hn,nhd->hd", torch.softmax(scores, -1), vh).reshape(d)
            h = h + b.proj(att)
            h = h + b.ff2(F.gelu(b.ff1(b.ln2(h))))
        return m.head(m.ln_f(h))


@torch.no_grad()
def reference_decode(model: StreamModel, pcm: np.ndarray, profile: StreamProfile) -> dict:
    """The engine's decode in PyTorch: same positions, same trims, greedy tokens.  Returns ids and margins.

    Runs on one thread: these are many tiny ops, and extra threads only contend with the engine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _decode(model, pcm, profile)
    finally:
        torch.set_num_threads(threads)


def _decode(model: StreamModel, pcm: np.ndarray, profile: StreamProfile) -> dict:
    from harness.streaming.profile import SAMPLES_PER_TOKEN, audio_tokens
    cfg = model.cfg
    if (cfg.left_pad_tokens, cfg.eof_drain_tokens) != (profile.left_pad_tokens, profile.eof_drain_tokens):
        raise ArtifactError(f"profile {profile.name} pads ({profile.left_pad_tokens}, {profile.eof_drain_tokens}) "
                            f"but the model was trained with ({cfg.left_pad_tokens}, {cfg.eof_drain_tokens})")
    n_audio = audio_tokens(len(pcm))
    total = profile.left_pad_tokens + n_audio + profile.right_pad_tokens
    audio = np.zeros(total * SAMPLES_PER_TOKEN, np.float32)
    start = profile.left_pad_tokens * SAMPLES_PER_TOKEN
    audio[start:start + len(pcm)] = pcm
    frames = torch.from_numpy(audio).view(total, FRAMES_PER_TOKEN, FRAME_SAMPLES)
    stream = _Stream(model, profile)
    ids, margins, prev = [], [], 0
    s = profile.startup_tokens
    for pos in range(s - 1, total):
        incoming = s if pos == s - 1 else 1
        first = stream.admit(incoming)
        logits = None
        for j, p in enumerate(range(pos - incoming + 1, pos + 1)):
            logits = stream.step(frames[p], 0 if incoming > 1 else prev, first + j)
        top = torch.topk(logits, 2)
        prev = int(top.indices[0])
        ids.append(prev)
        margins.append(float(top.values[0] - top.values[1]))
    return {"ids": ids, "margins": margins}
