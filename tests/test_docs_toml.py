"""Every TOML block of the README and docs/ loads, as written, through the loader its
tables name: a user who copies one gets a working file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from arch_space.config import load_accelerator
from arch_space.space import Space
from phaze.config import load_sweep_config

ROOT = Path(__file__).parents[1]
_BLOCK = re.compile(r"^```toml\n(.*?)^```", re.S | re.M)


def _blocks() -> list[tuple[str, str]]:
    out = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for i, m in enumerate(_BLOCK.finditer(doc.read_text("utf-8"))):
            out.append((f"{doc.relative_to(ROOT)}#{i}", m[1]))
    return out


def test_the_docs_have_toml_blocks():
    assert any(name.startswith("README.md") for name, _ in _blocks())


@pytest.mark.parametrize(("name", "text"), _blocks(), ids=[n for n, _ in _blocks()])
def test_every_toml_block_loads_as_written(name, text, tmp_path):
    path = tmp_path / "block.toml"
    path.write_text(text, "utf-8")
    tables = set(re.findall(r"^\[(\w+)\]", text, re.M))
    if tables & {"sweep", "solver", "scoring"}:
        cfg = load_sweep_config(path)
        assert cfg.workloads
    elif "space" in tables:
        assert Space.from_toml(path).summary().designs > 0
    elif "accelerator" in tables:
        assert load_accelerator(str(path)).peak_flops > 0
    else:
        pytest.fail(f"{name}: no loader for tables {sorted(tables)}")
