"""``source = "onnx"``: an existing export directory, made by any tool. Gatehouse builds nothing.

The graphs are found by the transformers.js / optimum layout (``onnx/model.onnx`` is fp32,
``onnx/model_quantized.onnx`` (else ``model_int8`` / ``model_uint8``) is q8, ``onnx/model_q4.onnx``
is q4; the same names at the directory's top, as optimum and ORT-GenAI write them) or named in the
campaign (``graphs = { q4 = "int4/model.onnx" }``). Graphs of other precisions (``model_fp16``,
``model_q4f16``, ``model_bnb4``) are listed, not measured: no policy holds them yet.

The directory must hold a tokenizer and a ``config.json`` (or ORT-GenAI's ``genai_config.json``).
Each graph the campaign measures (its dtypes' and fp32's, every variant's reference) is opened at load
(:mod:`.onnx_graph`: parsed without its weights, external data present and long enough, the ONNX checker,
the interface harness.runtime.OrtDecoder binds, the config's cache dims); what cannot bind is refused
then, naming the graph and the input, output or tensor (``init`` the same). When the
directory also holds the model's weights (``hf`` names another directory, or the export directory has
``config.json`` and safetensors), that directory is the PyTorch reference and ORT-GenAI's peer build.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..domain import DTYPES
from ..errors import ArtifactError
from ..fields import Where
from . import hf as hf_source
from . import onnx_graph
from .paths import resolve

KEYS = {"path", "graphs", "hf"}
ROOTS = ("onnx/", "")
NAMES = {"fp32": ("model.onnx",), "q8": ("model_quantized.onnx", "model_int8.onnx", "model_uint8.onnx"),
         "q4": ("model_q4.onnx",)}
UNMEASURED = {"fp16": "model_fp16.onnx", "q4f16": "model_q4f16.onnx", "bnb4": "model_bnb4.onnx"}
CONFIGS = ("config.json", "genai_config.json")


def discover(directory: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(dtype -> graph path relative to ``directory``, other precisions found -> their paths)."""
    found: dict[str, str] = {}
    others: dict[str, str] = {}
    for root in ROOTS:
        for dtype, names in NAMES.items():
            for name in names:
                if dtype not in found and (directory / root / name).is_file():
                    found[dtype] = root + name
        for label, name in UNMEASURED.items():
            if label not in others and (directory / root / name).is_file():
                others[label] = root + name
    return found, others


