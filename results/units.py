"""The one formatter of numbers for people, as the results package and the CLI import it.

It is :mod:`phaze_common.units` (the leaf package, so that the libraries' own messages use
it too); see there for the units and rules.
"""

from __future__ import annotations

from phaze_common.units import (
    MAX_DIGITS,
    UNIT_FAMILIES,
    fmt_bytes,
    fmt_carbon,
    fmt_column,
    fmt_count,
    fmt_energy,
    fmt_pair,
    fmt_percent,
    fmt_quantity,
    fmt_ratio,
    fmt_si,
    fmt_tcdp,
    fmt_time,
    fmt_usd,
)

__all__ = [
    "UNIT_FAMILIES",
    "MAX_DIGITS",
    "fmt_quantity",
    "fmt_pair",
    "fmt_time",
    "fmt_energy",
    "fmt_carbon",
    "fmt_tcdp",
    "fmt_usd",
    "fmt_percent",
    "fmt_bytes",
    "fmt_count",
    "fmt_ratio",
    "fmt_si",
    "fmt_column",
]
