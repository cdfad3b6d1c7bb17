"""Campaign files: the models, dtypes, policies, seeds and repeats a run measures, as versioned TOML."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import fields
from .domain import DTYPES, PEERS, SOURCES, TIERS, CorpusFile, ModelSpec
from .errors import CampaignError
from .fields import Where
from .hashing import sha256_bytes
from .workload import ThroughputPolicy

SCHEMA_VERSION = 1
SHARED_POLICIES = {"throughput": ThroughputPolicy}   # tables several gates read (the shared workload)

_TOP_KEYS = {"schema_version", "name", "description", "screening", "seed", "threads", "models", "corpus", "export", "policy",
             "expect", "overlay", "compare", "recipes",
             "search"}
_MODEL_KEYS = {"id", "tier", "source", "dtypes", "eval_context", "description", "browser"}   # + the source's own (harness/sources/)


@dataclass(frozen=True)
class Campaign:
    path: Path
    sha256: str
    name: str
    screening: bool
    seed: int
    threads: int
    models: tuple[ModelSpec, ...]
    corpus_package: str | None      # the Debian package the texts come from, when they do
    corpus_train: tuple[CorpusFile, ...]
    corpus_heldout: tuple[CorpusFile, ...]
    export: dict[str, Any]
    policy: dict[str, Any]          # gate name (or shared table) -> its parsed, typed policy
    expect: tuple[dict[str, str], ...] = ()
    overlay: Any = None             # harness.overlay.donor.OverlayConfig: the skill donors, or None
    compare: Any = None             # harness.compare.policy.ComparePolicy: how `bin/gatehouse compare` judges two runs
    recipes: tuple[Any, ...] = ()   # harness.recipes.Recipe: [[recipes]], each a variant of the models it names
    search: Any = None              # harness.search.SearchPolicy: [search], the early stop

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

    @property
    def workload(self) -> ThroughputPolicy:
        return self.policy["throughput"]


def _fail(path: Path, where: str, problem: str) -> CampaignError:
    return Where(path, where).fail(problem)


def _check_keys(path: Path, where: str, table: dict, allowed: set[str]) -> None:
    fields.table(Where(path, where), table, allowed)


def _int(path, where, value, minimum=None) -> int:
    return fields.integer(Where(path, where), value, minimum)


def _sha(path, where, value) -> str:
    return fields.sha256(Where(path, where), value)


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
    from . import sources

    where = f"models[{index}]"
    if not isinstance(table, dict):
        raise _fail(path, where, "expected a table")
    for key in ("id", "tier", "source", "dtypes"):
        if key not in table:
            raise _fail(path, where, f"missing required key {key!r}")
    model_id = table["id"]
    if not isinstance(model_id, str) or not model_id or not all(c.isalnum() or c in "-_." for c in model_id):
        raise _fail(path, f"{where}.id", f"expected a short name of letters, digits, '-', '_' or '.', got {model_id!r}")
    where = f"model {model_id!r}"
    if table["tier"] not in TIERS:
        raise _fail(path, f"{where}.tier", f"unknown tier {table['tier']!r} (known: {', '.join(TIERS)})")
    source = table["source"]
    if source not in SOURCES:
        raise _fail(path, f"{where}.source", f"unknown source {source!r} (known: {', '.join(SOURCES)})")
    _check_keys(path, where, table, _MODEL_KEYS | sources.KEYS[source])
    dtypes = _dtype_list(path, f"{where}.dtypes", table["dtypes"])
    found = sources.PARSERS[source](table, Where(path, where), path.parent)
    browser = table.get("browser")
    if browser is not None:   # checked against the model's dtypes and recipes once [[recipes]] are attached
        browser = fields.strings(Where(path, where).child("browser"), browser, None, nonempty=False)
    return ModelSpec(
        id=model_id, tier=table["tier"], source=source, dtypes=dtypes, browser=browser,
        eval_context=_int(path, f"{where}.eval_context", table.get("eval_context", 256), minimum=8),
        **found,
    )


def _corpus_files(path: Path, where: str, value: Any) -> tuple[CorpusFile, ...]:
    """Pinned text files; a relative path is taken from the campaign file's directory."""
    if not isinstance(value, list) or not value:
        raise _fail(path, where, "expected a non-empty list of {path, sha256} tables")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, dict) or set(item) != {"path", "sha256"}:
            raise _fail(path, f"{where}[{i}]", f"expected exactly the keys path and sha256, got {item!r}")
        if not isinstance(item["path"], str) or not item["path"]:
            raise _fail(path, f"{where}[{i}].path", f"expected a file path, got {item['path']!r}")
        file = Path(item["path"]).expanduser()
        file = file if file.is_absolute() else (path.parent / file).resolve()
        out.append(CorpusFile(file, _sha(path, f"{where}[{i}].sha256", item["sha256"])))
    return tuple(out)


