"""An ``onnx`` source's graph, opened when the campaign loads (and by ``bin/gatehouse init``): refused then,
naming the graph and the input, output or tensor at fault, rather than at the first fixture after builds.

What is checked, cheaply (the graph's protobuf without its tensors' payloads, and a ``stat`` of each data file):
the file parses; every external-data file a tensor names exists and holds the tensor's bytes (offset + length
within the file); the ONNX checker accepts its structure (ops that onnxruntime registers in the ONNX domain are
left to onnxruntime); and the graph binds as :class:`harness.runtime.OrtDecoder` binds it, which is how every
fixture runs it: inputs ``input_ids`` and ``attention_mask`` (and ``position_ids`` when it has one) in int64 or
int32 and nothing else but the cache, ``past_key_values.N.key/value`` for layers 0..N-1 in float or float16 of
shape (batch, kv_heads, sequence, head_dim) whose dims agree with the config beside the graph, and outputs
``logits`` and ``present.N.key/value``. ``binding_problem`` is that rule, pure."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

from ..errors import ArtifactError

_PAST = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")
KNOWN_INPUTS = ("input_ids", "attention_mask", "position_ids")
INT_TYPES = ("int64", "int32")
KV_TYPES = ("float", "float16")
TAKES = "a decoder graph takes input_ids, attention_mask, optional position_ids and past_key_values.N.key/value"
ORT_ONLY = "gatehouse.onnxruntime-registered"   # the checker's copy moves such ops here (checker_problem)
KV_CACHE = "Gatehouse decodes with a KV cache (past_key_values.N.key/value in, present.N.key/value out)"

# a value's (element type, shape): the type as onnxruntime names it without "tensor()" ("float", "int64"),
# the shape a list of ints (static) and strings or None (symbolic), None when the graph declares no shape
Value = tuple[str, list | None]


def check(graph: Path, config: dict[str, Any]) -> None:
    """Raise :class:`ArtifactError` ``"<graph>: <problem>"`` when ``graph`` cannot be measured; ``config`` is the
    model config beside it (``harness.sources.onnx.config_beside``)."""
    model = read(graph)
    problem = (external_data_problem(graph, model) or checker_problem(model)
               or binding_problem(*interface(model), config))
    if problem:
        raise ArtifactError(f"{graph}: {problem}")


def read(graph: Path):
    """The graph's ModelProto without any tensor payload: external data is not loaded, and the bytes of weights
    stored inside the graph are skipped, not read (a 500 MB graph opens in milliseconds)."""
    import mmap

    from google.protobuf.message import DecodeError
    from onnx import ModelProto

    size = graph.stat().st_size
    if size == 0:
        raise ArtifactError(f"{graph}: empty file (0 bytes), not an ONNX graph")
    try:
        with open(graph, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            model = ModelProto.FromString(_without(buf, 0, size, {7: _graph_header}))
    except (DecodeError, ValueError, OSError) as exc:
        raise ArtifactError(f"{graph}: not a readable ONNX graph ({size} bytes: truncated, or not ONNX): "
                            f"{str(exc).strip() or type(exc).__name__}") from None
    if not model.HasField("graph"):
        raise ArtifactError(f"{graph}: not an ONNX graph ({size} bytes parse as a model without a graph)")
    return model


# the protobuf wire format, read only as far as a graph's header needs: ModelProto.graph is field 7,
# GraphProto.initializer field 5, and a TensorProto's payload fields 4-7 and 9-11 (float, int32, string, int64,
# raw, double, uint64 data)
_PAYLOAD = {4, 5, 6, 7, 9, 10, 11}


def _varint(buf, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError(f"a varint at byte {pos} is cut off or too long")
        byte = buf[pos]
        value, pos, shift = value | (byte & 0x7F) << shift, pos + 1, shift + 7
        if not byte & 0x80:
            return value, pos


def _without(buf, start: int, end: int, inner: dict) -> bytes:
    """A message's bytes with each field whose number ``inner`` names re-encoded by it, and any field it maps to
    None dropped without being read."""
    out, pos = [], start
    while pos < end:
        key, at = _varint(buf, pos)
        number, wire, tag_end = key >> 3, key & 7, at
        if wire == 0:
            stop = _varint(buf, at)[1]
        elif wire in (1, 5):
            stop = at + (8 if wire == 1 else 4)
        elif wire == 2:
            length, at = _varint(buf, at)
            stop = at + length
        else:
            raise ValueError(f"wire type {wire} at byte {pos}")
        if stop > end:
            raise ValueError(f"field {number} at byte {pos} needs {stop - pos} bytes; {end - pos} are left")
        if number not in inner:
            out.append(buf[pos:stop])
        elif inner[number] is not None:
            if wire != 2:
                raise ValueError(f"field {number} at byte {pos} is not a message")
            body = inner[number](buf, at, stop)
            out.append(buf[pos:tag_end] + _encoded(len(body)) + body)
        pos = stop
    return b"".join(out)


def _encoded(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append(n & 0x7F | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _graph_header(buf, start: int, end: int) -> bytes:
    return _without(buf, start, end, {5: lambda b, s, e: _without(b, s, e, dict.fromkeys(_PAYLOAD))})


def _tensors(graph) -> Iterator[Any]:
    """Every TensorProto of a GraphProto: initializers, sparse ones, node attributes, subgraphs."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield from (sparse.values, sparse.indices)
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from _tensors(sub)


