"""Donors that nobody downloads: what a campaign declares of them, and the domain text they learn.

A skill overlay replaces chosen tensors of a backbone with a donor's. The donor is trained from the
backbone itself (:mod:`.donor_training`): every tensor frozen except the chosen families (``ffn``, ``attn``,
``all``) in the chosen layers (``all``, ``A-B``, ``i,j``), on the domain corpus. The domain corpus is real
text from a pinned registry package (the campaign's ``[overlay]`` table, :func:`parse_overlay_table`),
never the campaign's held-out text. A donor fine-tuned elsewhere is read from disk instead (``path`` and
``sha256``, :mod:`.donor_disk`), checked against its backbone as the campaign loads.

Everything here is pure parsing and reading and imports nothing heavy.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Collection, Iterable, Mapping, Sequence

from ..corpus import read
from ..domain import CorpusFile
from ..fields import Where, integer, number, sha256, table, text
from ..packages import installed_file

FFN = ("mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")
ATTN = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight")
FAMILIES: dict[str, tuple[str, ...]] = {"ffn": FFN, "attn": ATTN, "all": FFN + ATTN}

# "domain": learn the domain text. "damage": learn a fixed permutation of its tokens, which teaches the
# chosen tensors that context does not matter (a donor built to hurt general text, for the refusal tests).
OBJECTIVES = ("domain", "damage")
QUANTIZED = ("q4",)   # "q4": trained through the q4 graph's 4-bit lattice (harness/overlay/qat.py)


# -- families and layers ---------------------------------------------------------------------------
def parse_family(value: Any, where: Where) -> str:
    """One tensor family name (``ffn``, ``attn`` or ``all``)."""
    if not isinstance(value, str) or value not in FAMILIES:
        raise where.fail(f"unknown tensor family {value!r} (known: {', '.join(FAMILIES)})")
    return value


def _layer_index(part: str, spec: str, where: Where) -> int:
    part = part.strip()
    if not part.isdigit():   # digits only: no sign, no blank, no "1.5"
        raise where.fail(f"malformed layers {spec!r}: {part!r} is not a layer index "
                         f"(write \"all\", \"A-B\" or \"i,j\")")
    return int(part)


def _layer_syntax(spec: Any, where: Where) -> tuple[str, tuple[int, ...]]:
    """``("all", ())``, ``("range", (a, b))`` or ``("list", (i, j, ...))``, before any layer count is known."""
    if not isinstance(spec, str) or not spec.strip():
        raise where.fail(f"expected layers as \"all\", \"A-B\" or \"i,j\", got {spec!r}")
    spec = spec.strip()
    if spec == "all":
        return "all", ()
    if "-" in spec:
        if "," in spec or spec.count("-") != 1:
            raise where.fail(f"malformed layers {spec!r} (write \"all\", \"A-B\" or \"i,j\")")
        a, b = (_layer_index(p, spec, where) for p in spec.split("-"))
        if a > b:
            raise where.fail(f"layers {spec!r}: the range is reversed ({a} > {b})")
        return "range", (a, b)
    out = tuple(_layer_index(p, spec, where) for p in spec.split(","))
    dupes = sorted({i for i in out if out.count(i) > 1})
    if dupes:
        raise where.fail(f"layers {spec!r}: layer {dupes[0]} is named twice")
    return "list", out


def check_layers(spec: Any, where: Where) -> str:
    """The syntax of a layer spec, checked before the model's layer count is known (at campaign load)."""
    _layer_syntax(spec, where)
    return spec.strip()


def parse_layers(spec: Any, num_layers: int, where: Where) -> tuple[int, ...]:
    """``all``, ``A-B`` (inclusive) or ``i,j,...`` as ascending layer indices, each below ``num_layers``."""
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
        raise where.fail(f"the model has no layers to choose from (num_layers={num_layers!r})")
    kind, values = _layer_syntax(spec, where)
    if kind == "all":
        return tuple(range(num_layers))
    layers = tuple(range(values[0], values[1] + 1)) if kind == "range" else tuple(sorted(values))
    bad = [i for i in layers if i >= num_layers]
    if bad:
        raise where.fail(f"layers {spec.strip()!r}: layer {bad[0]} is out of range "
                         f"(the model has {num_layers} layers, 0-{num_layers - 1})")
    return layers


def tensor_names(families: str | Iterable[str], layers: Iterable[int]) -> list[str]:
    """The Hugging Face state-dict names of the chosen families in the chosen layers, layer by layer."""
    families = (families,) if isinstance(families, str) else tuple(families)
    suffixes: list[str] = []
    for family in families:
        if family not in FAMILIES:
            raise ValueError(f"unknown tensor family {family!r} (known: {', '.join(FAMILIES)})")
        suffixes += [s for s in FAMILIES[family] if s not in suffixes]
    return [f"model.layers.{i}.{s}" for i in layers for s in suffixes]


# -- the [overlay] table -----------------------------------------------------------------------------
@dataclass(frozen=True)
class DomainFile:
    """One pinned domain text: a file a registry distribution ships (``file``, its path inside the
    distribution) or a file on disk (``path``)."""
    sha256: str
    file: str | None = None      # e.g. "torch/_torch_docs.py", inside the distribution ``package``
    path: Path | None = None     # absolute, or resolved from the campaign's directory


