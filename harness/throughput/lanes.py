"""The native lanes the throughput tests time on the shared workload, as :class:`harness.lanes.Lane`\\ s: the
probe process, Python onnxruntime, ORT-GenAI's own generator loop and llama.cpp. Each ``load()`` starts
its engine and returns the load record the receipts carry; :func:`harness.lanes.measure` drives them."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import EvidenceError
from ..lanes import BaseLane
from . import ortgenai, probe


def loaded_libraries(fragment: str) -> list[str]:
    """Shared objects of this process whose path contains ``fragment`` (from /proc/self/maps)."""
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return []
    return sorted({l.split()[-1] for l in lines if fragment in l and "/" in l.split()[-1]})


# -- the native probe (native/probe/) -------------------------------------------------------------
class ProbeLane(BaseLane):
    """One :class:`harness.throughput.probe.ProbeProcess` on one graph; CPU is the probe process's own.
    ``load()`` is the probe's JSON load receipt; ``close()`` names a non-zero exit status.

    With ``overlay`` (a skill overlay file, :mod:`harness.overlay.fileformat`) the probe applies its tensors at
    session creation (``--overlay``); ``load()`` first reads the file and checks its tensor names, dtypes and
    shapes against the graph's initializers here (the probe checks all of it again, and the backbone's SHA-256,
    and refuses a tensor ONNX Runtime did not use), and the load receipt carries the probe's ``overlay`` block."""

    def __init__(self, binary: Path, graph: Path, threads: int, *, name: str = "native-probe", kv: str = "auto",
                 max_seq: int = 1024, kv_heads: int | None = None, head_dim: int | None = None,
                 overlay: Path | None = None):
        super().__init__(name)
        self.binary, self.graph, self.threads = binary, graph, threads
        self.overlay = None if overlay is None else Path(overlay)
        if kv_heads is None and head_dim is None:   # any graph: cache dims from the config beside it, if any
            from ..sources.onnx import cache_dims

            dims = cache_dims(graph)
            kv_heads, head_dim = dims.get("kv_heads"), dims.get("head_dim")
        self.options = {"kv": kv, "max_seq": max_seq, "kv_heads": kv_heads, "head_dim": head_dim,
                        "overlay": self.overlay}
        self.process: probe.ProbeProcess | None = None

    def load(self) -> dict[str, Any]:
        if self.overlay is not None:   # refused here, naming the file and the tensor, before a process starts
            from ..overlay import fileformat

            fileformat.check_names(fileformat.read(self.overlay), self.graph)
        self.process = probe.ProbeProcess(self.binary, self.graph, self.threads, **self.options)
        return self.process.load

    def cpu_s(self) -> float | None:
        return self.process.cpu_s() if self.process else None

    def _generate(self, prompt: list[int], n: int):
        r = self.process.generate(prompt, n, self.threads)
        return r["ids"], r["token_ms"], {}

    def close(self) -> str | None:
        proc, self.process = self.process, None
        if proc is None:
            return None
        rc = proc.close()
        if rc not in (0, None):
            return f"the probe exited with status {rc}: {' | '.join(proc.stderr_lines[-3:])}"
        return None


# -- Python onnxruntime (numpy feeds, the naive loop) ---------------------------------------------
class PythonOrtLane(BaseLane):
    """harness.runtime.OrtDecoder's greedy loop (``greedy_stream``): numpy feeds and the whole cache returned
    each step; a fresh session per lane, so its load is timed too."""

    def __init__(self, graph: Path, threads: int, *, name: str = "python-ort"):
        super().__init__(name)
        self.graph, self.threads = graph, threads
        self.decoder = None

    def load(self) -> dict[str, Any]:
        import onnxruntime

        from ..runtime import OrtDecoder

        t0 = time.perf_counter()
        self.decoder = OrtDecoder(self.graph, self.threads)
        return {"load_ms": (time.perf_counter() - t0) * 1000, "threads": self.decoder.threads,
                "runtime_version": onnxruntime.__version__, "session": self.decoder.settings}

    def _generate(self, prompt: list[int], n: int):
        t0 = time.perf_counter()
        ids, stamps = [], []
        for token, _ in self.decoder.greedy_stream(prompt, n - 1):
            ids.append(token)
            stamps.append((time.perf_counter() - t0) * 1000)
        return ids, stamps, {}

    def close(self) -> str | None:
        self.decoder = None
        return None


