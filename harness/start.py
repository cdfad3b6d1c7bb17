"""A campaign for the user's own model, from one path: ``bin/gatehouse init PATH`` and
``bin/gatehouse campaign --model PATH``, with ``--hf DIR`` (an ``onnx`` source's Hugging Face weights),
``--browser fp32,q4`` (what ships to the browser), ``--cases N`` (the behavior suite's first N cases of each
category, a quicker look) and ``--peers`` / ``--no-peers`` (other tools' builds).

The path decides the source: a ``.gguf`` file is ``gguf`` (pinned by the SHA-256 computed here), a
directory with ONNX graphs (the transformers.js / optimum layout, or ORT-GenAI's ``model.onnx`` with
``genai_config.json``) is ``onnx``, a directory with ``config.json`` and weights is ``hf``. The ``[[models]]``
table and the header say what was found (graphs, weights, peers, the browser choice), each comment generated
here. The rest is the default campaign's corpus, policies and behavior suite without its comments (they speak
of the default models) and without the entries, expectations and donors that name its models or its recipe grid
(screened on its models; docs/recipes.md says how to add one); ``[export]`` only for a source Gatehouse exports
(``gguf``, ``hf``). The written campaign is loaded before it is printed: what cannot be qualified fails here, named.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from .errors import CampaignError, HarnessError
from .fields import Where
from .hashing import sha256_file

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "campaigns" / "default.toml"
# SmolLM2's q8 and q4 MatMulNBits graphs in onnxruntime-web (docs/measurements.md, the browser list)
BROWSER_COST = ("a quantized variant timed there can cost minutes (onnxruntime-web's MatMulNBits dequantizes every "
                "weight on every call: a 135M-parameter model's q8 and q4 graphs ran at 3-4 tok/s, 17 minutes of lanes)")


def model_id(path: Path) -> str:
    name = path.name[:-5] if path.name.lower().endswith(".gguf") else path.name
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.").lower()[:60] or "model"


class Found(NamedTuple):
    table: str                 # the [[models]] table, each key's comment saying what was found
    source: str
    peers: tuple[str, ...]     # the PEERS kinds the model measures


@dataclass(frozen=True)
class _Option(Where):
    """Where an option of init is checked: its refusals read ``--hf: <problem>`` (the problem names the path)."""

    def fail(self, problem: str) -> CampaignError:
        return CampaignError(f"{self.path}: {problem}")


def _q(value) -> str:
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _list(values) -> str:
    return "[" + ", ".join(_q(v) for v in values) + "]"


def _comment(text: str, indent: str = "") -> list[str]:
    return textwrap.wrap(text, 116, initial_indent="# " + indent, subsequent_indent="# " + indent + "  " * bool(indent),
                         break_on_hyphens=False)


def model_table(path: Path, tier: str = "benchmark", **options) -> tuple[str, str]:
    """(the ``[[models]]`` table for ``path``, the source it chose); raises HarnessError when it is none."""
    return find(path, tier, **options)[:2]


def find(path: Path, tier: str = "benchmark", hf: Path | None = None, browser: tuple[str, ...] | None = None,
         peers: bool | None = None) -> Found:
    """What init writes for ``path`` (see the module docstring); ``hf``, ``browser`` and ``peers`` are its
    options (None: the source's default). Raises HarnessError naming what cannot be measured."""
    from .domain import DTYPES
    from .sources import hf as hf_source, onnx, peers as peer_source

    path = path.expanduser().resolve()
    lines = ["[[models]]", f"id = {_q(model_id(path))}", f"tier = {_q(tier)}"]
    found: dict = {}
    if path.is_file() and path.suffix.lower() == ".gguf":
        source, dtypes, found = "gguf", list(DTYPES), {"file": path.name}
        lines += ['source = "gguf"', f"path = {_q(path)}", f"sha256 = {_q(sha256_file(path))}",
                  f"dtypes = {_list(dtypes)}"]
    elif path.is_dir() and onnx.discover(path)[0]:
        source = "onnx"
        graphs, others = onnx.discover(path)
        for rel in graphs.values():   # opened now, so init names the graph that cannot bind (sources/onnx_graph.py)
            onnx.check_graph(path / rel)
        dtypes = [d for d in DTYPES if d in graphs]
        lines += ['source = "onnx"', f"path = {_q(path)}", f"dtypes = {_list(dtypes)}"]
        lines.append("# graphs found: " + ", ".join(f"{d} = {r}" for d, r in graphs.items()))
        if others:
            lines.append("# also found, not measured (no policy holds these precisions): "
                         + ", ".join(f"{d} = {r}" for d, r in others.items()))
        found = {"hf_path": _weights(path, graphs, hf, lines)}
    elif path.is_dir() and (path / "config.json").is_file():
        if not hf_source.has_weights(path):
            raise HarnessError(f"{path}: has config.json but no weights ({' or '.join(hf_source.WEIGHTS)}) and no ONNX graph")
        source, dtypes = "hf", list(DTYPES)
        lines += ['source = "hf"', f"path = {_q(path)}", f"dtypes = {_list(dtypes)}"]
    elif path.is_dir():
        raise HarnessError(f"{path}: neither a Hugging Face directory (no config.json) nor an ONNX export "
                           f"(no {', '.join(r + n for r in onnx.ROOTS for n in onnx.NAMES['fp32'])})")
    else:
        raise HarnessError(f"{path}: no such .gguf file or model directory")
    if hf is not None and source != "onnx":
        raise HarnessError(f"--hf: only an onnx export takes Hugging Face weights beside it; {path} is source {source} "
                           f"(Gatehouse reads its weights from it)")
    kinds = _peers(source, peer_source.possible(source, found), peers, lines)
    _browser(dtypes, browser, lines)
    lines.append("eval_context = 512")
    return Found("\n".join(lines) + "\n", source, kinds)


def _weights(path: Path, graphs: dict[str, str], hf: Path | None, lines: list[str]) -> Path | None:
    """An onnx source's Hugging Face weights: ``--hf`` (checked: config.json, weights, tokenizer, and the same
    model as the export's config), else the export directory when it holds them, else None; ``lines`` get the key."""
    from .sources import hf as hf_source, onnx

    if hf is not None:
        hf = hf.expanduser().resolve()
        hf_source.check_directory(hf, _Option("--hf", "hf"))
        ours, theirs = onnx.model_config(hf), onnx.config_beside(path / next(iter(graphs.values())))
        differ = [f"{k} {ours[k]} against {theirs[k]}" for k in ("layers", "kv_heads", "head_dim", "vocab")
                  if ours.get(k) and theirs.get(k) and ours[k] != theirs[k]]
        if differ:
            raise HarnessError(f"--hf: {ours['file']} is not the model of {theirs['file']} ({', '.join(differ)})")
        lines += _comment("the Hugging Face weights (--hf): PyTorch on them is fp32's behavior reference, and the peers' "
                          "source")
        lines.append(f"hf = {_q(hf)}")
        return hf
    if (path / "config.json").is_file() and hf_source.has_weights(path):
        lines += _comment("the weights beside the graphs: PyTorch on them is fp32's behavior reference, and the peers' "
                          "source")
        lines.append(f"hf = {_q(path)}")
        return path
    lines += _comment("no Hugging Face weights given (--hf DIR) or beside the graphs: the fp32 behavior gate is skipped "
                      "(its reference is PyTorch on the weights), and no peer can be built; to add them:")
    lines.append('# hf = "<the Hugging Face directory>"')
    return None


def _peers(source: str, possible: tuple[str, ...], wanted: bool | None, lines: list[str]) -> tuple[str, ...]:
    """The peers written (``peers = [...]``, with what they are): an onnx source's are opt-in (``--peers``), every
    other source's measured unless ``--no-peers``; ``--peers`` on a model that can have none is refused."""
    from .domain import PEERS

    if wanted and not possible:
        raise HarnessError("--peers: no peer can be built for this model: ORT-GenAI builds from the Hugging Face "
                           "weights, which an onnx export has only with --hf DIR (or weights beside its graphs)")
    kinds = possible if (source != "onnx" if wanted is None else wanted) else ()
    if kinds:
        lines += _comment("peers: other tools' graphs of the same model, measured beside its own variants and never "
                          "qualified (init --no-peers, or peers = [], leaves them out):")
        lines += [line for k in kinds for line in _comment(f"{k}: {PEERS[k].describe}", "  ")]
    elif possible:
        why = "opt-in for an onnx source: init --peers" if wanted is None else "left out by --no-peers"
        lines += _comment(f"peers = []: no other tool's graph of the model is measured ({', '.join(possible)} could be: "
                          f"{why}, or list them here)")
    else:
        lines += _comment("peers = []: no other tool's graph of the model is measured (peers are built from the Hugging "
                          "Face weights: with hf set, list them here, e.g. [\"ort-genai-int4\"], or run init --hf DIR "
                          "--peers)")
    lines.append(f"peers = {_list(kinds)}")
    return kinds


def _browser(dtypes: list[str], browser: tuple[str, ...] | None, lines: list[str]) -> None:
    """``browser = [...]``: the given variants (each a dtype of the model), else fp32 when the model has it."""
    if browser is not None:
        for label in browser:
            if label not in dtypes:
                raise HarnessError(f"--browser: {label!r} is not a variant of this model (its dtypes: "
                                   f"{', '.join(dtypes)})")
        chosen = "chosen with --browser"
    else:
        browser = ("fp32",) if "fp32" in dtypes else ()
        chosen = f"init ships {'fp32 only' if browser else 'none (this export has no fp32 graph)'}: {BROWSER_COST}; " \
                 f"add one with --browser fp32,q4"
    lines += _comment(f"What ships to the browser: the browser gates time and judge these variants only, and only "
                      f"these need them to qualify; {chosen}.")
    lines.append(f"browser = {_list(browser)}")


_HEADER = re.compile(r"^\[{1,2}[^\]\n]+\]{1,2}[ \t]*$", flags=re.M)


def tables(text: str) -> list[str]:
    """``text`` cut into its TOML tables, each with the comment lines right above its header (they describe it),
    the text before the first table first; joined, they are ``text`` again."""
    cuts = [0]
    for m in _HEADER.finditer(text):
        start = m.start()
        while True:   # the contiguous comment lines directly above the header belong to it
            prev = text.rfind("\n", 0, max(start - 1, 0)) + 1 if start > 0 else 0
            if start > 0 and text[prev:start].startswith("#") and prev >= cuts[-1]:
                start = prev
            else:
                break
        if start > cuts[-1]:
            cuts.append(start)
    return [text[a:b] for a, b in zip(cuts, cuts[1:] + [len(text)])]


def _header(block: str) -> str:
    m = _HEADER.search(block)
    return m.group(0).strip() if m else ""


def _model_of(block: str) -> str | None:
    m = re.search(r'^model = "([^"]+)"', block, flags=re.M)
    return m[1] if m else None


def _recipe_ids(text: str) -> set[str]:
    return {m for b in tables(text) if _header(b) == "[[recipes]]" for m in re.findall(r'^id = "([^"]+)"', b, flags=re.M)}


def _for_other_models(text: str, drop_donor, keep_expect) -> str:
    """``text`` without the donors ``drop_donor(model)`` names, without the recipe grid (``[search]``,
    ``[[recipes]]`` and the expectations about recipes: the default grid was screened on its own models; another
    model's campaign adds its own, docs/recipes.md) and with the ``[[expect]]`` tables ``keep_expect`` keeps."""
    recipes = _recipe_ids(text)
    kept = []
    for block in tables(text):
        head = _header(block)
        if head == "[[overlay.donors]]" and drop_donor(_model_of(block)):
            continue
        if head in ("[search]", "[[recipes]]"):
            continue
        if head == "[[expect]]":
            dtype = re.search(r'^dtype = "([^"]+)"', block, flags=re.M)
            if (dtype and dtype[1] in recipes) or not keep_expect(block):
                continue
        kept.append(block)
    return "".join(kept)


def default_with(models: str, header: str | None = None, keep_expect=lambda block: False) -> str:
    """The default campaign's text with ``models`` (``[[models]]`` tables) in place of its own: its corpus,
    export settings and policies, the behavior suite's path made absolute (the text may be written
    anywhere), ``header`` in place of its top-level keys when given, and of its ``[[expect]]`` tables only
    those ``keep_expect(block text)`` keeps; of its ``[[overlay.donors]]`` only those of the given models; no
    recipe grid (:func:`_for_other_models`); ``[compare]`` as it is."""
    text = DEFAULT.read_text(encoding="utf-8")
    head = text.index("[[models]]")
    body = text[text.index("# License texts"):]
    body = body.replace('suite = "../harness/behavior/', f'suite = "{ROOT}/harness/behavior/')
    ids = set(re.findall(r'^id = "([^"]+)"', models, flags=re.M))
    body = _for_other_models(body, lambda model: model not in ids, keep_expect)
    return only_models((text[:head] if header is None else header) + models + "\n" + body, ids)


def without_model(text: str, model_id: str) -> str:
    """A campaign's text without one ``[[models]]`` table, the ``[[overlay.donors]]`` and ``[[expect]]`` tables
    naming it, its entries in the per-model policy tables, and the recipe grid (:func:`_for_other_models`; the
    other models' ``browser`` lists lose the recipes they named)."""
    text = re.sub(rf'\[\[models\]\]\nid = "{re.escape(model_id)}".*?(?=\[\[models\]\])', "", text, flags=re.S)
    recipes = _recipe_ids(text)
    text = _for_other_models(text, lambda model: model == model_id, lambda block: _model_of(block) != model_id)
    text = re.sub(r"^(browser = )\[(.*)\]", lambda m: m[1] + "[" + ", ".join(
        v for v in (x.strip() for x in m[2].split(",")) if v and v.strip('"') not in recipes) + "]", text, flags=re.M)
    ids = set(re.findall(r'^id = "([^"]+)"', text, flags=re.M))
    return only_models(text, ids)


# the one-line policy tables keyed by model id (``knob(refers="model")`` fields the default campaign writes)
_PER_MODEL = re.compile(r'^(expected|slices|model_max_repeats|diagnose) = (\{.*\})[ \t]*$', flags=re.M)


def only_models(text: str, ids: set[str]) -> str:
    """``text`` with the per-model policy tables (``expected``, ``slices``, ``model_max_repeats``, ``diagnose``) keeping
    only the entries of ``ids``: a campaign names no model it does not have (checked when it loads)."""
    import tomllib

    def keep(m: re.Match) -> str:
        table = tomllib.loads(f"x = {m.group(2)}")["x"]
        kept = ", ".join(f'"{k}" = {v!r}'.replace("'", '"') for k, v in table.items() if k in ids)
        return f"{m.group(1)} = {{ {kept} }}" if kept else f"{m.group(1)} = {{}}"
    return _PER_MODEL.sub(keep, text)


def for_model(text: str, table: str, model_id: str, value: int) -> str:
    """``text`` with its empty one-line per-model table ``table = {}`` holding ``model_id = value``."""
    out, n = re.subn(rf"^{table} = \{{\}}[ \t]*$", f"{table} = {{ {_q(model_id)} = {value} }}", text, count=1, flags=re.M)
    if n != 1:
        raise HarnessError(f"the campaign has no empty one-line {table} = {{}} to give {model_id!r} its entry")
    return out


# what Gatehouse does with each source, for the header
_DOES = {
    "onnx": "measured as it is; Gatehouse exports nothing from it, so this campaign has no [export] table",
    "hf": "exported by Gatehouse at fp32, q8 and q4 with the [export] settings below",
    "gguf": "dequantized to a Hugging Face directory, then exported by Gatehouse at fp32, q8 and q4 with the [export] "
            "settings below",
}


def campaign_text(path: Path, tier: str = "benchmark", hf: Path | None = None, browser: tuple[str, ...] | None = None,
                  peers: bool | None = None, cases: int | None = None) -> str:
    """The campaign for ``path``'s model (see the module docstring); the options are ``find``'s, and ``cases`` the
    behavior suite's slice for it (``[policy.behavior] slices``: the first ``cases`` of each category; None: all)."""
    found = find(path, tier, hf, browser, peers)
    resolved = Path(path).expanduser().resolve()
    run = f'.venv/bin/pytest --campaign THIS.toml -m "{tier} and not streaming and not training" --run-dir runs/NAME'
    header = "\n".join(_comment(f"A Gatehouse campaign for {resolved}, written by `bin/gatehouse init` from what it "
                                 f"found there (noted beside each key of [[models]]). Source {found.source}: "
                                 f"{_DOES[found.source]}.") + [f"# Run it: {run}"])
    header += (f"\nschema_version = 1\nname = {_q(model_id(resolved))}\n"
               f"description = {_q(f'{found.source} model at {str(resolved)[-120:]}')}\n"
               f"screening = false\nseed = 20261202\nthreads = 2\n\n")

    def keep(block: str) -> bool:   # a peer's known finding (it names no model) holds for any model measuring it
        dtype = re.search(r'^dtype = "([^"]+)"', block, flags=re.M)
        return "\nmodel = " not in block and dtype is not None and dtype[1] in found.peers

    body = re.sub(r"^[ \t]*#.*\n", "", default_with("", "", keep), flags=re.M)   # its comments speak of its models
    if found.source == "onnx":
        body = re.sub(r"^\[export\]\n(?:[^\[\n].*\n|\n)*", "", body, flags=re.M)
    note = "\n".join(_comment(
        f"Below: the default campaign's {'' if found.source == 'onnx' else 'export settings, '}corpus, policies and "
        f"behavior suite, without the entries that name its models ({DEFAULT}: its comments say what each setting "
        f"means and what it was measured on, the default models, not this one). Each gate's rule: "
        f"{ROOT / 'docs' / 'gates'}; your own held-out text in [corpus]: {ROOT / 'docs' / 'own-model.md'}.")) + "\n"
    body = body if cases is None else for_model(body, "slices", model_id(resolved), cases)   # the table's own id
    return header + found.table + "\n" + note + re.sub(r"\n{3,}", "\n\n", body).lstrip("\n")


def _options(ap: argparse.ArgumentParser) -> None:
    """The options ``init`` and ``campaign --model`` share."""
    ap.add_argument("--hf", type=Path, metavar="DIR", help="an onnx export's Hugging Face weights (config.json, "
                    "weights, tokenizer): the PyTorch reference of fp32's behavior and the peers' source")
    ap.add_argument("--browser", type=_labels, metavar="LIST", help="the variants shipped to the browser, comma-"
                    "separated (fp32,q4), or none; default fp32 (a quantized graph there costs minutes per variant)")
    ap.add_argument("--cases", type=_cases, metavar="N", help="the behavior suite's first N cases of each category "
                    "(written as [policy.behavior] slices): a quicker look with less power to call a drop real; "
                    "default: the whole suite")
    peers = ap.add_mutually_exclusive_group()
    peers.add_argument("--peers", dest="peers", action="store_true", default=None, help="build and measure other "
                       "tools' graphs of the model (ORT-GenAI's from the weights); opt-in for an onnx export")
    peers.add_argument("--no-peers", dest="peers", action="store_false", help="no peer (the default for an onnx "
                       "export; a gguf or Hugging Face model has them otherwise)")


def _cases(text: str) -> int:
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise argparse.ArgumentTypeError(f"expected a positive whole number of cases per category, got {text!r}")


def _labels(text: str) -> tuple[str, ...]:
    return () if text.strip().lower() in ("", "none") else tuple(t.strip() for t in text.split(",") if t.strip())


def campaign_help() -> None:
    """``bin/gatehouse campaign --model PATH --help``: init's options, which that command takes too."""
    ap = argparse.ArgumentParser(prog="bin/gatehouse campaign --model PATH", description="Write the campaign for PATH "
                                 "(as init does) by a new run directory, run it; every other argument goes to pytest.")
    _options(ap)
    ap.print_help()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gatehouse init", description="Write a campaign for a model path to stdout "
                                 "(or --out FILE).")
    ap.add_argument("path", type=Path, help="a .gguf file, a Hugging Face directory or an ONNX export directory")
    ap.add_argument("--out", type=Path, help="write the campaign here instead of stdout")
    ap.add_argument("--tier", default="benchmark", choices=("benchmark", "ci"))
    _options(ap)
    args = ap.parse_args(argv)
    from . import campaign

    try:
        text = campaign_text(args.path, args.tier, args.hf, args.browser, args.peers, args.cases)
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
