"""Run the examples in the workloads package's docstrings."""

import doctest
import importlib

import pytest

MODULES = [
    "workloads",
    "workloads.build",
    "workloads.flops",
    "workloads.memory",
    "workloads.model",
    "workloads.serving",
    "workloads.attention_ops",
    "workloads.setup",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0
