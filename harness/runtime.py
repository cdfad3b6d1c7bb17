"""A thin onnxruntime decoder over a graph with explicit past key/value inputs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from .errors import ArtifactError

_PAST = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")


class OrtDecoder:
    """Runs one forward step: ``(ids, mask, positions, past) -> (logits, presents)``.

    The caller owns the cache (a list of numpy arrays, key and value per layer);
    this class only checks the graph's interface and feeds it.
    """

    def __init__(self, graph: Path | str, threads: int = 2, options: dict[str, Any] | None = None,
                 model_bytes: bytes | None = None, kv_heads: int | None = None, head_dim: int | None = None,
                 overlay: Path | str | None = None, optimization: str = "all"):
        import onnxruntime as ort

        self.graph = Path(graph)
        if not self.graph.is_file():
            raise ArtifactError(f"{self.graph}: ONNX graph is missing")
        from . import ortsession

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = ortsession.INTER_OP_THREADS
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL   # ortsession.EXECUTION_MODE
        # ONNX Runtime's graph optimization level ("all", its default; "basic" and "extended" for the behavior
        # rule's null conditions, which must not change what a user would call quality)
        levels = {"all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
                  "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
                  "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC}
        if optimization not in levels:
            raise ArtifactError(f"{graph}: unknown graph optimization level {optimization!r} (known: {', '.join(levels)})")
        so.graph_optimization_level = levels[optimization]
        for key, value in (options or {}).items():
            so.add_session_config_entry(key, str(value))
        self.settings = ortsession.settings(threads, optimization, options)   # what a receipt records (ort_session)
        # A skill overlay (harness.overlay): its tensors replace the graph's initializers of the same names when
        # the session is created; the graph file is not touched. The OrtValues must outlive the session.
        self.overlay = None
        self._overlay_values: list = []
        if overlay is not None:
            from .overlay import fileformat

            self.overlay = fileformat.read(overlay, fileformat.graph_sha256(self.graph))
            fileformat.check_names(self.overlay, self.graph)
            for name, arr in self.overlay.tensors.items():
                value = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(arr))
                self._overlay_values.append(value)
                so.add_initializer(name, value)
        try:
            self.session = ort.InferenceSession(model_bytes if model_bytes is not None else str(self.graph), so,
                                                providers=[ortsession.PROVIDER])
        except Exception as exc:
            raise ArtifactError(f"{self.graph}: onnxruntime cannot load this graph: {exc}") from exc
        self.threads = threads
        self._bind(kv_heads, head_dim)

    KNOWN_INPUTS = ("input_ids", "attention_mask", "position_ids")
    KV_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16}

    def _bind(self, kv_heads: int | None, head_dim: int | None) -> None:
        """Read the graph's interface; anything it cannot feed is an error naming the graph and the input.

        Any decoder graph binds: ``input_ids``, ``attention_mask``, ``position_ids`` when it has one, and a
        cache ``past_key_values.N.key/value`` -> ``present.N.key/value`` of shape (batch, kv_heads,
        sequence, head_dim) in float32 or float16. Cache dims the graph declares symbolically come from
        the arguments, else from the ``config.json`` or ORT-GenAI ``genai_config.json`` beside the graph
        (or one directory up, the transformers.js layout); the config must agree with the graph."""
        from .sources.onnx import config_beside

        g = self.graph
        inputs = {i.name: i for i in self.session.get_inputs()}
        unknown = [n for n in inputs if n not in self.KNOWN_INPUTS and not _PAST.match(n)]
        if unknown:
            raise ArtifactError(f"{g}: cannot bind input(s) {', '.join(unknown)}: a decoder graph takes input_ids, "
                                f"attention_mask, optional position_ids and past_key_values.N.key/value")
        missing = [n for n in ("input_ids", "attention_mask") if n not in inputs]
        self.has_positions = "position_ids" in inputs
        past = sorted(((int(m[1]), m[2]), n) for n in inputs if (m := _PAST.match(n)))
        if missing or not past:
            raise ArtifactError(f"{g}: graph lacks the expected inputs "
                                f"{missing + ([] if past else ['past_key_values.N.key/value (a KV cache)'])} "
                                f"(it has: {', '.join(inputs)})")
        self.int_types = {}
        for n in self.KNOWN_INPUTS:
            if n in inputs:
                if inputs[n].type not in ("tensor(int64)", "tensor(int32)"):
                    raise ArtifactError(f"{g}: input {n} is {inputs[n].type}; expected int64 or int32")
                self.int_types[n] = np.int32 if inputs[n].type == "tensor(int32)" else np.int64
        self.past_names = [n for _, n in past]
        self.n_layers = len(self.past_names) // 2
        want = [f"past_key_values.{i}.{kv}" for i in range(self.n_layers) for kv in ("key", "value")]
        if self.past_names != want:
            raise ArtifactError(f"{g}: past_key_values inputs are not key/value pairs for layers 0..{self.n_layers - 1}")
        first = inputs[self.past_names[0]]
        if first.type not in self.KV_TYPES:
            raise ArtifactError(f"{g}: input {first.name} is {first.type}; the cache binds float or float16")
        self.kv_dtype = self.KV_TYPES[first.type]
        shape = list(first.shape)
        if len(shape) != 4:
            raise ArtifactError(f"{g}: input {first.name} has shape {shape}; expected (batch, kv_heads, sequence, "
                                f"head_dim)")
        try:
            config = config_beside(g)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ArtifactError(f"{g}: unreadable model config beside the graph: {exc}") from None
        self.config = config

        def dim(axis: int, given: int | None, key: str) -> int:
            declared = shape[axis] if isinstance(shape[axis], int) and shape[axis] > 0 else None
            from_config = config.get(key)
            value = given if given is not None else declared if declared is not None else from_config
            if value is None:
                raise ArtifactError(f"{g}: input {first.name} declares {key} symbolically ({shape[axis]!r}) and no "
                                    f"config.json or genai_config.json beside the graph gives it")
            if declared is not None and int(value) != declared:
                raise ArtifactError(f"{g}: input {first.name} has {key} {declared}, but {key} is given as {value}")
            if from_config and declared is not None and int(from_config) != declared:
                raise ArtifactError(f"{g}: input {first.name} has {key} {declared}; {config['file']} says {from_config}")
            return int(value)

        self.kv_heads = dim(1, kv_heads, "kv_heads")
        self.head_dim = dim(3, head_dim, "head_dim")
        if config.get("layers") and int(config["layers"]) != self.n_layers:
            raise ArtifactError(f"{g}: graph has past_key_values for {self.n_layers} layers; {config['file']} says "
                                f"{config['layers']}")
        self.output_names = ["logits"] + [n.replace("past_key_values", "present") for n in self.past_names]
        outputs = {o.name for o in self.session.get_outputs()}
        absent = [n for n in self.output_names if n not in outputs]
        if absent:
            raise ArtifactError(f"{g}: graph lacks the expected outputs {absent} (it has: {', '.join(sorted(outputs))})")

    def empty_past(self, batch: int) -> list[np.ndarray]:
        return [np.zeros((batch, self.kv_heads, 0, self.head_dim), dtype=self.kv_dtype) for _ in self.past_names]

    def forward(self, ids: np.ndarray, mask: np.ndarray, positions: np.ndarray, past: list[np.ndarray]):
        t = self.int_types
        feeds = {"input_ids": ids.astype(t["input_ids"]), "attention_mask": mask.astype(t["attention_mask"])}
        if self.has_positions:
            feeds["position_ids"] = positions.astype(t["position_ids"])
        feeds.update(zip(self.past_names, past))
        out = self.session.run(self.output_names, feeds)
        return out[0].astype(np.float32, copy=False), out[1:]

    def full(self, ids: list[int]) -> np.ndarray:
        """Logits of one unpadded sequence in a single call with an empty cache: (S, V)."""
        arr = np.asarray([ids], dtype=np.int64)
        n = arr.shape[1]
        logits, _ = self.forward(arr, np.ones((1, n), np.int64), np.arange(n, dtype=np.int64)[None], self.empty_past(1))
        return logits[0]

    def greedy_stream(self, prompt: list[int], steps: int) -> Iterator[tuple[int, np.ndarray]]:
        """Prefill then ``steps`` one-token calls, yielding each greedy id with the logits row it was taken
        from as soon as it is known (``steps + 1`` ids): the one greedy loop that :meth:`greedy` and the
        Python onnxruntime throughput lane (which stamps each id as it arrives) share."""
        ids = np.asarray([prompt], dtype=np.int64)
        n = ids.shape[1]
        logits, past = self.forward(ids, np.ones((1, n), np.int64), np.arange(n, dtype=np.int64)[None], self.empty_past(1))
        row = logits[0, -1]
        last = int(np.argmax(row))
        yield last, row
        for total in range(n + 1, n + steps + 1):
            token = np.asarray([[last]], dtype=np.int64)
            logits, past = self.forward(token, np.ones((1, total), np.int64), np.asarray([[total - 1]], np.int64), past)
            row = logits[0, -1]
            last = int(np.argmax(row))
            yield last, row

    def greedy(self, prompt: list[int], steps: int) -> tuple[list[int], np.ndarray]:
        """Prefill then ``steps`` one-token calls; returns generated ids and the logits at each decode point."""
        pairs = list(self.greedy_stream(prompt, steps))
        return [t for t, _ in pairs], np.stack([r for _, r in pairs])

    def greedy_padded(self, prompts: list[list[int]], steps: int) -> tuple[list[list[int]], np.ndarray]:
        """Left-padded batch: prefill with an attention mask, then one-token steps per row."""
        batch = len(prompts)
        width = max(len(p) for p in prompts)
        ids = np.zeros((batch, width), np.int64)
        mask = np.zeros((batch, width), np.int64)
        for b, p in enumerate(prompts):
            ids[b, width - len(p):] = p
            mask[b, width - len(p):] = 1
        positions = np.clip(np.cumsum(mask, axis=1) - 1, 0, None)
        logits, past = self.forward(ids, mask, positions, self.empty_past(batch))
        rows = [logits[:, -1]]
        generated = [[int(t)] for t in np.argmax(rows[-1], axis=-1)]
        next_pos = mask.sum(axis=1)
        for _ in range(steps):
            token = np.asarray([[g[-1]] for g in generated], np.int64)
            mask = np.concatenate([mask, np.ones((batch, 1), np.int64)], axis=1)
            logits, past = self.forward(token, mask, next_pos[:, None], past)
            next_pos = next_pos + 1
            rows.append(logits[:, -1])
            for b, t in enumerate(np.argmax(rows[-1], axis=-1)):
                generated[b].append(int(t))
        return generated, np.stack(rows, axis=1)  # (B, steps+1, V)
