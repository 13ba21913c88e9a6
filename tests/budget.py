"""Example budgets of the heavier property tests (brute force against clever code).

A test names its full example count with ``@budget(n)`` in place of
``@settings(max_examples=n)``: the default suite runs a quarter of it (at least
:data:`MIN_EXAMPLES`) so that it stays fast, and the slow run (``-m slow``, which loads the
``thorough`` hypothesis profile in conftest.py) runs the same test with all ``n`` examples.
The ``budget`` marker is how conftest.py puts these tests into the slow run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import settings

__all__ = [
    "DEFAULT_SHARE",
    "MIN_EXAMPLES",
    "THOROUGH",
    "THOROUGH_MAX_EXAMPLES",
    "budget",
    "is_thorough",
]

THOROUGH = "thorough"  # the hypothesis profile of the slow run
DEFAULT_SHARE = 4  # the default suite runs 1 / DEFAULT_SHARE of a budget
MIN_EXAMPLES = 10
# the thorough profile's count for tests that name none: hypothesis' 100, times the share
THOROUGH_MAX_EXAMPLES = 100 * DEFAULT_SHARE


def is_thorough() -> bool:
    """Whether the ``thorough`` profile is loaded (the slow run)."""
    return settings.default.max_examples == THOROUGH_MAX_EXAMPLES


def budget(full: int, **kwargs: Any) -> Callable:
    """``settings(max_examples=...)`` for a property test whose full count is ``full``; other
    keyword arguments go to ``settings`` as they are."""
    n = full if is_thorough() else max(MIN_EXAMPLES, full // DEFAULT_SHARE)

    def decorate(test: Callable) -> Callable:
        return pytest.mark.budget(settings(max_examples=n, **kwargs)(test))

    return decorate
