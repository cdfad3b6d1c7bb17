"""Campaign files: the models, dtypes, policies, seeds and repeats a run measures, as versioned TOML."""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import CampaignError
from .hashing import sha256_bytes

SCHEMA_VERSION = 1
DTYPES = ("fp32", "q8", "q4")
TIERS = ("ci", "benchmark")
SOURCES = ("gguf", "train")
PEER_GENAI = "ort-genai-int4"   # ORT-GenAI's int4 build, gated beside the variants (harness.session re-exports it)
GRAPH_FILES = {"fp32": "onnx/model.onnx", "q8": "onnx/model_quantized.onnx", "q4": "onnx/model_q4.onnx"}

_TOP_KEYS = {"schema_version", "name", "description", "screening", "seed", "threads", "models", "corpus", "export", "policy",
             "expect"}
_MODEL_KEYS = {"id", "tier", "source", "dtypes", "package", "file", "sha256", "train", "screening_only", "eval_context", "description"}
_POLICY_KEYS = {"cache", "quantization", "behavior", "throughput", "streaming", "winrule"}


@dataclass(frozen=True)
class CorpusFile:
    path: Path
    sha256: str


@dataclass(frozen=True)
class ModelSpec:
    id: str
    tier: str
    source: str
    dtypes: tuple[str, ...]
    package: str | None = None
    file: str | None = None
    sha256: str | None = None
    train: dict[str, Any] = field(default_factory=dict)
    screening_only: bool = False
    eval_context: int = 256


@dataclass(frozen=True)
class Campaign:
    path: Path
    sha256: str
    name: str
    screening: bool
    seed: int
    threads: int
    models: tuple[ModelSpec, ...]
    corpus_package: str
    corpus_train: tuple[CorpusFile, ...]
    corpus_heldout: tuple[CorpusFile, ...]
    export: dict[str, Any]
    policy: dict[str, Any]
    raw: dict[str, Any]
    expect: tuple[dict[str, str], ...] = ()

    def model(self, model_id: str) -> ModelSpec:
        for m in self.models:
            if m.id == model_id:
                return m
        known = ", ".join(m.id for m in self.models)
        raise CampaignError(f"{self.path}: unknown model id {model_id!r} (campaign has: {known})")

    def variants(self, dtypes: tuple[str, ...] = DTYPES) -> list[tuple[ModelSpec, str]]:
        return [(m, d) for m in self.models for d in m.dtypes if d in dtypes]

    def expected_failure(self, gate: str, model_id: str, dtype: str) -> str | None:
        """The campaign's recorded reason when a gate is known to fail on this variant, else None."""
        for e in self.expect:
            if e["gate"] == gate and e.get("dtype", dtype) == dtype and e.get("model", model_id) == model_id:
                return e["reason"]
        return None

    def tolerance(self, dtype: str) -> dict[str, float]:
        return self.policy["cache"]["tolerance"][dtype]


def _fail(path: Path, where: str, problem: str) -> CampaignError:
    return CampaignError(f"{path}: {where}: {problem}")


def _check_keys(path: Path, where: str, table: dict, allowed: set[str]) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise _fail(path, where, f"unknown key(s) {', '.join(unknown)} (allowed: {', '.join(sorted(allowed))})")