_REFERS = {"model": "model id", "cell": "throughput cell ([policy.throughput].prompt_tokens)"}


def _resolve(path: Path, raw: Any, policy: dict[str, Any], models: tuple[ModelSpec, ...]) -> None:
    """Every name a written ``[policy.<gate>]`` table gives (``knob(refers=...)``: the models its verdicts are
    declared for, the cells it times) is one this campaign has, or the campaign is refused naming the field."""
    import dataclasses

    known = {"model": tuple(m.id for m in models), "cell": tuple(n for n, _ in policy["throughput"].prompt_tokens)}
    for name in (raw or {}):
        if not dataclasses.is_dataclass(policy.get(name)):
            continue
        for where, kind, ref in fields.references(policy[name], Where(path, f"policy.{name}")):
            if ref not in known[kind]:
                raise where.fail(f"names {_REFERS[kind]} {ref!r}, which this campaign does not have "
                                 f"(its {kind}s: {', '.join(known[kind])})")


def _shared_allowance(path: Path, allow: Any) -> int:
    """``[corpus] shared_lines = { max = N, why = "..." }``: the held-out lines a campaign accepts finding in its
    training files (license texts share boilerplate), with the reason; absent: none."""
    if allow is None:
        return 0
    where = Where(path, "corpus.shared_lines")
    fields.table(where, allow, {"max", "why"}, ("max", "why"))
    fields.text(where.child("why"), allow["why"].strip() if isinstance(allow["why"], str) else allow["why"])
    return fields.integer(where.child("max"), allow["max"], minimum=0)


def _corpus_overlap(path: Path, allow: Any, train: tuple[CorpusFile, ...], heldout: tuple[CorpusFile, ...]) -> None:
    """Held-out text is never trained on: a held-out file that is also a training file, or held-out lines
    (normalized, compared by SHA-256) found in the training files beyond the declared allowance, refuse the
    campaign naming both files.  Files that cannot be read are refused where they are read (``corpus.read``)."""
    from . import corpus as corpus_mod

    limit = _shared_allowance(path, allow)
    for j, h in enumerate(heldout):
        same = next((i for i, f in enumerate(train) if f.path == h.path or f.sha256 == h.sha256), None)
        if same is not None:
            raise _fail(path, f"corpus.heldout[{j}]", f"{h.path} is also corpus.train[{same}] ({train[same].path}): "
                                                      f"held-out text must never be trained on")
    try:
        texts = {f.path: f.path.read_text(encoding="utf-8") for f in (*train, *heldout)}
    except (OSError, UnicodeDecodeError):
        return
    for j, h in enumerate(heldout):
        n, shared, per = corpus_mod.shared_lines({f.path.name: texts[f.path] for f in train}, texts[h.path])
        if shared > limit:
            files = ", ".join(f"{name} {k}" for name, k in sorted(per.items(), key=lambda kv: -kv[1]))
            raise _fail(path, f"corpus.heldout[{j}]",
                        f"{h.path} shares {shared} of its {n} compared lines with corpus.train ({files}; lines of "
                        f"{corpus_mod.MIN_LINE_CHARS}+ characters, normalized, compared by SHA-256), more than "
                        f"corpus.shared_lines.max = {limit}: held-out text must never be trained on (remove the "
                        f"shared text, or declare what is accepted: shared_lines = {{ max = {shared}, why = \"...\" }})")


