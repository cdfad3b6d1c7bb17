"""ONNX Runtime session settings as one record: what every gate that runs a graph on ONNX Runtime's CPU provider
writes in its receipt (``ort_session``), and what the report requires to be the same across one variant's gates.

The cache, behavior, quantization and timing gates of one variant judge one thing only when they ran it the same
way: an optimization level or a free-dimension override can change the kernels (and so the rounding) a graph runs
with.  The thread count is recorded and compared too: the gates of one variant run with the campaign's threads.
A browser lane (onnxruntime-web, wasm) records its own settings elsewhere and is not compared here.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

PROVIDER = "CPUExecutionProvider"
INTER_OP_THREADS = 1
EXECUTION_MODE = "sequential"
LEVELS = ("all", "extended", "basic")   # GraphOptimizationLevel ORT_ENABLE_ALL / _EXTENDED / _BASIC
# the keys two receipts of one variant must agree on (every key of the record)
KEYS = ("execution_provider", "graph_optimization_level", "intra_op_threads", "inter_op_threads", "execution_mode",
        "free_dimension_overrides", "config_entries")


def settings(threads: int, optimization: str = "all", config_entries: Mapping[str, Any] | None = None,
             free_dimension_overrides: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The record of one session's settings (the values :class:`harness.runtime.OrtDecoder` and the native probe
    set)."""
    if optimization not in LEVELS:
        raise ValueError(f"unknown graph optimization level {optimization!r} (known: {', '.join(LEVELS)})")
    return {"execution_provider": PROVIDER, "graph_optimization_level": optimization, "intra_op_threads": int(threads),
            "inter_op_threads": INTER_OP_THREADS, "execution_mode": EXECUTION_MODE,
            "free_dimension_overrides": dict(sorted((free_dimension_overrides or {}).items())),
            "config_entries": {k: str(v) for k, v in sorted((config_entries or {}).items())}}


def describe(record: Mapping[str, Any]) -> str:
    """One line: 'CPUExecutionProvider, optimization all, 2 intra-op threads, ...'."""
    extra = [f"free dims {dict(record['free_dimension_overrides'])}"] if record.get("free_dimension_overrides") else []
    extra += [f"config {dict(record['config_entries'])}"] if record.get("config_entries") else []
    return ", ".join([str(record.get("execution_provider")), f"optimization {record.get('graph_optimization_level')}",
                      f"{record.get('intra_op_threads')} intra-op threads", *extra])


def differences(recorded: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """Each setting that differs between the receipts of one variant, as 'key (value in node, node; value in
    node)'; ``recorded`` is (node id, ort_session record) for each receipt that carries one.  Pure."""
    out = []
    for key in KEYS:
        groups: dict[str, list[str]] = {}
        for nodeid, record in recorded:
            groups.setdefault(repr(record.get(key)), []).append(nodeid)
        if len(groups) > 1:
            out.append(f"{key} (" + "; ".join(f"{value} in {', '.join(nodes)}" for value, nodes in groups.items()) + ")")
    return out
