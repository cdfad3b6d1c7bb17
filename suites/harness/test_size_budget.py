"""The size budget of harness/: no module over 400 lines, no function (methods and nested functions included)
over 80 lines, counted from its ``def`` line (decorators excluded) to its last line.  A module or function
past the budget is split by responsibility, not exempted."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "harness"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80


def _modules() -> list[Path]:
    return sorted(HARNESS.rglob("*.py"))


def _functions(path: Path) -> list[tuple[str, int, int]]:
    """(qualified name, first line, length) of every function in ``path``, nested ones included."""
    out = []

    def visit(node: ast.AST, prefix: str):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                out.append((name, child.lineno, child.end_lineno - child.lineno + 1))
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(), str(path)), "")
    return out


def test_the_checker_counts_methods_and_nested_functions(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("class C:\n    def m(self):\n        def inner():\n            pass\n        return 1\n"
                 "async def a():\n    pass\n")
    assert _functions(f) == [("C.m", 2, 4), ("C.m.inner", 3, 2), ("a", 6, 2)]


def test_no_harness_module_is_over_the_line_budget():
    over = [(p.relative_to(ROOT), n) for p in _modules()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES]
    assert not over, (f"modules over {MAX_MODULE_LINES} lines (split them by responsibility): "
                      + "; ".join(f"{p}: {n} lines" for p, n in over))


def test_no_harness_function_is_over_the_line_budget():
    over = [(p.relative_to(ROOT), name, line, n) for p in _modules() for name, line, n in _functions(p)
            if n > MAX_FUNCTION_LINES]
    assert not over, (f"functions over {MAX_FUNCTION_LINES} lines: "
                      + "; ".join(f"{p}:{line} {name}: {n} lines" for p, name, line, n in over))