def external_data_problem(graph: Path, model) -> str | None:
    """The first tensor whose external-data file is missing or too short for its offset + length (a stat per file,
    no weight read); None when every one is there."""
    from onnx import TensorProto

    sizes: dict[Path, int | None] = {}
    for tensor in _tensors(model.graph):
        if tensor.data_location != TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location")
        if not location:
            return f"tensor {tensor.name!r} is stored externally but names no location"
        if Path(location).is_absolute() or ".." in Path(location).parts:
            return f"tensor {tensor.name!r} keeps its data at {location!r}, outside the graph's folder"
        path = graph.parent / location
        if path not in sizes:
            sizes[path] = path.stat().st_size if path.is_file() else None
        if sizes[path] is None:
            return f"tensor {tensor.name!r} keeps its data in {location}, which does not exist ({path})"
        try:
            offset, length = int(info.get("offset") or 0), int(info.get("length") or 0)
        except ValueError:
            return (f"tensor {tensor.name!r}: external data offset {info.get('offset')!r} and length "
                    f"{info.get('length')!r} are not both integers")
        if offset + length > sizes[path]:
            return (f"tensor {tensor.name!r} needs bytes {offset}..{offset + length} of {location}, which has "
                    f"{sizes[path]} bytes ({path}: truncated, or not this graph's data)")
    return None


def checker_problem(model) -> str | None:
    """What the ONNX checker says of the graph's structure (IR and opsets, nodes and their attributes, names
    defined before use), or None. It checks a copy without tensor payloads (each initializer an empty tensor of
    its type: a 500 MB graph in milliseconds; the external data is external_data_problem's). An op of the ONNX
    domain that ONNX does not define but onnxruntime registers there (SimplifiedLayerNormalization, in Gatehouse's
    and ORT-GenAI's exports) is left to onnxruntime, as ops of other domains are."""
    import onnx
    from onnx import TensorProto, helper

    skeleton = onnx.ModelProto(ir_version=model.ir_version, opset_import=model.opset_import, functions=model.functions)
    g = skeleton.graph
    g.name = model.graph.name
    for field in ("node", "input", "output", "value_info", "sparse_initializer"):
        getattr(g, field).extend(getattr(model.graph, field))
    g.initializer.extend(TensorProto(name=t.name, data_type=t.data_type, dims=[0]) for t in model.graph.initializer)
    for t in _tensors(g):
        if t.data_location == TensorProto.EXTERNAL:
            t.CopyFrom(TensorProto(name=t.name, data_type=t.data_type, dims=[0]))
    ort_only = _ort_onnx_domain_ops()
    left = [n for n in g.node if n.domain in ("", "ai.onnx") and not onnx.defs.has(n.op_type)
            and (ort_only is None or n.op_type in ort_only)]
    for node in left:
        node.domain = ORT_ONLY
    if left:
        skeleton.opset_import.append(helper.make_opsetid(ORT_ONLY, 1))
    try:
        onnx.checker.check_model(skeleton)
    except onnx.checker.ValidationError as exc:
        return "the ONNX checker refuses it: " + " ".join(str(exc).split())
    return None


