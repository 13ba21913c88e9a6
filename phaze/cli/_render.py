"""Shared rendering helpers for the CLI: one JSON document on stdout, aligned text tables.

Numbers for people are formatted by :mod:`phaze_common.units`, the formatter the report shares.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, is_dataclass
from enum import Enum
from types import MappingProxyType
from typing import Any, Final

import click
import numpy as np

from results.schema import SCHEMA_VERSION as POINTS_SCHEMA_VERSION

__all__ = ["JSON_SCHEMA_VERSIONS", "echo_json", "to_jsonable", "table"]

#: The ``schema_version`` of each command's ``--json`` document, by command (docs/architecture.md,
#: "JSON documents"). A document kind's version rises when its keys change meaning or go away.
#: ``export`` and ``pareto`` print stored points, whose keys are the store's columns, so
#: theirs is the store's schema version (:data:`results.schema.SCHEMA_VERSION`).
JSON_SCHEMA_VERSIONS: Final = MappingProxyType(
    {
        "sweep": 1,
        "evaluate": 1,
        "serve": 1,
        "export": POINTS_SCHEMA_VERSION,
        "pareto": POINTS_SCHEMA_VERSION,
        "workloads list": 1,
        "workloads show": 1,
        "arch list": 1,
        "arch show": 1,
        "space list": 1,
        "space show": 1,
        "schedule": 1,
        "place": 1,
        "validate gemm": 1,
        "validate megatron": 1,
        "validate energy": 1,
        "validate cost": 1,
        "validate runs": 1,
        "validate serve": 1,
    }
)


def to_jsonable(obj: Any) -> Any:
    """Plain JSON types from dataclasses, enums, numpy scalars/arrays, tuples and mappings."""
    if is_dataclass(obj) and not isinstance(obj, type):
        return to_jsonable(asdict(obj))
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def echo_json(doc: Mapping[str, Any]) -> None:
    """Print exactly one JSON object on stdout, with the running command's
    ``schema_version`` first (:data:`JSON_SCHEMA_VERSIONS`)."""
    kind = click.get_current_context().command_path.partition(" ")[2]
    version = JSON_SCHEMA_VERSIONS[kind]
    body = to_jsonable(doc)
    assert body.pop("schema_version", version) == version, (kind, doc["schema_version"])
    click.echo(json.dumps({"schema_version": version, **body}, indent=2))


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    """A plain aligned text table: numbers and formatted quantities (``$37.6k``, ``4.2 ms``)
    right-aligned, so a column of them lines up on its units."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    numeric = [
        bool(rows)
        and all(_is_number(r[i]) or r[i] in ("-", "") for r in rows)
        and any(r[i] not in ("-", "") for r in rows)
        for i in range(len(headers))
    ]
    lines = []
    for j, r in enumerate(cells):
        parts = [
            c.rjust(widths[i]) if numeric[i] and j else c.ljust(widths[i]) for i, c in enumerate(r)
        ]
        lines.append("  ".join(parts).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


# A quantity as phaze_common.units writes it: a number, maybe k/M/B/T, then ×, one unit or nothing.
_QUANTITY = re.compile(r"-?\$?(\d[\d.]*|∞)[kMBT]?(×| [^\s,]+)?")


def _is_number(x: Any) -> bool:
    if isinstance(x, str):
        return _QUANTITY.fullmatch(x) is not None
    return isinstance(x, int | float | np.number) and not isinstance(x, bool)
