"""The packages depend downward only (docs/architecture.md, "Dependency direction"): a lower
package never imports ``phaze`` or a package above it, so each can be used and tested alone."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = frozenset(
    {"phaze", "phaze_common", "workloads", "arch_space", "ilp", "placement", "results"}
)

# package -> the packages of ours it may import
ALLOWED = {
    "phaze_common": set(),
    "workloads": {"phaze_common"},
    "arch_space": {"phaze_common", "workloads"},
    "ilp": {"phaze_common", "arch_space", "workloads"},
    "placement": {"phaze_common", "arch_space", "workloads"},
    "results": {"phaze_common", "ilp"},
}


def _imports(path: Path) -> set[str]:
    """Top-level packages of ours that a module imports (absolute imports only)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found & OURS


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_lower_package_imports_only_what_lies_below_it(package):
    modules = sorted((ROOT / package).rglob("*.py"))
    assert modules, package
    wrong = {
        str(m.relative_to(ROOT)): sorted(_imports(m) - ALLOWED[package] - {package})
        for m in modules
    }
    assert {m: w for m, w in wrong.items() if w} == {}


def test_the_checker_sees_an_upward_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from phaze.pipeline import evaluate\nimport placement.dp\n")
    assert _imports(module) == {"phaze", "placement"}
