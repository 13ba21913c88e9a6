"""The packages depend downward only, as the table of docs/architecture.md ("Dependency
direction") says: the test reads that table and every import of the code (ast), and fails on
any import the table does not allow, so the page and the code cannot drift apart."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
OURS = frozenset(
    {"phaze", "phaze_common", "workloads", "arch_space", "ilp", "placement", "results"}
)
_ENTRY = re.compile(r"`([\w.]+)`(?:\s*\(`([\w.]+)` only\))?")


@dataclass(frozen=True)
class Allowed:
    """One entry of a row: a module (and its submodules), for ``only`` that module or all."""

    target: str
    only: str | None = None

    def allows(self, importer: str, name: str) -> bool:
        inside = name == self.target or name.startswith(self.target + ".")
        return inside and (self.only is None or importer == self.only)


def parse_table(text: str) -> dict[str, tuple[Allowed, ...]]:
    """package -> what it may import, from the section's table."""
    section = text.split("### Dependency direction", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, tuple[Allowed, ...]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not re.fullmatch(r"`[\w.]+`", cells[0]):
            continue
        package, allowed = cells[0].strip("`"), cells[1]
        if allowed.startswith("nothing"):
            entries: tuple[Allowed, ...] = ()
        elif allowed == "all of the above":
            entries = tuple(Allowed(p) for p in rows)
        else:
            entries = tuple(Allowed(t, only or None) for t, only in _ENTRY.findall(allowed))
            assert entries, f"cannot read the row of {package}: {allowed!r}"
        rows[package] = entries
    return rows


def imported_names(path: Path) -> set[str]:
    """The modules of ours a file imports, anywhere in it (absolute imports; for ``from m
    import x`` both ``m`` and ``m.x``, since ``x`` may be a submodule)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return {n for n in found if n.split(".")[0] in OURS}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def owner(module: str, table: dict[str, tuple[Allowed, ...]]) -> str:
    """The table row a module follows: its most specific package with a row."""
    return max((p for p in table if module == p or module.startswith(p + ".")), key=len)


def disallowed(package: str, table: dict[str, tuple[Allowed, ...]]) -> dict[str, list[str]]:
    """module -> the imports of it that the table does not allow (the modules of
    ``package`` that no more specific row claims)."""
    wrong = {}
    for path in sorted((ROOT / package.replace(".", "/")).rglob("*.py")):
        importer = module_name(path)
        if owner(importer, table) != package:
            continue
        bad = set()
        for name in imported_names(path):
            if name.split(".")[0] == "phaze_common" or owner(name, table) == package:
                continue
            # ``from m import x``: m.x need not be a module, so m allowed is enough
            if not any(a.allows(importer, n) for a in table[package] for n in _prefixes(name)):
                bad.add(name)
        if bad:  # ``from m import x`` names m alone
            wrong[importer] = sorted(n for n in bad if not any(n.startswith(f"{b}.") for b in bad))
    return wrong


def _prefixes(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(len(parts), 0, -1)]


TABLE = parse_table(DOC.read_text(encoding="utf-8"))


def test_the_table_names_every_package_once():
    assert sorted(p for p in TABLE if "." not in p) == sorted(OURS)


def test_the_model_and_validation_are_packages_of_their_own():
    """The model and the validation each have a row, so the application above them (the
    configuration, the API, sweeps and the CLI) can never be imported by them."""
    assert {"phaze.model", "phaze.validation"} <= set(TABLE)
    assert not any(a.allows("phaze.model.pipeline", "phaze.config") for a in TABLE["phaze.model"])


@pytest.mark.parametrize("package", sorted(TABLE))
def test_every_import_is_one_the_table_allows(package):
    modules = sorted((ROOT / package.replace(".", "/")).rglob("*.py"))
    assert modules, package
    assert disallowed(package, TABLE) == {}


def test_nothing_outside_the_cli_imports_the_cli():
    """The command line renders what the library computes: no module of the model, the
    sweep or the results reaches up into ``phaze.cli``."""
    wrong = {
        module_name(path): sorted(n for n in imported_names(path) if n.startswith("phaze.cli"))
        for package in sorted(OURS)
        for path in sorted((ROOT / package).rglob("*.py"))
        if not module_name(path).startswith("phaze.cli")
    }
    assert {m: w for m, w in wrong.items() if w} == {}


def test_the_checker_sees_an_upward_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "from phaze.model.pipeline import evaluate\nimport placement.dp\n"
        "def f():\n    from phaze.cli import validate_cmd\n"
    )
    assert imported_names(module) == {
        "phaze.model.pipeline",
        "phaze.model.pipeline.evaluate",
        "placement.dp",
        "phaze.cli",
        "phaze.cli.validate_cmd",
    }


def test_the_table_reader_and_its_limits():
    text = (
        "### Dependency direction\n\n| package | may import | why |\n|---|---|---|\n"
        "| `workloads` | nothing else of ours | x |\n"
        "| `placement` | `arch_space.perf.device`, `workloads.layer_graph` (`placement.adapt` "
        "only) | y |\n"
        "| `phaze` | all of the above | z |\n\n## Next\n| `ilp` | `phaze` | no |\n"
    )
    table = parse_table(text)
    assert table["workloads"] == ()
    assert table["phaze"] == (Allowed("workloads"), Allowed("placement"))
    device, layer_graph = table["placement"]
    assert device.allows("placement.types", "arch_space.perf.device")
    assert not device.allows("placement.types", "arch_space.perf")
    assert not device.allows("placement.types", "arch_space.perf.devices")
    assert layer_graph.allows("placement.adapt", "workloads.layer_graph")
    assert not layer_graph.allows("placement.dp", "workloads.layer_graph")
    assert "ilp" not in table


def test_the_validation_library_runs_without_the_command_line():
    """The validation figures (run, energy and fitted rows) are the model's: importing them
    loads neither ``phaze.cli`` nor click."""
    code = (
        "import sys, phaze.validation.energy, phaze.validation.runs, phaze.validation.rows\n"
        "print(sorted(m for m in sys.modules if m.startswith('phaze.cli') or m == 'click'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