def _policy(path: Path, policy: Any) -> dict[str, Any]:
    """Every policy table parsed by its gate's declared policy class (the shared workload by its own)."""
    from . import gates

    where = Where(path, "policy")
    parsers = {**{name: spec.policy for name, spec in gates.GATES.items()}, **SHARED_POLICIES}
    fields.table(where, policy, parsers)
    return {name: parser.parse(policy.get(name), where.child(name)) for name, parser in parsers.items()}


def _recipes(path: Path, raw: Any, models: tuple[ModelSpec, ...]) -> tuple[tuple[Any, ...], tuple[ModelSpec, ...]]:
    """``[[recipes]]`` parsed (harness.recipes) and attached to each model they name (every model with weights
    when they name none); a recipe naming a model Gatehouse cannot load in PyTorch is refused."""
    from dataclasses import replace

    from . import recipes as recipe_mod

    where = Where(path, "recipes")
    reserved = DTYPES + tuple(sorted({p.label(m) for m in models for p in PEERS.values()} - {None}))
    found = recipe_mod.parse(raw, where, tuple(m.id for m in models), reserved)
    out = []
    for m in models:
        mine = []
        for r in found:
            if r.models is None and m.has_weights or r.models is not None and m.id in r.models:
                if not m.has_weights:
                    raise where.child(r.id).child("models").fail(
                        f"model {m.id!r} is an onnx export without Hugging Face weights beside it: a recipe "
                        f"quantizes the weights (name them with hf = \"...\" in its [[models]] table)")
                mine.append(r)
        for label in m.browser or ():
            if label not in m.dtypes and label not in {r.id for r in mine}:
                raise Where(path, f"model {m.id!r}").child("browser").fail(
                    f"{label!r} is not a variant of this model (its dtypes and recipes: "
                    f"{', '.join([*m.dtypes, *(r.id for r in mine)])})")
        out.append(replace(m, recipes=tuple(mine)))
    return found, tuple(out)


def _search(path: Path, raw: dict) -> Any:
    from .search import SearchPolicy

    return SearchPolicy.parse(raw.get("search"), Where(path, "search"))


def _compare(path: Path, raw: dict) -> Any:
    """The optional ``[compare]`` table (alpha, min_samples, fail_on) as a ComparePolicy; absent: the defaults."""
    from .compare.policy import ComparePolicy

    return ComparePolicy.parse(raw.get("compare"), Where(path, "compare"))


