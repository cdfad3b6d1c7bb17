"""A donor from disk: a model fine-tuned elsewhere, declared by ``path`` in ``[[overlay.donors]]`` (:mod:`.donor`).

``path`` is a Hugging Face directory (``config.json`` and one ``model.safetensors`` or ``pytorch_model.bin``) or a
single ``.safetensors`` file of full-shape tensors named as the backbone's Hugging Face state dict names them.
``sha256`` pins the weights file (the directory's ``model.safetensors``, else its ``pytorch_model.bin``).

Checked twice, each refusal naming the file, the donor and the tensor:

- when the campaign loads (:func:`check_at_load`): the file exists, its SHA-256, its header is readable, every
  tensor is float32, float16 or bfloat16 and named as the architecture names its tensors, a directory's
  ``config.json`` is the backbone's architecture and its layer count holds the tensors and the selection; and,
  when the backbone's Hugging Face weights are on disk at load (an ``hf`` source, an ``onnx`` source's ``hf``
  directory), every name and shape against them;
- when the donor is built, the first thing an overlay fixture does (:func:`build`): the same against the
  backbone's Hugging Face directory whatever its source (a trained or GGUF backbone exists only then), then the
  donor directory the overlay is built from: the backbone with the selected tensors replaced by the donor's.

Nothing here imports torch or safetensors until a ``.bin`` is read or a donor is built.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..fields import Where
from ..hashing import sha256_file_once
from ..models.params import safetensors_header
from ..sources.archs import GGUF_ARCHITECTURES

WEIGHTS = ("model.safetensors", "pytorch_model.bin")   # a directory's weights file, in this order: what sha256 pins
SHARDED = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}
# the state-dict names of the architectures the exporter writes (llama, mistral, qwen2: harness/sources/archs.py)
NAME = re.compile(r"model\.embed_tokens\.weight|model\.norm\.weight|lm_head\.weight|model\.layers\.(\d+)\."
                  r"(?:input_layernorm\.weight|post_attention_layernorm\.weight|self_attn\.[qkvo]_proj\.(?:weight|bias)"
                  r"|mlp\.(?:gate|up|down)_proj\.weight)")
_TORCH_DTYPES = {"torch.float32": "F32", "torch.float16": "F16", "torch.bfloat16": "BF16"}
_NOT_COPIED = ("artifact.json", "donor.json", *WEIGHTS, *SHARDED)

Tensors = Mapping[str, tuple[str, tuple[int, ...]]]   # name -> (safetensors dtype, shape)


@dataclass(frozen=True)
class Found:
    """What a donor's path holds: the weights file its sha256 pins, a directory's config.json, the header."""
    weights: Path
    config: dict[str, Any] | None
    tensors: dict[str, tuple[str, tuple[int, ...]]]


# -- reading -------------------------------------------------------------------------------------------------------
def bin_header(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Each tensor's dtype and shape of a ``pytorch_model.bin`` (read on the meta device: no data is loaded)."""
    import torch

    try:
        state = torch.load(path, map_location="meta", weights_only=True, mmap=True)
    except Exception as exc:   # torch raises many kinds on a file that is not a state dict
        raise ValueError(f"torch.load failed: {exc}") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError("not a state dict of tensors")
    return {k: (_TORCH_DTYPES.get(str(v.dtype), str(v.dtype)), tuple(v.shape)) for k, v in state.items()}


