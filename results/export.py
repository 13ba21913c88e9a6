"""CSV and JSON export of result points, columns in :data:`results.schema.POINT_COLUMNS` order.

CSV holds one row per point with every column; empty cells are missing values, ``feasible`` is
1 or 0 and ``placement`` stays JSON text. JSON is one document
``{"schema_version": SCHEMA_VERSION, "units": {...}, "points": [...]}`` (the store's schema
version) whose points have the same keys as the CSV header, ``feasible`` as a boolean and
``placement`` as a JSON object (or null), and whose ``units`` give each column's unit
(``tcdp``: kgCO2e·s), so no key's unit is left to guess. A paired serving sweep's
prefill-decode design pairs export the same way, in :data:`results.schema.PAIR_COLUMNS`
order (``{"schema_version", "units", "pairs"}`` in JSON).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from typing import IO, Any

from results._plain import to_plain
from results.schema import (
    COLUMN_NAMES,
    COLUMNS,
    PAIR_COLUMN_NAMES,
    PAIR_COLUMNS,
    SCHEMA_VERSION,
)

__all__ = [
    "export_record",
    "write_csv",
    "json_document",
    "to_json",
    "pair_record",
    "write_pairs_csv",
    "pairs_document",
]


def export_record(p: Mapping[str, Any]) -> dict[str, Any]:
    """One point with exactly the schema's keys, in order, placement parsed from JSON text."""
    rec = {name: p.get(name) for name in COLUMN_NAMES}
    rec["feasible"] = None if rec["feasible"] is None else bool(rec["feasible"])
    if isinstance(rec["placement"], str):
        try:
            rec["placement"] = json.loads(rec["placement"])
        except ValueError:
            pass  # not JSON: keep the text as stored
    return to_plain(rec)


def write_csv(
    points: Sequence[Mapping[str, Any]], stream: IO[str], columns: Sequence[str] = COLUMN_NAMES
) -> None:
    """Write the points as CSV (header = column names) to a text stream."""
    w = csv.writer(stream, lineterminator="\n")
    w.writerow(columns)
    for p in points:
        row = []
        for name in columns:
            v = p.get(name)
            if isinstance(v, bool):
                v = int(v)
            elif name == "placement" and v is not None and not isinstance(v, str):
                v = json.dumps(to_plain(v), sort_keys=True)
            row.append("" if v is None else v)
        w.writerow(row)


def json_document(points: Sequence[Mapping[str, Any]], **extra: Any) -> dict[str, Any]:
    """``{"schema_version": ..., "units": ..., **extra, "points": [export_record(p), ...]}``."""
    return {
        "schema_version": SCHEMA_VERSION,
        "units": {name: COLUMNS[name].unit for name in COLUMN_NAMES if COLUMNS[name].unit},
        **to_plain(extra),
        "points": [export_record(p) for p in points],
    }


def to_json(points: Sequence[Mapping[str, Any]], **extra: Any) -> str:
    """:func:`json_document` as indented JSON text."""
    return json.dumps(json_document(points, **extra), indent=2, allow_nan=False)


def pair_record(p: Mapping[str, Any]) -> dict[str, Any]:
    """One prefill-decode pair with exactly the pair table's keys, in order."""
    return to_plain({name: p.get(name) for name in PAIR_COLUMN_NAMES})


def write_pairs_csv(pairs: Sequence[Mapping[str, Any]], stream: IO[str]) -> None:
    """Write prefill-decode pairs as CSV (header = the pair table's column names)."""
    write_csv(pairs, stream, PAIR_COLUMN_NAMES)


def pairs_document(pairs: Sequence[Mapping[str, Any]], **extra: Any) -> dict[str, Any]:
    """``{"schema_version": ..., "units": ..., **extra, "pairs": [pair_record(p), ...]}``:
    a serving sweep's prefill-decode design pairs, units as :func:`json_document` gives them."""
    return {
        "schema_version": SCHEMA_VERSION,
        "units": {c.name: c.unit for c in PAIR_COLUMNS if c.unit},
        **to_plain(extra),
        "pairs": [pair_record(p) for p in pairs],
    }
