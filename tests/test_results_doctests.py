"""The docstring examples of results/ run as tests (CI collects tests/ only)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ("results", "results.display", "results.pareto", "results.store")


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
