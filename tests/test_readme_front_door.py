"""The README is a front door: at most 1,500 words outside code blocks, the quick start's
two commands first, and links that lead somewhere (every relative link and its anchor)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from doclinks import anchors

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text("utf-8")
_FENCE = re.compile(r"^```.*?^```[^\n]*$", re.S | re.M)
_LINK = re.compile(r"\]\((?!https?:)([^)#\s]+)?(#[^)]*)?\)")
MAX_WORDS = 1500


def prose_words(markdown: str) -> int:
    """Words outside ``` fences (tables and inline code count)."""
    return len(_FENCE.sub("", markdown).split())


def test_prose_words_leave_out_code_blocks():
    assert prose_words("one two\n```\nthree four five\n```\nsix\n") == 3


def test_the_readme_is_at_most_1500_words_outside_code():
    assert prose_words(README) <= MAX_WORDS


def test_the_quick_start_opens_with_the_install_and_the_ci_command():
    blocks = re.findall(r"^```\n(.*?)^```", README, re.S | re.M)
    assert blocks[0].strip().endswith(".venv/bin/phaze sweep")
    assert blocks[1].startswith("python3 -m venv .venv") and "pytest" in blocks[1]


@pytest.mark.parametrize(("target", "anchor"), sorted(set(_LINK.findall(README))))
def test_every_relative_link_leads_somewhere(target, anchor):
    page = ROOT / target if target else ROOT / "README.md"
    assert page.exists(), target
    if anchor:
        assert anchor[1:] in anchors(page.read_text("utf-8")), f"{target}{anchor}"