def _int(path, where, value, minimum=None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(path, where, f"expected an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise _fail(path, where, f"must be >= {minimum}, got {value}")
    return value


def _number(path, where, value, minimum=0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _fail(path, where, f"expected a finite number, got {value!r}")
    if value < minimum:
        raise _fail(path, where, f"must be >= {minimum}, got {value}")
    return float(value)


def _sha(path, where, value) -> str:
    if not isinstance(value, str) or len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise _fail(path, where, f"expected a lowercase hex SHA-256, got {value!r}")
    return value


def _dtype_list(path, where, value) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise _fail(path, where, f"expected a non-empty list of dtypes, got {value!r}")
    for d in value:
        if d not in DTYPES:
            raise _fail(path, where, f"unknown dtype {d!r} (known: {', '.join(DTYPES)})")
    if len(set(value)) != len(value):
        raise _fail(path, where, f"duplicated dtype in {value!r}")
    return tuple(value)


def _model(path: Path, index: int, table: Any) -> ModelSpec:
    where = f"models[{index}]"
    if not isinstance(table, dict):
        raise _fail(path, where, "expected a table")
    _check_keys(path, where, table, _MODEL_KEYS)
    for key in ("id", "tier", "source", "dtypes"):
        if key not in table:
            raise _fail(path, where, f"missing required key {key!r}")
    model_id = table["id"]
    if not isinstance(model_id, str) or not model_id or not all(c.isalnum() or c in "-_." for c in model_id):
        raise _fail(path, f"{where}.id", f"expected a short name of letters, digits, '-', '_' or '.', got {model_id!r}")
    where = f"model {model_id!r}"
    if table["tier"] not in TIERS:
        raise _fail(path, f"{where}.tier", f"unknown tier {table['tier']!r} (known: {', '.join(TIERS)})")
    if table["source"] not in SOURCES:
        raise _fail(path, f"{where}.source", f"unknown source {table['source']!r} (known: {', '.join(SOURCES)})")
    if table["source"] == "gguf":
        for key in ("package", "file", "sha256"):
            if not isinstance(table.get(key), str):
                raise _fail(path, where, f"a gguf model needs a string {key!r}")
        _sha(path, f"{where}.sha256", table["sha256"])
    if table["source"] == "train" and not isinstance(table.get("train"), dict):
        raise _fail(path, where, "a trained model needs a [models.train] table")
    return ModelSpec(
        id=model_id, tier=table["tier"], source=table["source"],
        dtypes=_dtype_list(path, f"{where}.dtypes", table["dtypes"]),
        package=table.get("package"), file=table.get("file"), sha256=table.get("sha256"),
        train=dict(table.get("train", {})), screening_only=bool(table.get("screening_only", False)),
        eval_context=_int(path, f"{where}.eval_context", table.get("eval_context", 256), minimum=8),
    )


def _corpus_files(path: Path, where: str, value: Any) -> tuple[CorpusFile, ...]:
    if not isinstance(value, list) or not value:
        raise _fail(path, where, "expected a non-empty list of {path, sha256} tables")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, dict) or set(item) != {"path", "sha256"}:
            raise _fail(path, f"{where}[{i}]", f"expected exactly the keys path and sha256, got {item!r}")
        out.append(CorpusFile(Path(item["path"]), _sha(path, f"{where}[{i}].sha256", item["sha256"])))
    return tuple(out)


def _policy(path: Path, policy: Any) -> dict[str, Any]:
    if not isinstance(policy, dict):
        raise _fail(path, "policy", "expected a table")
    _check_keys(path, "policy", policy, _POLICY_KEYS)
    cache = policy.get("cache")
    if not isinstance(cache, dict):
        raise _fail(path, "policy.cache", "missing table")
    _int(path, "policy.cache.steps", cache.get("steps"), minimum=1)
    lengths = cache.get("prompt_lengths")
    if not isinstance(lengths, list) or 1 not in lengths:
        raise _fail(path, "policy.cache.prompt_lengths", f"expected a list of integers that includes 1, got {lengths!r}")
    for i, n in enumerate(lengths):
        _int(path, f"policy.cache.prompt_lengths[{i}]", n, minimum=1)
    tol = cache.get("tolerance")
    if not isinstance(tol, dict):
        raise _fail(path, "policy.cache.tolerance", "missing table")
    for dtype, entry in tol.items():
        if dtype not in DTYPES:
            raise _fail(path, f"policy.cache.tolerance.{dtype}", f"unknown dtype {dtype!r} (known: {', '.join(DTYPES)})")
        if not isinstance(entry, dict):
            raise _fail(path, f"policy.cache.tolerance.{dtype}", "expected a table")
        _check_keys(path, f"policy.cache.tolerance.{dtype}", entry, {"atol", "rtol", "reference_atol", "reference_rtol", "min_greedy_agreement"})
        for key, value in entry.items():
            _number(path, f"policy.cache.tolerance.{dtype}.{key}", value)
    quant = policy.get("quantization")
    if not isinstance(quant, dict):
        raise _fail(path, "policy.quantization", "missing table")
    _int(path, "policy.quantization.max_tokens", quant.get("max_tokens"), minimum=100)
    limits = quant.get("max_relative_increase")
    if not isinstance(limits, dict):
        raise _fail(path, "policy.quantization.max_relative_increase", "missing table")
    for dtype, value in limits.items():
        if dtype not in ("q8", "q4"):
            raise _fail(path, f"policy.quantization.max_relative_increase.{dtype}", "only q8 and q4 are quantized dtypes")
        _number(path, f"policy.quantization.max_relative_increase.{dtype}", value)
    behavior = policy.get("behavior")
    if behavior is not None:
        _behavior_policy(path, behavior)
    return policy


_BEHAVIOR_KEYS = {"suite", "agreement_tokens", "margin", "margins", "minimum", "maximum", "sampling", "modes", "published"}
_METRIC = __import__("re").compile(r"^(greedy|sampled)\.[a-z_]+$")


def _behavior_policy(path: Path, b: Any) -> None:
    where = "policy.behavior"
    if not isinstance(b, dict):
        raise _fail(path, where, "expected a table")
    _check_keys(path, where, b, _BEHAVIOR_KEYS)
    _int(path, f"{where}.agreement_tokens", b.get("agreement_tokens"), minimum=1)
    margins = {"margin": b.get("margin"), **{f"margins.{k}": v for k, v in (b.get("margins") or {}).items()}}
    for key, m in margins.items():
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not math.isfinite(m) or not 0 <= m <= 1:
            raise _fail(path, f"{where}.{key}", f"expected a number in [0, 1], got {m!r}")
    for direction in ("minimum", "maximum"):
        names = b.get(direction, [])
        if not isinstance(names, list) or not all(isinstance(n, str) and _METRIC.match(n) for n in names):
            raise _fail(path, f"{where}.{direction}", f"expected a list of metric names like 'greedy.format', got {names!r}")
    if not b.get("minimum") and not b.get("maximum"):
        raise _fail(path, where, "names no metric in minimum or maximum")
    sampling = b.get("sampling", {})
    _check_keys(path, f"{where}.sampling", sampling, {"seed", "temperature", "top_k", "top_p"})


def load(path: Path | str) -> Campaign:
    """Read and validate a campaign; every problem names the file and the field."""
    path = Path(path).resolve()
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CampaignError(f"{path}: cannot read campaign file: {exc.strerror or exc}") from exc
    try:
        raw = tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise CampaignError(f"{path}: malformed TOML: {exc}") from exc
    _check_keys(path, "top level", raw, _TOP_KEYS)
    version = raw.get("schema_version")
    if version != SCHEMA_VERSION:
        raise _fail(path, "schema_version", f"expected {SCHEMA_VERSION}, got {version!r}")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise _fail(path, "name", f"expected a non-empty string, got {name!r}")
    screening = raw.get("screening")
    if not isinstance(screening, bool):
        raise _fail(path, "screening", f"expected true or false, got {screening!r}")
    models_raw = raw.get("models")
    if not isinstance(models_raw, list) or not models_raw:
        raise _fail(path, "models", "expected at least one [[models]] table")
    models = tuple(_model(path, i, t) for i, t in enumerate(models_raw))
    ids = [m.id for m in models]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise _fail(path, "models", f"duplicated model id(s) {', '.join(dupes)}")
    corpus = raw.get("corpus")
    if not isinstance(corpus, dict):
        raise _fail(path, "corpus", "missing table")
    _check_keys(path, "corpus", corpus, {"package", "train", "heldout", "description"})
    if not isinstance(corpus.get("package"), str):
        raise _fail(path, "corpus.package", "expected the name of the package the texts come from")
    export = raw.get("export", {})
    if not isinstance(export, dict):
        raise _fail(path, "export", "expected a table")
    _check_keys(path, "export", export, {"opset", "q4_block_size", "q4_accuracy_level", "q4_symmetric", "q8_per_channel",
                                         "q4_method", "q4_head", "graph", "q8_accuracy_level",
                                         "q4_head_accuracy_level", "bias_correction"})
    from .export.onnx_export import EXPORT_DEFAULTS, GRAPHS, Q4_HEADS, Q4_METHODS, check_params
    for key, allowed in (("q4_method", Q4_METHODS), ("q4_head", Q4_HEADS), ("graph", GRAPHS)):
        if key in export and export[key] not in allowed:
            raise _fail(path, f"export.{key}", f"expected one of {', '.join(allowed)}, got {export[key]!r}")
    try:
        check_params({**EXPORT_DEFAULTS, **export})
    except ValueError as e:
        raise _fail(path, "export", str(e)) from None
    expect = raw.get("expect", [])
    if not isinstance(expect, list):
        raise _fail(path, "expect", "expected a list of [[expect]] tables")
    for i, e in enumerate(expect):
        if not isinstance(e, dict):
            raise _fail(path, f"expect[{i}]", "expected a table")
        _check_keys(path, f"expect[{i}]", e, {"gate", "model", "dtype", "reason"})
        if not isinstance(e.get("gate"), str) or not isinstance(e.get("reason"), str) or not e["reason"].strip():
            raise _fail(path, f"expect[{i}]", "needs a gate and a non-empty reason")
        if "dtype" in e and e["dtype"] not in DTYPES + (PEER_GENAI,):
            raise _fail(path, f"expect[{i}].dtype",
                        f"unknown dtype {e['dtype']!r} (known: {', '.join(DTYPES + (PEER_GENAI,))})")
        if "model" in e and e["model"] not in ids:
            raise _fail(path, f"expect[{i}].model", f"unknown model id {e['model']!r}")
    return Campaign(
        expect=tuple(expect),
        path=path, sha256=sha256_bytes(data), name=name, screening=screening,
        seed=_int(path, "seed", raw.get("seed", 0), minimum=0),
        threads=_int(path, "threads", raw.get("threads", 2), minimum=1),
        models=models, corpus_package=corpus["package"],
        corpus_train=_corpus_files(path, "corpus.train", corpus.get("train")),
        corpus_heldout=_corpus_files(path, "corpus.heldout", corpus.get("heldout")),
        export=dict(export), policy=_policy(path, raw.get("policy")), raw=raw,
    )