def compare_policy(path: Path | str) -> Any:
    """Only the ``[compare]`` table of a campaign file, for ``bin/gatehouse compare``: the two run directories
    may have been copied away from the models and corpus the rest of the campaign names, which a full
    :func:`load` checks; the table itself is checked exactly as :func:`load` checks it."""
    path = Path(path).resolve()
    try:
        raw = tomllib.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise CampaignError(f"{path}: cannot read campaign file: {exc.strerror or exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise CampaignError(f"{path}: malformed TOML: {exc}") from exc
    return _compare(path, raw)


def _export(path: Path, raw: dict) -> dict:
    """The ``[export]`` table: known keys, allowed choices, parameters the exporter accepts."""
    export = raw.get("export", {})
    if not isinstance(export, dict):
        raise _fail(path, "export", "expected a table")
    _check_keys(path, "export", export, {"opset", "q4_block_size", "q4_accuracy_level", "q4_symmetric", "q8_per_channel",
                                         "q4_method", "q4_head", "graph", "q8_accuracy_level",
                                         "q4_head_accuracy_level", "bias_correction"})
    from .export.params import EXPORT_DEFAULTS, GRAPHS, Q4_HEADS, Q4_METHODS, check_params
    for key, allowed in (("q4_method", Q4_METHODS), ("q4_head", Q4_HEADS), ("graph", GRAPHS)):
        if key in export and export[key] not in allowed:
            raise _fail(path, f"export.{key}", f"expected one of {', '.join(allowed)}, got {export[key]!r}")
    try:
        check_params({**EXPORT_DEFAULTS, **export})
    except ValueError as e:
        raise _fail(path, "export", str(e)) from None
    return export


def _expect(path: Path, raw: dict, recipes, models, ids: list[str]) -> list:
    """The ``[[expect]]`` tables: each names a registered gate, a known model (of ``ids``) and dtype, and a reason."""
    expect = raw.get("expect", [])
    if not isinstance(expect, list):
        raise _fail(path, "expect", "expected a list of [[expect]] tables")
    for i, e in enumerate(expect):
        if not isinstance(e, dict):
            raise _fail(path, f"expect[{i}]", "expected a table")
        _check_keys(path, f"expect[{i}]", e, {"gate", "model", "dtype", "reason"})
        if not isinstance(e.get("gate"), str) or not isinstance(e.get("reason"), str) or not e["reason"].strip():
            raise _fail(path, f"expect[{i}]", "needs a gate and a non-empty reason")
        from . import gates

        if e["gate"] not in gates.GATES:
            raise _fail(path, f"expect[{i}].gate", f"unknown gate {e['gate']!r} (known: {', '.join(gates.GATES)})")
        labels = DTYPES + tuple(r.id for r in recipes) + tuple(sorted({p.label(m) for m in models
                                                                      for p in PEERS.values()} - {None}))
        if "dtype" in e and e["dtype"] not in labels:
            raise _fail(path, f"expect[{i}].dtype", f"unknown dtype {e['dtype']!r} (known: {', '.join(labels)})")
        if "model" in e and e["model"] not in ids:
            raise _fail(path, f"expect[{i}].model", f"unknown model id {e['model']!r}")
    return expect


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
    recipes, models = _recipes(path, raw.get("recipes"), models)
    corpus = raw.get("corpus")
    if not isinstance(corpus, dict):
        raise _fail(path, "corpus", "missing table")
    _check_keys(path, "corpus", corpus, {"package", "train", "heldout", "description", "shared_lines"})
    if not isinstance(corpus.get("package", ""), str):   # optional: the Debian package the texts come from
        raise _fail(path, "corpus.package", f"expected a package name, got {corpus['package']!r}")
    train = _corpus_files(path, "corpus.train", corpus.get("train"))
    heldout = _corpus_files(path, "corpus.heldout", corpus.get("heldout"))
    _corpus_overlap(path, corpus.get("shared_lines"), train, heldout)
    export = _export(path, raw)
    expect = _expect(path, raw, recipes, models, ids)
    policy = _policy(path, raw.get("policy", {}))
    _resolve(path, raw.get("policy"), policy, models)
    overlay = None
    if "overlay" in raw:
        from .fields import Where
        from .overlay.donor import parse_overlay_table

        overlay = parse_overlay_table(raw["overlay"], Where(path, "overlay"), path.parent, {m.id: m for m in models})
    return Campaign(
        expect=tuple(expect), overlay=overlay, compare=_compare(path, raw), recipes=recipes,
        search=_search(path, raw),
        path=path, sha256=sha256_bytes(data), name=name, screening=screening,
        seed=_int(path, "seed", raw.get("seed", 0), minimum=0),
        threads=_int(path, "threads", raw.get("threads", 2), minimum=1),
        models=models, corpus_package=corpus.get("package") or None,
        corpus_train=train, corpus_heldout=heldout,
        export=dict(export), policy=policy,
    )
