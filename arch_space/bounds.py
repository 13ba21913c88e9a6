"""Physical ranges of the fields of accelerator and design-space TOML files.

A TOML value may be a well-formed positive number and still be no chip: ``clock_hz =
1.53e15`` (a PHz clock, 419 MW of peak power) or ``hbm_gib = 8e10``. The ranges in
``arch_space/data/bounds.toml`` (each with the parts it is measured against) catch such a
slip where the file is read; every field out of range is one problem naming the file, the
field, the value and the range, all reported in one ConfigError by the loaders
(:func:`arch_space.config.accelerator_from_mapping`, :class:`arch_space.space.Space`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from arch_space._data import number_problem, shipped_toml, toml_literal

__all__ = ["Bound", "field_bounds", "bound_problem", "bounded_number_problem"]


@dataclass(frozen=True, slots=True)
class Bound:
    """The closed range ``[low, high]`` of one field, in the unit of its TOML key."""

    low: float
    high: float
    unit: str
    source: str

    def text(self) -> str:
        """``[1e+08, 1e+10] Hz``: the range as messages and docs print it."""
        unit = f" {self.unit}" if self.unit else ""
        return f"[{self.low:g}, {self.high:g}]{unit}"


@functools.cache
def field_bounds(section: str) -> Mapping[str, Bound]:
    """The ranges of the ``[accelerator]`` or ``[space]`` fields, by TOML key (a space's
    designs are accelerators: it takes their ranges and adds its own).

    >>> field_bounds("accelerator")["clock_hz"].text()
    '[1e+08, 1e+10] Hz'
    >>> field_bounds("space")["budget_mm2"].text(), field_bounds("space")["hbm_gib"].text()
    ('[1, 70000] mm2', '[0.0625, 4096] GiB')
    """
    data = shipped_toml("bounds.toml")
    table = {**data["accelerator"], **(data[section] if section == "space" else {})}
    return MappingProxyType(
        {
            k: Bound(float(v["min"]), float(v["max"]), v["unit"], v["source"])
            for k, v in table.items()
        }
    )


def bound_problem(
    where: str, section: str, key: str, value: Any, name: str | None = None
) -> str | None:
    """The problem with ``key = value`` if it is a finite number outside its physical range,
    else None (a value that is not a finite number is the type checks' to name); ``name`` is
    how the message names the field when it is not ``key``.

    >>> bound_problem("a.toml [accelerator]", "accelerator", "clock_hz", 1.53e15)
    'a.toml [accelerator]: clock_hz = 1.53e+15 is outside the physical range [1e+08, 1e+10] Hz'
    >>> bound_problem("a.toml [accelerator]", "accelerator", "clock_hz", 1.41e9) is None
    True
    """
    b = field_bounds(section).get(key)
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if b is None or not number or not math.isfinite(value) or b.low <= value <= b.high:
        return None
    shown = toml_literal(value)
    return f"{where}: {name or key} = {shown} is outside the physical range {b.text()}"


def bounded_number_problem(
    where: str, key: str, value: Any, *, strict: bool = True, section: str = "space"
) -> str | None:
    """The problem with ``key = value`` if it is not a finite number above 0 (at least 0
    unless ``strict``: :func:`arch_space._data.number_problem`), or is outside its physical
    range (:func:`bound_problem`), else None."""
    return number_problem(where, key, value, strict=strict) or bound_problem(
        where, section, key, value
    )