def header(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    return bin_header(path) if path.suffix == ".bin" else safetensors_header(path)


def locate(path: Path, pin: str, donor_id: str, where: Where) -> Found:
    """The donor's weights file (checked against its pin), its config.json (a directory) and its header, every
    dtype a float one. ``where`` is the donor's table; refusals name the file and the donor."""
    at = where.child("path")
    label = f"donor {donor_id!r}"
    config = None
    if path.is_dir():
        shard = next((s for s in SHARDED if (path / s).is_file()), None)
        if shard:
            raise at.fail(f"{label}: {path} holds a sharded checkpoint ({shard}); save the donor as one file "
                          f"(save_pretrained(..., max_shard_size=\"100GB\"))")
        weights = next((path / w for w in WEIGHTS if (path / w).is_file()), None)
        if weights is None:
            raise at.fail(f"{label}: {path} has no {' or '.join(WEIGHTS)}")
        try:
            config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise at.fail(f"{label}: {path} has no config.json (a Hugging Face directory has one; "
                          f"or name a single .safetensors file)") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise at.fail(f"{label}: {path / 'config.json'} is not readable JSON: {exc}") from None
        if not isinstance(config, dict):
            raise at.fail(f"{label}: {path / 'config.json'} is not a JSON object")
    elif path.is_file():
        if path.suffix != ".safetensors":
            raise at.fail(f"{label}: {path} is neither a Hugging Face directory nor a .safetensors file")
        weights = path
    else:
        raise at.fail(f"{label}: {path} does not exist")
    actual = sha256_file_once(weights)   # a campaign loads in every worker: hashed once per process
    if actual != pin:
        raise where.child("sha256").fail(f"{label}: {weights} has SHA-256 {actual}; the campaign pins {pin}")
    try:
        tensors = header(weights)
    except (OSError, ValueError) as exc:
        kind = "PyTorch state dict" if weights.suffix == ".bin" else "safetensors file"
        raise at.fail(f"{label}: {weights} is not a readable {kind} ({exc})") from None
    if not tensors:
        raise at.fail(f"{label}: {weights} holds no tensors")
    for name, (dtype, _) in sorted(tensors.items()):
        if dtype not in DTYPES:
            raise at.fail(f"{label}: {weights}: tensor {name} has dtype {dtype}; a donor's tensors are "
                          f"{', '.join(DTYPES.values())}")
    return Found(weights, config, tensors)


# -- checks (pure) -------------------------------------------------------------------------------------------------
def architecture_problem(config: Mapping[str, Any], model_type: str, architectures: Sequence[str] | None,
                         backbone: str, gguf: bool = False) -> str | None:
    """Why a donor's config.json is not the backbone's architecture (``model_type``; with ``gguf``, a GGUF
    file's ``general.architecture``, compared through :data:`GGUF_ARCHITECTURES`), or None."""
    theirs, archs = config.get("model_type"), config.get("architectures")
    if theirs != model_type and not (gguf and GGUF_ARCHITECTURES.get(str(theirs)) == model_type):
        return (f"a different architecture: model_type {theirs!r} (architectures {archs!r}) where {backbone} is "
                f"{model_type!r}" + (f" ({list(architectures)!r})" if architectures else ""))
    if architectures is not None and archs is not None and list(archs) != list(architectures):
        return f"a different architecture: architectures {archs!r} where {backbone} has {list(architectures)!r}"
    return None


def name_problem(name: str, num_layers: int | None, what: str) -> str | None:
    """Why ``name`` is not a tensor of the architecture (``what`` says where ``num_layers`` comes from), or None."""
    m = NAME.fullmatch(name)
    if m is None:
        return (f"tensor {name} is not a tensor of this architecture (state-dict names such as "
                f"model.layers.0.mlp.up_proj.weight)")
    if m.group(1) is not None and num_layers is not None and int(m.group(1)) >= num_layers:
        return f"tensor {name}: layer {m.group(1)} is out of range ({what} has {num_layers} layers)"
    return None


def backbone_problem(tensors: Tensors, backbone: Tensors, label: str) -> str | None:
    """The first donor tensor ``backbone`` lacks or holds at another shape, or None (``label`` names the backbone)."""
    for name, (_, shape) in sorted(tensors.items()):
        if name not in backbone:
            return f"tensor {name}: {label} has no such tensor"
        if tuple(backbone[name][1]) != tuple(shape):
            return f"tensor {name} has shape {list(shape)} where {label} has {list(backbone[name][1])}"
    return None


def backbone_tensors(hf_dir: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Every tensor of a Hugging Face directory (all its ``*.safetensors``, else its ``pytorch_model*.bin``), with
    ``lm_head.weight`` standing for the embedding when the config ties them (a state dict saved whole has it)."""
    files = sorted(hf_dir.glob("*.safetensors")) or sorted(hf_dir.glob("pytorch_model*.bin"))
    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    for f in files:
        out.update(header(f))
    config = json.loads((hf_dir / "config.json").read_text(encoding="utf-8"))
    if config.get("tie_word_embeddings") and "lm_head.weight" not in out and "model.embed_tokens.weight" in out:
        out["lm_head.weight"] = out["model.embed_tokens.weight"]
    return out


def check(found: Found, donor_id: str, where: Where, *, model_id: str, model_type: str | None,
          architectures: Sequence[str] | None = None, num_layers: int | None = None,
          backbone: Tensors | None = None, selected: Sequence[str] = (), selection: str = "",
          gguf: bool = False) -> None:
    """Every check of a located donor against what is known of its backbone (each None: not known yet)."""
    at = where.child("path")
    label = f"donor {donor_id!r}"
    if found.config is not None and model_type is not None:
        why = architecture_problem(found.config, model_type, architectures, f"model {model_id!r}", gguf)
        if why:
            raise at.fail(f"{label}: {found.weights.parent / 'config.json'}: {why}")
    own_layers = found.config.get("num_hidden_layers") if found.config is not None else None
    layers, what = (num_layers, f"model {model_id!r}") if num_layers is not None else (own_layers, "its config.json")
    if not isinstance(layers, int) or isinstance(layers, bool):
        layers = None
    for name in sorted(found.tensors):
        why = name_problem(name, layers, what)
        if why:
            raise at.fail(f"{label}: {found.weights}: {why}")
    if backbone is not None:
        why = backbone_problem(found.tensors, backbone, f"model {model_id!r}")
        if why:
            raise at.fail(f"{label}: {found.weights}: {why}")
    missing = [n for n in selected if n not in found.tensors]
    if missing:
        raise at.fail(f"{label}: {found.weights} has no tensor {missing[0]}, which {selection} select "
                      f"({len(missing)} of the {len(selected)} selected tensors are missing)")


# -- at campaign load ----------------------------------------------------------------------------------------------
def backbone_dir_at_load(spec: Any) -> Path | None:
    """The backbone's Hugging Face directory when it is on disk before anything is built (an ``hf`` source, an
    ``onnx`` source's ``hf`` directory), else None (a trained or GGUF backbone exists only once built)."""
    if spec is None:
        return None
    if getattr(spec, "source", None) == "hf":
        return spec.path
    if getattr(spec, "source", None) == "onnx":
        return getattr(spec, "hf_path", None)
    return None


def check_at_load(path: Path, pin: str, donor_id: str, where: Where, spec: Any = None,
                  select: Callable[[int], tuple[Sequence[str], str]] | None = None) -> Found:
    """What can be checked of a donor from disk when the campaign loads. ``spec`` is its backbone's
    :class:`~harness.domain.ModelSpec` (None: unknown); ``select(num_layers)`` gives the names the donor's families
    and layers select and how to say so."""
    found = locate(path, pin, donor_id, where)
    hf_dir = backbone_dir_at_load(spec)
    backbone = config = None
    if hf_dir is not None and (hf_dir / "config.json").is_file():
        config = json.loads((hf_dir / "config.json").read_text(encoding="utf-8"))
        backbone = backbone_tensors(hf_dir)
    model_type = config.get("model_type") if config else getattr(spec, "architecture", None)
    num_layers = config.get("num_hidden_layers") if config else None
    layers = num_layers if num_layers is not None else (found.config or {}).get("num_hidden_layers")
    selected, selection = select(layers) if select is not None and isinstance(layers, int) else ((), "")
    check(found, donor_id, where, model_id=getattr(spec, "id", "?"), model_type=model_type,
          architectures=config.get("architectures") if config else None, num_layers=num_layers,
          backbone=backbone, selected=selected, selection=selection,
          gguf=config is None and getattr(spec, "source", None) == "gguf")
    return found


# -- at the first fixture: the donor directory the overlay is built from -----------------------------------------
def _load(path: Path, names: Sequence[str]) -> dict[str, Any]:
    import torch

    if path.suffix == ".bin":
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        return {n: state[n] for n in names}
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return {n: f.get_tensor(n) for n in names}


def _relative(a, b) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / max(float(b.norm()), 1e-30))


def build(path: Path, pin: str, *, donor_id: str, model_id: str, where: Where, hf_dir: Path, selected: Sequence[str],
          selection: str, out_dir: Path, progress: Callable[[str], None] = lambda m: None) -> dict[str, Any]:
    """Check the donor against the backbone in ``hf_dir``, then write ``out_dir``: the backbone's files with its
    weights' ``selected`` tensors replaced by the donor's (cast to the backbone's dtype), and ``donor.json``.
    The overlaid model is exactly this directory's model, so the overlay's calibration reads it."""
    import torch
    from safetensors.torch import load_file, save_file

    hf_dir, out_dir = Path(hf_dir), Path(out_dir)
    found = locate(path, pin, donor_id, where)
    config = json.loads((hf_dir / "config.json").read_text(encoding="utf-8"))
    backbone = backbone_tensors(hf_dir)
    check(found, donor_id, where, model_id=model_id, model_type=config.get("model_type"),
          architectures=config.get("architectures"), num_layers=config.get("num_hidden_layers"), backbone=backbone,
          selected=selected, selection=selection)
    progress(f"donor {donor_id}: {len(selected)} tensors from {found.weights}")
    files = sorted(hf_dir.glob("*.safetensors"))
    if not files:
        raise where.child("path").fail(f"donor {donor_id!r}: the backbone {hf_dir} has no .safetensors weights to "
                                       f"replace tensors in")
    state: dict[str, Any] = {}
    for f in files:
        state.update(load_file(str(f)))
    donor = _load(found.weights, sorted(found.tensors))
    deltas, outside = {}, []
    for name, t in donor.items():
        base = state[name] if name in state else state["model.embed_tokens.weight"]   # a tied head
        if name in selected:
            state[name] = t.to(base.dtype).contiguous()
            deltas[name] = round(_relative(t, base), 8)
        elif not torch.equal(t.to(base.dtype), base):
            outside.append(name)
    out_dir.mkdir(parents=True, exist_ok=True)
    for f in sorted(hf_dir.iterdir()):
        if f.is_file() and f.name not in _NOT_COPIED and f.suffix not in (".safetensors", ".bin"):
            shutil.copyfile(f, out_dir / f.name)
    save_file(state, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    record = {"kind": "donor", "source": "disk", "donor": donor_id, "model": model_id, "file": found.weights.name,
              "sha256": pin, "bytes": found.weights.stat().st_size, "backbone": str(hf_dir),
              "dtypes": sorted({found.tensors[n][0] for n in found.tensors}), "donor_tensors": len(found.tensors),
              "tensors": list(selected), "selection": selection, "relative_delta": deltas,
              "changed_outside_selection": sorted(outside)}
    (out_dir / "donor.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record
