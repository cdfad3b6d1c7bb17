"""Donors that nobody downloads: a backbone fine-tuned here, seeded, on pinned domain text.

A skill overlay replaces chosen tensors of a backbone with a donor's. The donor is trained from the
backbone itself: every tensor frozen except the chosen families (``ffn``, ``attn``, ``all``) in the chosen
layers (``all``, ``A-B``, ``i,j``), AdamW on fixed-length windows of the domain corpus in an order fixed by
the seed. The domain corpus is real text from a pinned registry package (the campaign's ``[overlay]``
table, :func:`parse_overlay_table`), never the campaign's held-out text.

The parsing here is pure and imports nothing heavy; :func:`train_donor` imports torch and transformers
when called.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Mapping, Sequence

from ..corpus import read
from ..domain import CorpusFile
from ..errors import ArtifactError
from ..packages import installed_file
from ..fields import Where, integer, number, sha256, table, text

FFN = ("mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")
ATTN = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight")
FAMILIES: dict[str, tuple[str, ...]] = {"ffn": FFN, "attn": ATTN, "all": FFN + ATTN}

# "domain": learn the domain text. "damage": learn a fixed permutation of its tokens, which teaches the
# chosen tensors that context does not matter (a donor built to hurt general text, for the refusal tests).
OBJECTIVES = ("domain", "damage")

# Files a donor directory takes over from its backbone unchanged (the tokenizer and chat template).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json")


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
               "replay_rows", "description"}
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


def parse_overlay_table(raw: Any, where: Where, base: Path, model_ids: Collection[str] = ()) -> OverlayConfig:
    """The campaign's ``[overlay]`` table: the pinned domain texts (train and held-out, disjoint) and the
    donors to train. Layer ranges are checked for syntax here, against each model's layer count when the
    donor is built. ``model_ids`` (when given) are the campaign's models a donor may name."""
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
        donors.append(DonorSpec(
            id=donor_id, model=model, objective=text(w.child("objective"), d["objective"], OBJECTIVES),
            families=parse_family(d["families"], w.child("families")),
            layers=check_layers(d["layers"], w.child("layers")),
            steps=integer(w.child("steps"), d["steps"], minimum=1),
            lr=number(w.child("lr"), d["lr"], minimum=1e-8, maximum=1.0),
            seq_len=integer(w.child("seq_len"), d["seq_len"], minimum=8),
            batch_size=integer(w.child("batch_size"), d["batch_size"], minimum=1),
            replay_rows=integer(w.child("replay_rows"), d["replay_rows"], minimum=0),
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


def domain_identity(files: Sequence[DomainFile], package: str | None) -> dict[str, Any]:
    """What a receipt records of the domain text: the package, its installed version, each file and pin."""
    try:
        version = metadata.version(package) if package else None
    except metadata.PackageNotFoundError:
        version = None
    return {"package": package, "package_version": version,
            "files": [{"file": f.file, "path": str(domain_path(f, package)), "sha256": f.sha256} for f in files]}


# -- training ----------------------------------------------------------------------------------------
def _tokenize(tokenizer, text_: str) -> list[int]:
    # one long text: the tokenizer's "longer than the model's maximum" warning does not apply to windows
    return list(tokenizer(text_, add_special_tokens=False, verbose=False)["input_ids"])


def eval_loss(model, ids: Sequence[int], seq_len: int, max_tokens: int) -> tuple[float, int]:
    """Mean next-token loss (nats) over non-overlapping windows of the first ``max_tokens`` ids."""
    import torch

    total, count = 0.0, 0
    with torch.no_grad():
        for s in range(0, min(len(ids), max_tokens) - seq_len, seq_len):
            chunk = torch.tensor(ids[s:s + seq_len + 1], dtype=torch.long)[None]
            logits = model(input_ids=chunk[:, :-1], use_cache=False).logits[0]
            total += float(torch.nn.functional.cross_entropy(logits, chunk[0, 1:], reduction="sum"))
            count += seq_len
    if count == 0:
        raise ArtifactError(f"an evaluation text of {len(ids)} tokens is shorter than one window of {seq_len + 1}")
    return total / count, count


def _windows(ids, seq_len: int, objective: str, seed: int):
    """Non-overlapping windows of ``seq_len + 1`` ids in an order fixed by the seed; for ``damage`` the
    ids are first permuted (a fixed permutation), so the text keeps its tokens but loses its order."""
    import numpy as np

    ids = np.asarray(ids, dtype=np.int64)
    if objective == "damage":
        ids = ids[np.random.default_rng(seed + 1).permutation(len(ids))]
    n = (len(ids) - 1) // seq_len
    if n < 1:
        raise ArtifactError(f"the domain corpus gives {len(ids)} tokens, fewer than one window of {seq_len + 1}")
    windows = np.stack([ids[k * seq_len:k * seq_len + seq_len + 1] for k in range(n)])
    return windows[np.random.default_rng(seed).permutation(n)]


def train_donor(hf_dir: Path, out_dir: Path, corpus_text: str, *, families: str | Iterable[str], layers: Iterable[int],
                steps: int, lr: float, seq_len: int, seed: int, progress: Callable[[str], None] = lambda m: None,
                batch_size: int = 8, threads: int = 2, objective: str = "domain",
                evaluate: Mapping[str, str] | None = None, eval_tokens: int = 4096, log_every: int = 10,
                warmup: int = 10, replay_text: str | None = None, replay_rows: int = 0) -> dict[str, Any]:
    """Fine-tune a donor from the backbone in ``hf_dir`` and save it (safetensors and the backbone's
    tokenizer files) with ``donor.json`` in ``out_dir``; return the record.

    Only ``tensor_names(families, layers)`` train (AdamW, warm-up then cosine, gradients clipped to 1);
    the window order comes from ``seed``; torch runs with ``threads`` threads and deterministic algorithms
    (both restored afterwards), so the same inputs give the same donor bit for bit. ``evaluate`` maps a
    name to a text whose loss (first ``eval_tokens`` tokens) is measured before and after training.
    ``objective="damage"`` trains on a fixed permutation of the corpus tokens instead of the text.
    ``replay_rows`` of each batch's rows come from ``replay_text`` (general text the backbone was trained on,
    never held-out text), which keeps the donor's general loss near the backbone's; the logged loss is the
    domain rows' alone."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    if not 0 <= replay_rows < batch_size or (replay_rows and not replay_text):
        raise ValueError(f"replay_rows must be below batch_size {batch_size} and come with replay_text, "
                         f"got {replay_rows} rows and {'a' if replay_text else 'no'} text")
    hf_dir, out_dir = Path(hf_dir), Path(out_dir)
    layers = tuple(layers)
    names = tensor_names(families, layers)
    wall0 = time.monotonic()
    previous = (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled())
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    try:
        torch.manual_seed(seed)
        tokenizer = AutoTokenizer.from_pretrained(hf_dir)
        model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
        params = dict(model.named_parameters())
        missing = [n for n in names if n not in params]
        if missing:
            raise ArtifactError(f"{hf_dir}: the backbone has no tensor {missing[0]} "
                                f"({len(missing)} of the {len(names)} chosen tensors are missing)")
        for p in model.parameters():
            p.requires_grad_(False)
        trained = [params[n] for n in names]
        for p in trained:
            p.requires_grad_(True)
        initial = {n: params[n].detach().clone() for n in names}

        ids = _tokenize(tokenizer, corpus_text)
        windows = torch.from_numpy(_windows(ids, seq_len, objective, seed))
        replay_ids = _tokenize(tokenizer, replay_text) if replay_rows else []
        replay = torch.from_numpy(_windows(replay_ids, seq_len, "domain", seed + 2)) if replay_rows else None
        rows_domain = batch_size - replay_rows
        evals = {name: _tokenize(tokenizer, t) for name, t in (evaluate or {}).items()}
        model.eval()   # no dropout anywhere; train() would change nothing but the flag
        before = {name: eval_loss(model, e, seq_len, eval_tokens) for name, e in evals.items()}

        opt = torch.optim.AdamW(trained, lr=lr, weight_decay=0.0, betas=(0.9, 0.95))
        warm = max(1, min(warmup, steps // 5 or 1))
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: min(1.0, (s + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))))
        losses: list[float] = []
        curve: list[dict[str, Any]] = []
        t0 = time.monotonic()
        for step in range(steps):
            batch = windows[[(step * rows_domain + j) % len(windows) for j in range(rows_domain)]]
            if replay is not None:
                batch = torch.cat([batch, replay[[(step * replay_rows + j) % len(replay) for j in range(replay_rows)]]])
            logits = model(input_ids=batch[:, :-1], use_cache=False).logits
            per_row = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch[:, 1:], reduction="none").mean(1)
            loss = per_row[:rows_domain].mean()
            opt.zero_grad(set_to_none=True)
            per_row.mean().backward()
            torch.nn.utils.clip_grad_norm_(trained, 1.0)
            opt.step()
            sched.step()
            losses.append(loss.item())
            if step % log_every == 0 or step == steps - 1:
                curve.append({"step": step, "loss": round(losses[-1], 6)})
                progress(f"donor step {step + 1}/{steps} loss {losses[-1]:.3f} ({time.monotonic() - t0:.0f} s)")
        train_seconds = time.monotonic() - t0
        after = {name: eval_loss(model, e, seq_len, eval_tokens) for name, e in evals.items()}

        deltas = {}
        for n in names:
            base = initial[n].double().norm().item()
            deltas[n] = round((params[n].detach().double() - initial[n].double()).norm().item() / max(base, 1e-30), 8)
        out_dir.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out_dir, safe_serialization=True)
        copied = []
        for name in TOKENIZER_FILES:
            if (hf_dir / name).is_file():
                shutil.copyfile(hf_dir / name, out_dir / name)
                copied.append(name)
        k = min(log_every, steps)
        record = {
            "kind": "donor", "objective": objective, "backbone": str(hf_dir),
            "families": [families] if isinstance(families, str) else list(families), "layers": list(layers),
            "tensors": names, "trainable_parameters": int(sum(p.numel() for p in trained)),
            "steps": steps, "batch_size": batch_size, "seq_len": seq_len, "lr": lr, "seed": seed, "threads": threads,
            "corpus_sha256": hashlib.sha256(corpus_text.encode("utf-8")).hexdigest(), "corpus_tokens": len(ids),
            "windows": int(len(windows)), "tokens_trained": steps * rows_domain * seq_len,
            "replay": ({"sha256": hashlib.sha256(replay_text.encode("utf-8")).hexdigest(), "tokens": len(replay_ids),
                        "rows_per_batch": replay_rows} if replay_rows else None),
            "loss_on": "domain text" if objective == "domain" else "a fixed permutation of the domain tokens",
            "loss_curve": curve, "loss_first": round(sum(losses[:k]) / k, 6), "loss_last": round(sum(losses[-k:]) / k, 6),
            "loss_first_step": round(losses[0], 6), "loss_last_step": round(losses[-1], 6),
            "relative_delta": deltas,
            "eval": {name: {"before": round(before[name][0], 6), "after": round(after[name][0], 6),
                            "tokens": before[name][1]} for name in evals},
            "eval_seq_len": seq_len, "tokenizer_files": copied,
            "train_seconds": round(train_seconds, 3), "wall_seconds": round(time.monotonic() - wall0, 3),
        }
        (out_dir / "donor.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        return record
    finally:
        torch.set_num_threads(previous[0])
        torch.use_deterministic_algorithms(previous[1])


def build(spec: DonorSpec, hf_dir: Path, out_dir: Path, *, domain_text: str, seed: int, threads: int,
          replay_text: str | None = None, evaluate: Mapping[str, str] | None = None,
          progress: Callable[[str], None] = lambda m: None, where: Where | None = None) -> dict[str, Any]:
    """One ``[[overlay.donors]]`` entry trained from ``hf_dir``: its layers resolved against the backbone's
    ``config.json``, then :func:`train_donor`. The record adds the donor's id and model."""
    where = where or Where("[overlay]", f"donors[{spec.model}/{spec.id}]")
    try:
        num_layers = json.loads((Path(hf_dir) / "config.json").read_text())["num_hidden_layers"]
    except (OSError, ValueError, KeyError) as exc:
        raise ArtifactError(f"{hf_dir}/config.json: no num_hidden_layers to resolve the donor's layers: {exc}") from exc
    layers = parse_layers(spec.layers, num_layers, where.child("layers"))
    record = train_donor(hf_dir, out_dir, domain_text, families=spec.families, layers=layers, steps=spec.steps,
                         lr=spec.lr, seq_len=spec.seq_len, batch_size=spec.batch_size, seed=seed, threads=threads,
                         objective=spec.objective, replay_text=replay_text if spec.replay_rows else None,
                         replay_rows=spec.replay_rows, evaluate=evaluate, progress=progress)
    record = {"donor": spec.id, "model": spec.model, **record}
    (Path(out_dir) / "donor.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record
