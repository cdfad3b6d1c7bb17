"""The overlay file: replacement initializers for one backbone graph, in the safetensors layout.

An overlay is applied by ONNX Runtime itself at session creation (``SessionOptions.add_initializer`` in
Python, ``OrtApi::AddInitializer`` in the native probe): each tensor replaces the graph initializer of
the same name, so the backbone graph's bytes never change and storage grows by the overlay only.

Layout (safetensors): an 8-byte little-endian header length N, N bytes of UTF-8 JSON, then the data.
The JSON maps each ONNX initializer name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets
into the data), plus ``"__metadata__"``: string keys, of which ``gatehouse_overlay`` ("1") and
``backbone_sha256`` (the SHA-256 of the backbone ``.onnx`` file the overlay was encoded for) are
required. :func:`read` checks all of it strictly and refuses, naming the file and the tensor or field:
a truncated file, a header that is not JSON, offsets out of the data or overlapping, a byte count that
does not match the shape, an unknown dtype, and (when given) another backbone.

Tensor names starting with :data:`RESERVED` are not initializers: a skill bundle (:mod:`.bundle`) keeps its
routing subspaces under them. :func:`read` returns them apart (``Overlay.reserved``), so an overlay reader
(``OrtDecoder(overlay=...)``, the probe's ``--overlay``) applies a bundle's tensors and leaves its routing.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np

from ..errors import ArtifactError
from ..hashing import sha256_file

FORMAT = "1"
RESERVED = "__routing__/"   # tensors under this prefix are a bundle's routing data, never initializers
DTYPES = {"U8": np.uint8, "I8": np.int8, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}
_NAMES = {np.dtype(v): k for k, v in DTYPES.items()}


class OverlayError(ArtifactError):
    """An overlay file is malformed, or was encoded for another backbone."""


@dataclass(frozen=True)
class Overlay:
    path: Path
    metadata: Mapping[str, str]
    tensors: Mapping[str, np.ndarray]                  # ONNX initializer name -> replacement
    reserved: Mapping[str, np.ndarray] = field(default_factory=dict)   # RESERVED names (a bundle's routing)

    @property
    def backbone_sha256(self) -> str:
        return self.metadata["backbone_sha256"]

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())


def write(path: Path | str, tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str]) -> Path:
    """Write ``tensors`` (initializer name -> array) with ``metadata`` (must name ``backbone_sha256``);
    atomically (a temporary file renamed into place)."""
    path = Path(path)
    meta = {"gatehouse_overlay": FORMAT, **{str(k): str(v) for k, v in metadata.items()}}
    if len(meta.get("backbone_sha256", "")) != 64:
        raise OverlayError(f"{path}: an overlay must record its backbone's SHA-256, got {meta.get('backbone_sha256')!r}")
    if not any(not name.startswith(RESERVED) for name in tensors):
        raise OverlayError(f"{path}: an overlay with no tensors replaces nothing")
    header: dict = {"__metadata__": meta}
    offset, blobs = 0, []
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name])
        if arr.dtype not in _NAMES:
            raise OverlayError(f"{path}: tensor {name!r} has dtype {arr.dtype}, which an overlay cannot hold "
                               f"(one of {sorted(DTYPES)})")
        data = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _NAMES[arr.dtype], "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    raw += b" " * (-len(raw) % 8)
    tmp = path.with_name(path.name + ".tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for blob in blobs:
            f.write(blob)
    tmp.replace(path)
    return path


def read(path: Path | str, backbone_sha256: str | None = None) -> Overlay:
    """Read and check an overlay file; with ``backbone_sha256``, refuse an overlay made for another graph."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise OverlayError(f"{path}: cannot read the overlay: {exc}") from None
    if len(data) < 8:
        raise OverlayError(f"{path}: truncated overlay: {len(data)} bytes, not even the 8-byte header length")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise OverlayError(f"{path}: truncated overlay: the header claims {n} bytes, the file has {len(data) - 8} after "
                           f"the length")
    try:
        header = json.loads(data[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise OverlayError(f"{path}: the overlay header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise OverlayError(f"{path}: the overlay header must be an object")
    meta = header.pop("__metadata__", None)
    if not isinstance(meta, dict) or meta.get("gatehouse_overlay") != FORMAT:
        raise OverlayError(f"{path}: __metadata__.gatehouse_overlay must be {FORMAT!r}, got "
                           f"{(meta or {}).get('gatehouse_overlay')!r}: not a Gatehouse overlay")
    sha = meta.get("backbone_sha256")
    if not isinstance(sha, str) or len(sha) != 64:
        raise OverlayError(f"{path}: __metadata__.backbone_sha256 must be a SHA-256, got {sha!r}")
    if backbone_sha256 is not None and sha != backbone_sha256:
        raise OverlayError(f"{path}: __metadata__.backbone_sha256 is {sha}, but the backbone graph is "
                           f"{backbone_sha256}: this overlay was encoded for another backbone")
    body = data[8 + n:]
    tensors: dict[str, np.ndarray] = {}
    reserved: dict[str, np.ndarray] = {}
    spans = []
    for name, entry in header.items():
        where = f"{path}: tensor {name!r}"
        if not isinstance(entry, dict) or entry.get("dtype") not in DTYPES:
            raise OverlayError(f"{where}: dtype must be one of {sorted(DTYPES)}, got "
                               f"{entry.get('dtype') if isinstance(entry, dict) else entry!r}")
        shape, offsets = entry.get("shape"), entry.get("data_offsets")
        if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
            raise OverlayError(f"{where}: shape must be a list of sizes, got {shape!r}")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)
                and 0 <= offsets[0] <= offsets[1] <= len(body)):
            raise OverlayError(f"{where}: data_offsets {offsets!r} fall outside the {len(body)} data bytes "
                               f"(truncated or corrupt)")
        dtype = np.dtype(DTYPES[entry["dtype"]]).newbyteorder("<")
        need = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if offsets[1] - offsets[0] != need:
            raise OverlayError(f"{where}: {offsets[1] - offsets[0]} bytes for shape {shape} of {entry['dtype']} "
                               f"({need} expected)")
        spans.append((offsets[0], offsets[1], name))
        (reserved if name.startswith(RESERVED) else tensors)[name] = np.frombuffer(
            body, dtype, count=need // dtype.itemsize, offset=offsets[0]).reshape(shape)
    spans.sort()
    for (a0, a1, an), (b0, b1, bn) in zip(spans, spans[1:]):
        if b0 < a1:
            raise OverlayError(f"{path}: tensors {an!r} and {bn!r} overlap in the data")
    if not tensors:
        raise OverlayError(f"{path}: the overlay holds no tensors")
    return Overlay(path, dict(meta), tensors, reserved)


def check_names(overlay: Overlay, graph: Path | str) -> None:
    """Refuse an overlay tensor the graph has no initializer for, or one whose dtype or shape differs."""
    import onnx
    from onnx.helper import tensor_dtype_to_np_dtype

    model = onnx.load(str(graph), load_external_data=False)
    inits = {i.name: (tuple(i.dims), np.dtype(tensor_dtype_to_np_dtype(i.data_type))) for i in model.graph.initializer}
    for name, arr in overlay.tensors.items():
        if name not in inits:
            raise OverlayError(f"{overlay.path}: tensor {name!r} is not an initializer of {graph}")
        shape, dtype = inits[name]
        if tuple(arr.shape) != shape or arr.dtype.newbyteorder("=") != dtype:
            raise OverlayError(f"{overlay.path}: tensor {name!r} is {arr.dtype}{list(arr.shape)}, the graph's "
                               f"initializer is {dtype}{list(shape)}: an encoding the graph cannot take")


def graph_sha256(graph: Path | str) -> str:
    return sha256_file(Path(graph))
