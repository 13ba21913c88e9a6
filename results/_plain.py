"""Plain JSON values from whatever a sweep hands the store (numpy scalars, enums, dataclasses)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from enum import Enum
from pathlib import PurePath
from typing import Any

__all__ = ["to_plain", "dumps"]


def to_plain(obj: Any) -> Any:
    """JSON-ready values: mappings get str keys, sequences become lists, NaN/inf become None."""
    if is_dataclass(obj) and not isinstance(obj, type):
        return to_plain(asdict(obj))
    if isinstance(obj, Enum):
        return to_plain(obj.value)
    if isinstance(obj, Mapping):
        return {str(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        items = [to_plain(v) for v in obj]
        return sorted(items, key=repr) if isinstance(obj, set | frozenset) else items
    if isinstance(obj, PurePath):
        return str(obj)
    if hasattr(obj, "tolist") and callable(obj.tolist):  # numpy scalars and arrays
        return to_plain(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def dumps(obj: Any, *, indent: int | None = None) -> str:
    """Deterministic JSON text (sorted keys) of :func:`to_plain` of ``obj``."""
    return json.dumps(to_plain(obj), sort_keys=True, indent=indent, allow_nan=False)
