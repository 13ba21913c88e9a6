"""docs/extending.md names real files: every backticked path and every relative link in it
exists, so the page cannot point a contributor at a file that moved or was renamed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from doclinks import anchors

ROOT = Path(__file__).parents[1]
DOC = ROOT / "docs" / "extending.md"
TEXT = DOC.read_text("utf-8")

# a backticked repository path: no spaces, at least one folder
_PATH = re.compile(r"`([\w.-]+(?:/[\w.-]+)+/?)`")
_LINK = re.compile(r"\]\((?!https?:)([^)#\s]+)(#[^)]*)?\)")


def test_the_page_names_the_files_of_each_extension():
    names = set(_PATH.findall(TEXT))
    assert {"placement/layout.py", "arch_space/accelerator.py", "workloads/serving.py"} <= names
    assert {"workloads/data/frameworks.toml", "workloads/hf.py", "ilp/timing.py"} <= names


@pytest.mark.parametrize("path", sorted(set(_PATH.findall(TEXT))))
def test_every_backticked_path_exists(path):
    assert (ROOT / path).exists(), f"docs/extending.md names {path}, which does not exist"


@pytest.mark.parametrize(("target", "anchor"), sorted(set(_LINK.findall(TEXT))))
def test_every_relative_link_exists(target, anchor):
    page = DOC.parent / target
    assert page.exists(), f"docs/extending.md links {target}, which is missing"
    if anchor:
        assert anchor[1:] in anchors(page.read_text("utf-8")), f"{target}{anchor}: no such heading"