def model_config(directory: Path) -> dict[str, Any]:
    """What the graph's symbolic dims and the tokenizer need from the export directory's config: layers,
    kv heads, head dim, context, vocab (config.json, else ORT-GenAI's genai_config.json; {} when neither)."""
    cfg_path = directory / "config.json"
    if cfg_path.is_file():
        c = json.loads(cfg_path.read_text(encoding="utf-8"))
        heads = c.get("num_attention_heads")
        return {"file": str(cfg_path), "model_type": c.get("model_type"), "layers": c.get("num_hidden_layers"),
                "kv_heads": c.get("num_key_value_heads") or heads,
                "head_dim": c.get("head_dim") or (c["hidden_size"] // heads if heads and c.get("hidden_size") else None),
                "context": c.get("max_position_embeddings"), "vocab": c.get("vocab_size")}
    g_path = directory / "genai_config.json"
    if g_path.is_file():
        g = json.loads(g_path.read_text(encoding="utf-8"))
        d = g.get("model", {}).get("decoder", {})
        return {"file": str(g_path), "model_type": g.get("model", {}).get("type"), "layers": d.get("num_hidden_layers"),
                "kv_heads": d.get("num_key_value_heads"), "head_dim": d.get("head_size"),
                "context": g.get("model", {}).get("context_length"), "vocab": g.get("model", {}).get("vocab_size")}
    return {}


def parse(table: dict[str, Any], where: Where, base: Path) -> dict[str, Any]:

    if not isinstance(table.get("path"), str) or not table["path"]:
        raise where.fail("an onnx model needs path = \"<an export directory>\"")
    directory = resolve(base, table["path"])
    if not directory.is_dir():
        raise where.child("path").fail(f"{directory} does not exist or is not a directory")
    found, _ = discover(directory)
    named = table.get("graphs", {})
    gw = where.child("graphs")
    if not isinstance(named, dict):
        raise gw.fail(f"expected a table of dtype = \"graph path\", got {named!r}")
    for dtype, rel in named.items():
        if dtype not in DTYPES:
            raise gw.child(dtype).fail(f"unknown dtype {dtype!r} (known: {', '.join(DTYPES)})")
        if not isinstance(rel, str) or not rel or Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise gw.child(dtype).fail(f"expected a graph path inside {directory}, got {rel!r}")
        if not (directory / rel).is_file():
            raise gw.child(dtype).fail(f"{directory / rel} does not exist")
    graphs = {**found, **named}
    dtypes = table.get("dtypes")
    if isinstance(dtypes, list):
        missing = [d for d in dtypes if d in DTYPES and d not in graphs]
        if missing:
            raise where.child("dtypes").fail(
                f"no graph for {', '.join(missing)} in {directory} (found: "
                f"{', '.join(f'{d} = {r}' for d, r in graphs.items()) or 'no graph'}; looked for "
                f"{', '.join(r + n for r in ROOTS for ns in NAMES.values() for n in ns)}); name it in graphs")
    # config and tokenizer: at the top, else beside a graph (ORT-GenAI writes one folder per precision)
    candidates = [directory] + [(directory / rel).parent for _, rel in sorted(graphs.items())]
    config_dir = next((d for d in candidates if any((d / c).is_file() for c in CONFIGS)
                       and any((d / t).is_file() for t in hf_source.TOKENIZER)), None)
    if config_dir is None:
        raise where.child("path").fail(f"{directory} has no folder with a tokenizer ({', '.join(hf_source.TOKENIZER)}) "
                                       f"and {' or '.join(CONFIGS)} (the cache dims, the context and the tokenizer "
                                       f"are read from it), neither at the top nor beside a graph")
    try:
        config = model_config(config_dir)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise where.child("path").fail(f"{directory}: unreadable model config: {exc}") from None
    measured = set(dtypes) | {"fp32"} if isinstance(dtypes, list) else set(graphs)
    for dtype, rel in sorted(graphs.items()):
        if dtype in measured:
            try:
                check_graph(directory / rel)
            except ArtifactError as exc:
                raise gw.child(dtype).fail(str(exc)) from None
    hf_path = None
    if "hf" in table:
        if not isinstance(table["hf"], str) or not table["hf"]:
            raise where.child("hf").fail(f"expected a Hugging Face directory, got {table['hf']!r}")
        hf_path = resolve(base, table["hf"])
        hf_source.check_directory(hf_path, where.child("hf"))
    elif (directory / "config.json").is_file() and hf_source.has_weights(directory):
        hf_source.check_directory(directory, where.child("path"))
        hf_path = directory
    return {"path": directory, "graphs": tuple(sorted(graphs.items())), "hf_path": hf_path,
            "config_dir": config_dir, "architecture": config.get("model_type")}


def check_graph(graph: Path) -> None:
    """Open ``graph`` as the first fixture would, cheaply; raise ArtifactError naming it and what cannot bind."""
    try:
        config = config_beside(graph)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ArtifactError(f"{graph}: unreadable model config beside the graph: {exc}") from None
    onnx_graph.check(graph, config)


def config_beside(graph: Path) -> dict[str, Any]:
    """The model config of a graph: in its directory, else one up (the transformers.js layout's onnx/)."""
    for d in (Path(graph).parent, Path(graph).parent.parent):
        config = model_config(d)
        if config:
            return config
    return {}


def cache_dims(graph: Path) -> dict[str, int]:
    """kv_heads and head_dim from the config beside a graph (for graphs that declare them symbolically);
    {} when there is no config. The probe and the decoder check them against the graph's own dims."""
    try:
        c = config_beside(graph)
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {k: int(c[k]) for k in ("kv_heads", "head_dim") if c.get(k)}
