"""The project's size limits (docs/development.md): no module of its packages over 600 lines
and no function over 100, so each stays one concept that reads on a screen or two."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("phaze", "phaze_common", "workloads", "arch_space", "ilp", "placement", "results")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 100


def _modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def module_lines(path: Path) -> int:
    """Lines of a module's text."""
    return len(path.read_text(encoding="utf-8").splitlines())


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """Functions (and methods) of ``source`` longer than ``limit`` lines, from their ``def``
    line to their last, by qualified name."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = prefix
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}."
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = child.end_lineno - child.lineno + 1
                if lines > limit:
                    found[name[:-1]] = lines
            visit(child, name)

    visit(ast.parse(source), "")
    return found


def test_the_packages_are_found():
    assert len(_modules()) > 50


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_exceeds_the_line_limit(package):
    long = {
        str(p.relative_to(ROOT)): module_lines(p)
        for p in sorted((ROOT / package).rglob("*.py"))
        if module_lines(p) > MAX_MODULE_LINES
    }
    assert long == {}


def _long_functions_of_the_packages() -> dict[str, int]:
    return {
        f"{p.relative_to(ROOT)}:{name}": lines
        for p in _modules()
        for name, lines in long_functions(p.read_text(encoding="utf-8")).items()
    }


def test_no_function_exceeds_the_line_limit():
    assert _long_functions_of_the_packages() == {}


def test_the_checker_counts_a_long_nested_function():
    body = "\n".join(f"        x{i} = {i}" for i in range(100))
    source = f"class A:\n    def f(self):\n{body}\n\n\ndef g():\n    return 1\n"
    assert long_functions(source) == {"A.f": 101}
    assert long_functions(source, limit=101) == {}
