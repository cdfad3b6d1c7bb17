"""The import graph of harness/: no cycle (imports inside functions and under TYPE_CHECKING included), and the
layers go one way (the gates below the report; the number formatter and the receipt view below both)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "harness"


def modules() -> dict[str, Path]:
    out = {}
    for f in HARNESS.rglob("*.py"):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Each harness module's harness imports, wherever they sit in the file (a function body counts)."""
    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for mod, path in mods.items():
        package = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package[:len(package) - node.level + 1] if node.level else []
                stem = ".".join(base + ([node.module] if node.module else []))
                names = [f"{stem}.{a.name}" if f"{stem}.{a.name}" in mods else stem for a in node.names]
            deps.update(d for n in names if (d := known(n)) and d != mod)
        graph[mod] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_the_checker_finds_a_cycle_through_a_function_body_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_harness_has_no_import_cycle():
    found = cycles(imports(modules()))
    assert not found, "import cycles (imports inside functions count): " + "; ".join(" <-> ".join(c) for c in found)


def test_the_layers_go_one_way():
    graph = imports(modules())
    below_both = {"harness.fmt", "harness.view", "harness.review"}
    upward = sorted(f"{m} -> {d}" for m, deps in graph.items() for d in deps
                    if (m.startswith("harness.gates") and d.startswith(("harness.report", "harness.review_command")))
                    or (m in below_both and d.startswith(("harness.gates", "harness.report", "harness.review_command"))))
    assert not upward, "imports against the layers: " + ", ".join(upward)


def test_every_harness_import_resolves_including_those_in_function_bodies():
    """A moved name breaks an import inside a function only when that function runs; this finds it now."""
    import importlib

    bad = []
    for base in ("harness", "fixtures", "suites"):
        for f in (ROOT / base).rglob("*.py"):
            parts = list(f.relative_to(ROOT).with_suffix("").parts)
            package = parts[:-1]   # a module's package; for an __init__.py, the package itself
            for node in ast.walk(ast.parse(f.read_text(), str(f))):
                if not isinstance(node, ast.ImportFrom):
                    continue
                stem = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                    if node.level else (node.module or "")
                if not stem.startswith("harness"):
                    continue
                module = importlib.import_module(stem)
                for alias in node.names:
                    if not hasattr(module, alias.name):
                        try:
                            importlib.import_module(f"{stem}.{alias.name}")
                        except ImportError:
                            bad.append(f"{f.relative_to(ROOT)}:{node.lineno}: {stem} has no {alias.name}")
    assert not bad, "\n".join(bad)
