"""Helpers of the documentation tests: the anchors a Markdown page's headings get."""

from __future__ import annotations

import re

__all__ = ["anchors"]


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to
    hyphens (link targets inside a heading keep only their text).

    >>> sorted(anchors("# A b\\n## The layout ([x/y.py](../x/y.py))\\n"))
    ['a-b', 'the-layout-xypy']
    """
    out = set()
    for title in re.findall(r"^#+ (.+)$", markdown, re.M):
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title).lower()
        out.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return out
