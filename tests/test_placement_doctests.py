"""Run the Examples in the placement, workloads and ilp docstrings (pytest does not collect
doctests here)."""

import doctest
import importlib
import pkgutil

import pytest

import ilp
import placement
import workloads

MODULES = sorted(
    f"{pkg.__name__}.{info.name}"
    for pkg in (placement, workloads, ilp)
    for info in pkgutil.iter_modules(pkg.__path__)
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
