"""Run the Examples in arch_space's docstrings (pytest does not collect doctests here)."""

import doctest
import importlib

import pytest

MODULES = [
    "arch_space",
    "arch_space.tech",
    "arch_space.area",
    "arch_space.presets",
    "arch_space.carbon",
    "arch_space.cost",
    "arch_space.power_limit",
    "arch_space.space",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
