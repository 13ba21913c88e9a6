"""Results of a sweep: the SQLite store, Pareto fronts, plots, the HTML report and export.

This package works on plain records (flat dicts keyed by the column names of
:mod:`results.schema`) and imports nothing of Phaze's but :mod:`phaze_common.errors`.

>>> from results import pareto
>>> pts = [{"key": "a", "tokens_per_s": 9.0, "system_cost_usd": 3.0},
...        {"key": "b", "tokens_per_s": 5.0, "system_cost_usd": 4.0}]
>>> [p["key"] for p in pareto(pts, ["tokens_per_s", "system_cost_usd"])]
['a']

The plotting and report modules load matplotlib, so they are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from results.export import json_document, to_json, write_csv
from results.pareto import (
    Objective,
    best,
    best_per_design,
    nondominated,
    pareto,
    parse_objective,
    rank,
)
from results.schema import AGGREGATE_WORKLOAD, COLUMNS, POINT_COLUMNS, SCHEMA_VERSION, Column
from results.store import STORE_FILENAME, Store, load

__all__ = [
    "AGGREGATE_WORKLOAD",
    "COLUMNS",
    "POINT_COLUMNS",
    "SCHEMA_VERSION",
    "STORE_FILENAME",
    "Column",
    "Objective",
    "Store",
    "best",
    "best_per_design",
    "json_document",
    "load",
    "nondominated",
    "pareto",
    "parse_objective",
    "rank",
    "standard_plots",
    "to_json",
    "write_csv",
    "write_plots",
    "write_report",
]

_LAZY = {
    "write_report": "results.report",
    "standard_plots": "results.plots",
    "write_plots": "results.plots",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'results' has no attribute {name!r}")
