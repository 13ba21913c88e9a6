"""The docstring examples of phaze_common/ run as tests (CI collects tests/ only)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ("phaze_common.errors", "phaze_common.limits", "phaze_common.files", "phaze_common.units")


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