@dataclass(frozen=True)
class DonorSpec:
    id: str
    model: str
    objective: str
    families: str
    layers: str                  # syntax checked at load; resolved against the model's layer count later
    steps: int
    lr: float
    seq_len: int
    batch_size: int
    replay_rows: int = 0         # rows of each batch from the campaign's [corpus].train text (never held-out)
    quantized: str | None = None  # None: trained in fp32; "q4": through the q4 lattice (straight-through)
    # a donor from disk (:mod:`.donor_disk`): its directory or .safetensors file and the SHA-256 of its weights
    # file; the training fields above then keep their defaults, unused
    path: Path | None = None
    sha256: str | None = None

    @property
    def from_disk(self) -> bool:
        return self.path is not None


@dataclass(frozen=True)
class OverlayConfig:
    domain_package: str | None   # the registry distribution ``file`` entries come from
    domain_train: tuple[DomainFile, ...]
    domain_heldout: tuple[DomainFile, ...]
    donors: tuple[DonorSpec, ...]

    def donors_of(self, model_id: str) -> tuple[DonorSpec, ...]:
        return tuple(d for d in self.donors if d.model == model_id)


_OVERLAY_KEYS = {"description", "domain_package", "domain_train", "domain_heldout", "donors"}
_DONOR_KEYS = {"id", "model", "objective", "families", "layers", "steps", "lr", "seq_len", "batch_size",
               "replay_rows", "quantized", "description", "path", "sha256"}
_DISK_KEYS = {"id", "model", "families", "layers", "description", "path", "sha256"}   # the rest train a donor here
DONOR_DEFAULTS = {"objective": "domain", "families": "ffn", "layers": "all", "steps": 100, "lr": 1e-3,
                  "seq_len": 128, "batch_size": 8, "replay_rows": 0}


def _domain_files(value: Any, where: Where, base: Path, package: str | None) -> tuple[DomainFile, ...]:
    if not isinstance(value, list) or not value:
        raise where.fail("expected a non-empty list of { file = ..., sha256 = ... } or { path = ..., sha256 = ... }")
    out = []
    for i, item in enumerate(value):
        w = where.child(i)
        table(w, item, allowed={"file", "path", "sha256"}, required=("sha256",))
        if ("file" in item) == ("path" in item):
            raise w.fail(f"expected exactly one of file (inside domain_package) or path (on disk), got {item!r}")
        pin = sha256(w.child("sha256"), item["sha256"])
        if "file" in item:
            if package is None:
                raise w.child("file").fail(f"{item['file']!r} names a file inside a package, "
                                           f"but [overlay] has no domain_package")
            out.append(DomainFile(pin, file=text(w.child("file"), item["file"])))
        else:
            p = Path(text(w.child("path"), item["path"])).expanduser()
            out.append(DomainFile(pin, path=p if p.is_absolute() else (base / p).resolve()))
    return tuple(out)


def _disk_donor(d: dict, w: Where, base: Path, donor_id: str, model: str, spec: Any) -> DonorSpec:
    """A ``[[overlay.donors]]`` entry with ``path``: no training key, a SHA-256 pin, and every check
    :func:`.donor_disk.check_at_load` can make before the backbone is built (``spec``: its ModelSpec, or None)."""
    from . import donor_disk

    training = sorted(set(d) - _DISK_KEYS)
    if training:
        raise w.child(training[0]).fail(
            f"donor {donor_id!r} is read from path; {training[0]} trains a donor here and cannot be given with path "
            f"(training keys: {', '.join(sorted(_DONOR_KEYS - _DISK_KEYS))})")
    if "path" not in d:
        raise w.child("sha256").fail(f"donor {donor_id!r} is trained here; sha256 pins a donor from path")
    if "sha256" not in d:
        raise w.fail(f"donor {donor_id!r}: a donor from path needs sha256 = \"<the SHA-256 of its weights file>\"")
    p = Path(text(w.child("path"), d["path"])).expanduser()
    path = p if p.is_absolute() else (base / p).resolve()
    pin = sha256(w.child("sha256"), d["sha256"])
    families = parse_family(d.get("families", DONOR_DEFAULTS["families"]), w.child("families"))
    layers = check_layers(d.get("layers", DONOR_DEFAULTS["layers"]), w.child("layers"))

    def select(num_layers: int) -> tuple[list[str], str]:
        chosen = parse_layers(layers, num_layers, w.child("layers"))
        return tensor_names(families, chosen), f"families {families!r} layers {layers!r}"

    donor_disk.check_at_load(path, pin, donor_id, w, spec, select)
    defaults = {k: v for k, v in DONOR_DEFAULTS.items() if k not in ("families", "layers")}
    return DonorSpec(id=donor_id, model=model, families=families, layers=layers, path=path, sha256=pin, **defaults)


