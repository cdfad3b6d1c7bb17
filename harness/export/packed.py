"""Packed delivery: an fp32 graph whose weights ship small and are expanded once at load.

The browser's fastest path on this machine is onnxruntime-web's fp32 MatMul (its MatMulNBits dequantizes the
whole weight on every call), but the fp32 graph is the largest download. A packed recipe ships the fp32 graph
without its large weights (``model.onnx``, the linear layers and the embedding as external data in
``model.onnx.data``) and, beside it, the weights in the recipe's small encoding (``pack.bin``, indexed by
``pack.json``): 4-bit codes with fp16 scales and either fp16 block offsets (``q4_1``: ``w = d * q + m``, a GGUF
Q4_1 block exactly) or integer zero points (``q4_zp``: ``w = (q - z) * d``), and the embedding as 8-bit codes
(``q8_zp``). The page expands them into the external data's bytes and creates the session with them; natively
the same ``model.onnx`` + ``model.onnx.data`` runs.

The expanded values are defined by the pack: each weight is computed in float64 from its code and its fp16 scale
(and offset or zero point) and rounded once to float32, the operations and their order fixed (``d * q + m``,
``(q - z) * d``), which JavaScript's doubles and ``Float32Array`` stores reproduce bit for bit. So the graph the
gates judge natively is exactly what the page builds, and the page checks it: the SHA-256 of its expansion must
equal ``pack.json``'s ``data_sha256`` (the pinned ``model.onnx.data``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from .rounding import rtn

PACK_VERSION = 1
DATA_FILE = "model.onnx.data"
ALIGN = 64


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _nibbles(codes: np.ndarray) -> np.ndarray:
    """(N, K) codes 0..15 -> (N, K/2) bytes, the even column in the low nibble."""
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)


def encode_linear(w: np.ndarray, block: int, method: str):
    """(encoding, arrays, expanded (N, K) float32) for one linear weight ``w`` (N, K)."""
    from . import lattice

    rec = lattice.recover(w, block) if method == "lattice" else None
    n, k = w.shape
    if rec is not None:
        q, d, m = rec
        d16, m16 = d.astype(np.float16), m.astype(np.float16)
        expanded = (d16.astype(np.float64)[..., None] * q + m16.astype(np.float64)[..., None]).astype(np.float32)
        return "q4_1", {"codes": _nibbles(q.reshape(n, k)), "scales": d16, "offsets": m16}, expanded.reshape(n, k)
    codes, scale, zero = rtn(w, 4, block)
    s16 = scale.astype(np.float16)
    c = codes.reshape(n, k // block, block).astype(np.float64)
    expanded = ((c - zero.astype(np.float64)[..., None]) * s16.astype(np.float64)[..., None]).astype(np.float32)
    return "q4_zp", {"codes": _nibbles(codes), "scales": s16, "zeros": zero}, expanded.reshape(n, k)


def encode_embedding(w: np.ndarray, block: int):
    """8-bit codes around an integer zero point (a GGUF Q8_0 embedding exactly: zero point 128)."""
    from . import matmulnbits

    exact = matmulnbits.q8_0_lattice(w, block)
    codes, scale, zero = exact if exact is not None else rtn(w, 8, block)
    s16 = scale.astype(np.float16)
    n, k = w.shape
    c = codes.reshape(n, k // block, block).astype(np.float64)
    expanded = ((c - zero.astype(np.float64)[..., None]) * s16.astype(np.float64)[..., None]).astype(np.float32)
    return "q8_zp", {"codes": codes, "scales": s16, "zeros": zero}, expanded.reshape(n, k)


def pack(model, out: Path, block: int, method: str) -> dict[str, Any]:
    """Rewrite the fp32 ``model`` (the fused builder's, bits 32) for packed delivery into ``out``: the linear
    MatMul weights and the embedding become external data holding their expanded values; writes ``model.onnx.data``,
    ``pack.bin`` and ``pack.json`` and returns the index. The caller saves the model as ``out/onnx/model.onnx``."""
    from onnx import TensorProto, numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    linear = {n.input[1] for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in inits}
    embedding = {n.input[0] for n in model.graph.node if n.op_type == "Gather" and n.input[0] in inits
                 and len(inits[n.input[0]].dims) == 2}
    (out / "onnx").mkdir(parents=True, exist_ok=True)
    data_path, pack_path = out / "onnx" / DATA_FILE, out / "onnx" / "pack.bin"
    entries = []
    data_off = pack_off = 0
    digest = hashlib.sha256()
    with open(data_path, "wb") as data, open(pack_path, "wb") as packed:
        def put_pack(arr: np.ndarray) -> list[int]:
            nonlocal pack_off
            raw = np.ascontiguousarray(arr).tobytes()
            start = pack_off
            packed.write(raw)
            pad = _align(len(raw)) - len(raw)
            packed.write(b"\0" * pad)
            pack_off += len(raw) + pad
            return [start, len(raw)]

        for init in model.graph.initializer:
            if init.name not in linear and init.name not in embedding:
                continue
            arr = numpy_helper.to_array(init)
            if init.name in linear:   # stored (K, N): the weight's rows are its columns
                encoding, arrays, expanded = encode_linear(np.ascontiguousarray(arr.T), block, method)
                stored = np.ascontiguousarray(expanded.T)
                transpose = True
            else:
                encoding, arrays, expanded = encode_embedding(arr, block)
                stored, transpose = expanded, False
            raw = stored.astype("<f4").tobytes()
            pad = _align(data_off) - data_off
            if pad:
                data.write(b"\0" * pad)
                digest.update(b"\0" * pad)
                data_off += pad
            data.write(raw)
            digest.update(raw)
            rows, cols = expanded.shape
            entry = {"name": init.name, "encoding": encoding, "rows": rows, "cols": cols, "block": block,
                     "transpose": transpose, "data": [data_off, len(raw)]}
            entry.update({k: put_pack(v) for k, v in arrays.items()})
            entries.append(entry)
            # the initializer now lives in model.onnx.data
            init.ClearField("raw_data")
            del init.float_data[:]
            init.data_location = TensorProto.EXTERNAL
            del init.external_data[:]
            for key, value in (("location", DATA_FILE), ("offset", str(data_off)), ("length", str(len(raw)))):
                kv = init.external_data.add()
                kv.key, kv.value = key, value
            data_off += len(raw)
    index = {"version": PACK_VERSION, "data_file": DATA_FILE, "data_bytes": data_off, "data_sha256": digest.hexdigest(),
             "pack_file": "pack.bin", "pack_bytes": pack_off, "pack_sha256": _sha256(pack_path), "tensors": entries}
    (out / "onnx" / "pack.json").write_text(json.dumps(index, indent=1))
    return index


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def expand(index: dict[str, Any], pack_bytes: bytes) -> bytes:
    """The external data's bytes from ``pack.bin`` alone, as the page computes them (the tests check the page's
    arithmetic against this one and this one against ``model.onnx.data``)."""
    out = bytearray(index["data_bytes"])
    for t in index["tensors"]:
        rows, cols, block = t["rows"], t["cols"], t["block"]
        nb = cols // block

        def arr(key, dtype):
            off, n = t[key]
            return np.frombuffer(pack_bytes, dtype=dtype, count=n // np.dtype(dtype).itemsize, offset=off)

        if t["encoding"] in ("q4_1", "q4_zp"):
            b = arr("codes", np.uint8).reshape(rows, cols // 2)
            q = np.empty((rows, cols), np.float64)
            q[:, 0::2], q[:, 1::2] = b & 15, b >> 4
        else:
            q = arr("codes", np.uint8).reshape(rows, cols).astype(np.float64)
        q = q.reshape(rows, nb, block)
        d = arr("scales", "<f2").reshape(rows, nb).astype(np.float64)[..., None]
        if t["encoding"] == "q4_1":
            w = d * q + arr("offsets", "<f2").reshape(rows, nb).astype(np.float64)[..., None]
        else:
            w = (q - arr("zeros", np.uint8).reshape(rows, nb).astype(np.float64)[..., None]) * d
        w = w.astype(np.float32).reshape(rows, cols)
        if t["transpose"]:
            w = np.ascontiguousarray(w.T)
        off, n = t["data"]
        out[off:off + n] = w.astype("<f4").tobytes()
    return bytes(out)
