"""A campaign for the user's own model, from one path: ``bin/gatehouse init PATH`` and
``bin/gatehouse campaign --model PATH``.

The path decides the source: a ``.gguf`` file is ``gguf`` (pinned by the SHA-256 computed here), a
directory with ONNX graphs (the transformers.js / optimum layout, or ORT-GenAI's ``model.onnx`` with
``genai_config.json``) is ``onnx``, a directory with ``config.json`` and weights is ``hf``. Everything
else (the held-out corpus, the export settings, every policy, the behavior suite) is the default
campaign's, so the written campaign is the default suite on another model; the models table and the
default campaign's known-failure expectations (which name its own models) are replaced. The written
campaign is loaded before it is printed: a path Gatehouse cannot qualify fails here, naming the problem.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

from .errors import HarnessError
from .hashing import sha256_file

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "campaigns" / "default.toml"


def model_id(path: Path) -> str:
    name = path.name[:-5] if path.name.lower().endswith(".gguf") else path.name
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.").lower()[:60] or "model"


def model_table(path: Path, tier: str = "benchmark") -> tuple[str, str]:
    """(the [[models]] table for ``path``, the source it chose); raises HarnessError when it is none."""
    from .domain import DTYPES
    from .sources import hf, onnx

    path = path.expanduser().resolve()
    q = lambda s: '"' + str(s).replace("\\", "\\\\").replace('"', '\\"') + '"'   # noqa: E731
    lines = ["[[models]]", f"id = {q(model_id(path))}", f"tier = {q(tier)}"]
    if path.is_file() and path.suffix.lower() == ".gguf":
        lines += ['source = "gguf"', f"path = {q(path)}", f"sha256 = {q(sha256_file(path))}",
                  f"dtypes = {list(DTYPES)!r}".replace("'", '"')]
        source = "gguf"
    elif path.is_dir():
        found, others = onnx.discover(path)
        if found:
            for rel in found.values():   # opened now, so init names the graph that cannot bind (sources/onnx_graph.py)
                onnx.check_graph(path / rel)
            dtypes = [d for d in DTYPES if d in found]
            lines += ['source = "onnx"', f"path = {q(path)}", f"dtypes = {dtypes!r}".replace("'", '"')]
            lines.append("# graphs found: " + ", ".join(f"{d} = {r}" for d, r in found.items()))
            if others:
                lines.append("# also found, not measured (no policy holds these precisions): "
                             + ", ".join(f"{d} = {r}" for d, r in others.items()))
            if (path / "config.json").is_file() and hf.has_weights(path):
                lines.append("# the weights beside the graphs are the PyTorch reference and the ORT-GenAI peer's source")
                lines.append(f"hf = {q(path)}")
            else:
                lines.append('# hf = "<the Hugging Face directory>"   # the PyTorch reference for fp32 and the ORT-GenAI peer')
            source = "onnx"
        elif (path / "config.json").is_file():
            if not hf.has_weights(path):
                raise HarnessError(f"{path}: has config.json but no weights ({' or '.join(hf.WEIGHTS)}) and no ONNX graph")
            lines += ['source = "hf"', f"path = {q(path)}", f"dtypes = {list(DTYPES)!r}".replace("'", '"')]
            source = "hf"
        else:
            raise HarnessError(f"{path}: neither a Hugging Face directory (no config.json) nor an ONNX export "
                               f"(no {', '.join(r + n for r in onnx.ROOTS for n in onnx.NAMES['fp32'])})")
    else:
        raise HarnessError(f"{path}: no such .gguf file or model directory")
    lines.append("eval_context = 512")
    return "\n".join(lines) + "\n", source


def default_with(models: str, header: str | None = None, keep_expect=lambda block: False) -> str:
    """The default campaign's text with ``models`` (``[[models]]`` tables) in place of its own: its corpus,
    export settings and policies, the behavior suite's path made absolute (the text may be written
    anywhere), ``header`` in place of its top-level keys when given, and of its ``[[expect]]`` tables only
    those ``keep_expect(block text)`` keeps; of its ``[[overlay.donors]]`` only those of the given models."""
    text = DEFAULT.read_text(encoding="utf-8")
    head = text.index("[[models]]")
    corpus = text.index("# License texts")
    expect = text.index("# Known findings")
    after_expect = text.index("[policy.quantization]")
    blocks = text[expect:after_expect].split("[[expect]]")
    expects = blocks[0] + "".join("[[expect]]" + b for b in blocks[1:] if keep_expect(b))
    body = text[corpus:expect] + expects + text[after_expect:]
    body = body.replace('suite = "../harness/behavior/', f'suite = "{ROOT}/harness/behavior/')
    # skill donors are declared per model: keep only those of the models written here (the domain pins stay)
    ids = set(re.findall(r'^id = "([^"]+)"', models, flags=re.M))
    parts = body.split("[[overlay.donors]]")
    body = parts[0] + "".join("[[overlay.donors]]" + b for b in parts[1:]
                              if (re.search(r'^model = "([^"]+)"', b, flags=re.M) or [None, None])[1] in ids)
    return only_models((text[:head] if header is None else header) + models + "\n" + body, ids)


def without_model(text: str, model_id: str) -> str:
    """A campaign's text without one ``[[models]]`` table, the ``[[overlay.donors]]`` declared for it and its
    entries in the per-model policy tables."""
    text = re.sub(rf'\[\[models\]\]\nid = "{re.escape(model_id)}".*?(?=\[\[models\]\])', "", text, flags=re.S)
    parts = text.split("[[overlay.donors]]")
    text = parts[0] + "".join("[[overlay.donors]]" + b for b in parts[1:]
                              if not re.search(rf'^model = "{re.escape(model_id)}"', b, flags=re.M))
    ids = set(re.findall(r'^id = "([^"]+)"', text, flags=re.M))
    return only_models(text, ids)


# the one-line policy tables keyed by model id (``knob(refers="model")`` fields the default campaign writes)
_PER_MODEL = re.compile(r'^(expected|slices) = (\{.*\})[ \t]*$', flags=re.M)


def only_models(text: str, ids: set[str]) -> str:
    """``text`` with the per-model policy tables (``expected = {...}``, ``slices = {...}``) keeping only the
    entries of ``ids``: a campaign names no model it does not have (checked when it loads)."""
    import tomllib

    def keep(m: re.Match) -> str:
        table = tomllib.loads(f"x = {m.group(2)}")["x"]
        kept = ", ".join(f'"{k}" = {v!r}'.replace("'", '"') for k, v in table.items() if k in ids)
        return f"{m.group(1)} = {{ {kept} }}" if kept else f"{m.group(1)} = {{}}"
    return _PER_MODEL.sub(keep, text)


def campaign_text(path: Path, tier: str = "benchmark") -> str:
    """The default campaign with ``path``'s model in place of its own (see the module docstring)."""
    models, source = model_table(path, tier)
    resolved = Path(path).expanduser().resolve()
    header = (f"# A Gatehouse campaign for {resolved} (source {source}), written by\n"
              f"# `bin/gatehouse init`: the default campaign's corpus, export settings and policies.\n"
              f"# Run it: .venv/bin/pytest --campaign THIS.toml -m \"benchmark and not streaming\" --run-dir runs/NAME\n"
              f"schema_version = 1\nname = \"{model_id(resolved)}\"\n"
              f"description = \"{source} model at {str(resolved)[-120:]}\"\n"
              f"screening = false\nseed = 20261202\nthreads = 2\n\n")
    # the default campaign's expectations that name no model (a peer's known finding) hold for any model
    # with peers; an onnx export alone has no peer builds
    peers = source != "onnx" or "\nhf = " in models
    return default_with(models, header, lambda block: peers and "\nmodel = " not in block)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gatehouse init", description="Write a campaign for a model path to stdout "
                                 "(or --out FILE).")
    ap.add_argument("path", type=Path, help="a .gguf file, a Hugging Face directory or an ONNX export directory")
    ap.add_argument("--out", type=Path, help="write the campaign here instead of stdout")
    ap.add_argument("--tier", default="benchmark", choices=("benchmark", "ci"))
    args = ap.parse_args(argv)
    from . import campaign

    try:
        text = campaign_text(args.path, args.tier)
        folder = args.out.resolve().parent if args.out else None
        with tempfile.NamedTemporaryFile("w", suffix=".toml", dir=folder, delete=False, encoding="utf-8") as fh:
            fh.write(text)
        tmp = Path(fh.name)
        try:
            campaign.load(tmp)     # a campaign Gatehouse cannot load is never written
            if args.out:
                tmp.replace(args.out)
            else:
                sys.stdout.write(text)
        finally:
            tmp.unlink(missing_ok=True)
    except HarnessError as exc:
        print(f"gatehouse init: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
