"""Phaze: co-design of an ML accelerator and the parallel placement of LLM training.

The public API (``phaze.search``, ``phaze.evaluate``, ``phaze.serve``,
``phaze.serve_capacity``) is imported lazily, so that importing
``phaze`` (and starting the CLI) does not pull in the whole tool.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

__all__ = ["__version__", "evaluate", "search", "serve", "serve_capacity"]

_LAZY = {
    "search": "phaze.api",
    "evaluate": "phaze.api",
    "serve": "phaze.api",
    "serve_capacity": "phaze.api",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'phaze' has no attribute {name!r}")