def _ort_onnx_domain_ops() -> set[str] | None:
    """The ops onnxruntime registers in the ONNX domain, or None when this build does not list its schemas."""
    try:
        from onnxruntime.capi.onnxruntime_pybind11_state import get_all_operator_schema
    except ImportError:
        return None
    return {s.name for s in get_all_operator_schema() if s.domain in ("", "ai.onnx")}


def _value(vi) -> Value:
    from onnx import TensorProto

    if not vi.type.HasField("tensor_type"):
        return vi.type.WhichOneof("value") or "undefined", None
    t = vi.type.tensor_type
    name = TensorProto.DataType.Name(t.elem_type).lower()
    shape = ([d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]
             if t.HasField("shape") else None)
    return name, shape


def interface(model) -> tuple[dict[str, Value], dict[str, Value]]:
    """(inputs, outputs) as onnxruntime lists them: an input that is also an initializer is not fed."""
    inits = {i.name for i in model.graph.initializer}
    inputs = {vi.name: _value(vi) for vi in model.graph.input if vi.name not in inits}
    return inputs, {vi.name: _value(vi) for vi in model.graph.output}


def names(found) -> str:
    """Names for a message, the cache's folded: ``input_ids, attention_mask, past_key_values.0..29.key/value``."""
    plain = [n for n in found if not re.match(r"^(past_key_values|present)\.\d+\.(key|value)$", n)]
    for stem in ("past_key_values", "present"):
        layers = sorted({int(m[1]) for n in found if (m := re.match(rf"^{stem}\.(\d+)\.(key|value)$", n))})
        if layers:
            plain.append(f"{stem}.{layers[0]}..{layers[-1]}.key/value" if len(layers) > 1 else f"{stem}.{layers[0]}.key/value")
    return ", ".join(plain) or "none"


def binding_problem(inputs: dict[str, Value], outputs: dict[str, Value], config: dict[str, Any]) -> str | None:
    """Why :class:`harness.runtime.OrtDecoder` cannot bind a graph of this interface, or None (its ``_bind``'s
    rule, read from the graph rather than a session)."""
    unknown = [n for n in inputs if n not in KNOWN_INPUTS and not _PAST.match(n)]
    if unknown:
        return f"cannot bind input(s) {', '.join(unknown)}: {TAKES}"
    missing = [n for n in ("input_ids", "attention_mask") if n not in inputs]
    if missing:
        return f"lacks the input(s) {', '.join(missing)} (inputs: {names(inputs)}); {TAKES}"
    past = sorted(((int(m[1]), m[2]), n) for n in inputs if (m := _PAST.match(n)))
    if not past:
        return f"no past key/value inputs (inputs: {names(inputs)}); {KV_CACHE}"
    for n in KNOWN_INPUTS:
        if n in inputs and inputs[n][0] not in INT_TYPES:
            return f"input {n} is {inputs[n][0]}; expected int64 or int32"
    layers = len(past) // 2
    if [n for _, n in past] != [f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]:
        return (f"past key/value inputs are not key/value pairs for layers 0..{layers - 1} "
                f"(inputs: {', '.join(n for _, n in past)})")
    first, (kv_type, shape) = past[0][1], inputs[past[0][1]]
    if kv_type not in KV_TYPES:
        return f"input {first} is {kv_type}; the cache binds float or float16"
    if shape is None or len(shape) != 4:
        return f"input {first} has shape {shape}; expected (batch, kv_heads, sequence, head_dim)"
    for axis, key in ((1, "kv_heads"), (3, "head_dim")):
        declared = shape[axis] if isinstance(shape[axis], int) and shape[axis] > 0 else None
        given = config.get(key)
        if declared is None and not given:
            return (f"input {first} declares {key} symbolically ({shape[axis]!r}) and no config.json or "
                    f"genai_config.json beside the graph gives it")
        if declared is not None and given and int(given) != declared:
            return f"input {first} has {key} {declared}; {config['file']} says {given}"
    if config.get("layers") and int(config["layers"]) != layers:
        return f"graph has past_key_values for {layers} layers; {config['file']} says {config['layers']}"
    if "logits" not in outputs:
        return f"no output logits (outputs: {names(outputs)}); Gatehouse reads the next token's scores from logits"
    absent = [n.replace("past_key_values", "present") for _, n in past]
    absent = [n for n in absent if n not in outputs]
    if absent:
        return f"no output {names(absent)} for the past inputs (outputs: {names(outputs)}); {KV_CACHE}"
    return None