def parse_overlay_table(raw: Any, where: Where, base: Path,
                        model_ids: Collection[str] | Mapping[str, Any] = ()) -> OverlayConfig:
    """The campaign's ``[overlay]`` table: the pinned domain texts (train and held-out, disjoint) and the
    donors to train or read from disk. Layer ranges are checked for syntax here, against each model's layer
    count when the donor is built. ``model_ids`` (when given) are the campaign's models a donor may name; a
    mapping of id to :class:`~harness.domain.ModelSpec` also lets a donor from disk be checked against its
    backbone's architecture (and its weights, when they are on disk) as the campaign loads."""
    table(where, raw, allowed=_OVERLAY_KEYS, required=("domain_train", "domain_heldout"))
    package = raw.get("domain_package")
    if package is not None:
        package = text(where.child("domain_package"), package)
    train = _domain_files(raw["domain_train"], where.child("domain_train"), base, package)
    heldout = _domain_files(raw["domain_heldout"], where.child("domain_heldout"), base, package)
    shared = sorted({f.sha256 for f in train} & {f.sha256 for f in heldout})
    if shared:
        raise where.child("domain_heldout").fail(f"the file with SHA-256 {shared[0]} is also in domain_train: "
                                                 f"held-out domain text must never be trained on")
    donors_raw = raw.get("donors", [])
    if not isinstance(donors_raw, list):
        raise where.child("donors").fail(f"expected a list of [[overlay.donors]] tables, got {donors_raw!r}")
    donors = []
    for i, d in enumerate(donors_raw):
        w = where.child("donors").child(i)
        table(w, d, allowed=_DONOR_KEYS, required=("id", "model"))
        d = {**DONOR_DEFAULTS, **d}
        donor_id = text(w.child("id"), d["id"])
        if not all(c.isalnum() or c in "-_." for c in donor_id):
            raise w.child("id").fail(f"expected letters, digits, '-', '_' or '.', got {donor_id!r}")
        model = text(w.child("model"), d["model"])
        if model_ids and model not in model_ids:
            raise w.child("model").fail(f"unknown model id {model!r} (known: {', '.join(model_ids)})")
        if "path" in donors_raw[i] or "sha256" in donors_raw[i]:
            spec = model_ids.get(model) if isinstance(model_ids, Mapping) else None
            donors.append(_disk_donor(donors_raw[i], w, base, donor_id, model, spec))
            continue
        donors.append(DonorSpec(
            id=donor_id, model=model, objective=text(w.child("objective"), d["objective"], OBJECTIVES),
            families=parse_family(d["families"], w.child("families")),
            layers=check_layers(d["layers"], w.child("layers")),
            steps=integer(w.child("steps"), d["steps"], minimum=1),
            lr=number(w.child("lr"), d["lr"], minimum=1e-8, maximum=1.0),
            seq_len=integer(w.child("seq_len"), d["seq_len"], minimum=8),
            batch_size=integer(w.child("batch_size"), d["batch_size"], minimum=1),
            replay_rows=integer(w.child("replay_rows"), d["replay_rows"], minimum=0),
            quantized=None if d.get("quantized") is None else text(w.child("quantized"), d["quantized"], QUANTIZED),
        ))
        if donors[-1].replay_rows >= donors[-1].batch_size:
            raise w.child("replay_rows").fail(f"must be below batch_size {donors[-1].batch_size} (some rows must be "
                                              f"domain text), got {donors[-1].replay_rows}")
    keys = [(d.model, d.id) for d in donors]
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise where.child("donors").fail(f"donor {dupes[0][1]!r} of model {dupes[0][0]!r} is declared twice")
    return OverlayConfig(package, train, heldout, tuple(donors))


# -- reading the domain text -------------------------------------------------------------------------
def locate(package: str, file: str) -> Path:
    """A file an installed distribution ships, by its path inside the distribution (as its RECORD lists it)."""
    return installed_file(package, file, what="domain")


def domain_path(f: DomainFile, package: str | None) -> Path:
    if f.path is not None:
        return f.path
    assert package is not None and f.file is not None
    return locate(package, f.file)


def read_domain(files: Sequence[DomainFile], package: str | None) -> str:
    """Each file checked against its pin, then joined with blank lines (UTF-8): the corpus reader's rules."""

    return read([CorpusFile(domain_path(f, package), f.sha256) for f in files], what="domain text")


def domain_key(files: Sequence[DomainFile], package: str | None) -> dict[str, Any]:
    """The domain text in an artifact key: :func:`domain_identity` without the installed paths (they name the
    venv, which differs between clones and machines; the SHA-256s pin the content)."""
    identity = domain_identity(files, package)
    return {**identity, "files": [{k: v for k, v in f.items() if k != "path"} for f in identity["files"]]}


def domain_identity(files: Sequence[DomainFile], package: str | None) -> dict[str, Any]:
    """What a receipt records of the domain text: the package, its installed version, each file and pin."""
    try:
        version = metadata.version(package) if package else None
    except metadata.PackageNotFoundError:
        version = None
    return {"package": package, "package_version": version,
            "files": [{"file": f.file, "path": str(domain_path(f, package)), "sha256": f.sha256} for f in files]}