# -- ORT-GenAI ----------------------------------------------------------------------------------
def ortgenai_model(model_dir: Path, threads: int):
    """An onnxruntime_genai Model on the built directory, on ``threads`` intra-op threads."""
    import onnxruntime_genai as og

    config = og.Config(str(model_dir))
    config.overlay(json.dumps({"model": {"decoder": {"session_options": {
        "intra_op_num_threads": threads, "inter_op_num_threads": 1}}}}))
    return og.Model(config)


class OrtGenAILane(BaseLane):
    """ORT-GenAI's own generator loop: append_tokens (prefill), then generate_next_token per token.

    EOS is not ignorable in its loop: a generation that stops early is refused by the statistics.
    onnxruntime_genai raises plain RuntimeError; load and generate turn it into :class:`EvidenceError`."""

    def __init__(self, model_dir: Path, threads: int, *, name: str = "ort-genai"):
        super().__init__(name)
        self.model_dir, self.threads = model_dir, threads
        self.model = None

    def load(self) -> dict[str, Any]:
        try:
            t0 = time.perf_counter()
            self.model = ortgenai_model(self.model_dir, self.threads)
            return {"load_ms": (time.perf_counter() - t0) * 1000, "threads": self.threads,
                    "onnxruntime_genai": ortgenai.version(), "runtime_library": loaded_libraries("libonnxruntime")}
        except Exception as exc:
            raise EvidenceError(f"onnxruntime_genai: {exc}") from exc

    def _generate(self, prompt: list[int], n: int):
        import onnxruntime_genai as og

        t0 = time.perf_counter()
        params = og.GeneratorParams(self.model)
        params.set_search_options(max_length=len(prompt) + n, do_sample=False)
        ids, stamps = [], []
        try:
            gen = og.Generator(self.model, params)
            gen.append_tokens(np.asarray(prompt, dtype=np.int32))
            while len(ids) < n and not gen.is_done():
                gen.generate_next_token()
                ids.append(int(gen.get_next_tokens()[0]))
                stamps.append((time.perf_counter() - t0) * 1000)
            del gen
        except Exception as exc:
            raise EvidenceError(f"onnxruntime_genai: {exc}") from exc
        return ids, stamps, {}

    def close(self) -> str | None:
        self.model = None
        return None


# -- llama.cpp ----------------------------------------------------------------------------------
def llamacpp_model(gguf_path: Path, threads: int, n_ctx: int):
    from llama_cpp import Llama

    return Llama(model_path=str(gguf_path), n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_threads=threads,
                 n_threads_batch=threads, seed=0, verbose=False, logits_all=False)


class LlamaCppLane(BaseLane):
    """llama-cpp-python's generate loop with the greedy sampler; the cache reset before each generation so
    the prompt is evaluated in full every time (no prefix reuse). llama_cpp raises ValueError/RuntimeError;
    load and generate turn them into :class:`EvidenceError`."""

    def __init__(self, gguf_path: Path, threads: int, n_ctx: int, *, name: str = "llama.cpp"):
        super().__init__(name)
        self.gguf_path, self.threads, self.n_ctx = gguf_path, threads, n_ctx
        self.llm = None

    def load(self) -> dict[str, Any]:
        try:
            import llama_cpp

            t0 = time.perf_counter()
            self.llm = llamacpp_model(self.gguf_path, self.threads, self.n_ctx)
            return {"load_ms": (time.perf_counter() - t0) * 1000, "threads": self.threads,
                    "llama_cpp_python": llama_cpp.__version__,
                    "system_info": llama_cpp.llama_print_system_info().decode()}
        except Exception as exc:
            raise EvidenceError(f"llama.cpp: {exc}") from exc

    def _generate(self, prompt: list[int], n: int):
        self.llm.reset()
        t0 = time.perf_counter()
        ids, stamps = [], []
        try:
            for tok in self.llm.generate(list(prompt), top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0,
                                         reset=True):
                ids.append(int(tok))
                stamps.append((time.perf_counter() - t0) * 1000)
                if len(ids) >= n:
                    break
        except Exception as exc:
            raise EvidenceError(f"llama.cpp: {exc}") from exc
        return ids, stamps, {}

    def close(self) -> str | None:
        self.llm = None
        return None
