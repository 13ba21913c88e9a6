"""Number formats of the tensor cores: their rates, MAC area and energy (docs/models.md).

An accelerator's :attr:`~arch_space.accelerator.Accelerator.formats` lists the formats its
tensor cores run, each with its MACs per cycle relative to bf16. A preset takes them from its
published dense peaks (``data/formats.toml`` (a): H100 fp8 1,979 of bf16 989 TFLOP/s is 2x);
a searched design from its space's format set and the format options (``data/formats.toml``
(d)), which also give each format's MAC area and energy relative to a bf16 MAC.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType
from typing import Final

from arch_space._data import shipped_toml
from phaze_common.errors import ConfigError
from workloads.ops import FORMATS

__all__ = [
    "BASE_FORMAT",
    "FormatOption",
    "format_options",
    "format_set_rates",
    "preset_format_rates",
    "format_lane_factor",
    "format_problem",
]

BASE_FORMAT: Final = "bf16"
_DATA_FILE: Final = "formats.toml"


@dataclass(frozen=True, slots=True)
class FormatOption:
    """One format a tensor core may add: its rate, MAC area and MAC energy relative to bf16."""

    format: str
    relative_rate: float
    relative_area: float
    relative_energy: float


@cache
def format_options() -> Mapping[str, FormatOption]:
    """The format options of ``data/formats.toml`` (d), by format."""
    rows = shipped_toml(_DATA_FILE)["format_option"]
    out = {
        r["format"]: FormatOption(
            r["format"],
            float(r["relative_rate"]),
            float(r["relative_area"]),
            float(r["relative_energy"]),
        )
        for r in rows
    }
    missing = set(FORMATS) - set(out)
    if missing:
        raise ConfigError(f"arch_space/data/{_DATA_FILE}: no [[format_option]] for {missing}")
    return MappingProxyType(out)


def format_set_rates(formats: tuple[str, ...]) -> tuple[tuple[str, float], ...]:
    """(format, relative rate) pairs of a searched design running ``formats`` (bf16 first)."""
    options = format_options()
    names = (BASE_FORMAT, *(f for f in FORMATS if f in formats and f != BASE_FORMAT))
    return tuple((f, options[f].relative_rate) for f in names)


@cache
def preset_format_rates(name: str) -> tuple[tuple[str, float], ...] | None:
    """(format, dense peak over the bf16 peak) of preset ``name`` for the formats Phaze
    models that its data sheet lists as supported; None for a preset without peaks (where
    two sources disagree the first row counts)."""
    peaks: dict[str, float] = {}
    for row in shipped_toml(_DATA_FILE)["peak"]:
        if row["preset"] == name and row["supported"] and row["format"] in FORMATS:
            peaks.setdefault(row["format"], float(row["dense_ops_per_s"]))
    if BASE_FORMAT not in peaks:
        return None
    base = peaks[BASE_FORMAT]
    return tuple((f, peaks[f] / base) for f in FORMATS if f in peaks)


def format_lane_factor(formats: tuple[tuple[str, float], ...]) -> float:
    """Area of the lanes beyond bf16, in bf16 MACs per bf16 MAC: the sum over the further
    formats of rate x relative MAC area (dedicated lanes)."""
    options = format_options()
    return sum(rate * options[f].relative_area for f, rate in formats if f != BASE_FORMAT)


def format_problem(owner: str, formats: object) -> str | None:
    """Why ``formats`` is not a valid (format, rate) tuple with bf16 first at rate 1, or None."""
    ok = (
        isinstance(formats, tuple)
        and formats
        and all(
            isinstance(p, tuple)
            and len(p) == 2
            and p[0] in FORMATS
            and isinstance(p[1], float)
            and p[1] > 0
            for p in formats
        )
        and formats[0] == (BASE_FORMAT, 1.0)
        and len({p[0] for p in formats}) == len(formats)
    )
    if ok:
        return None
    return (
        f"{owner}: formats = {formats!r} must be distinct (format, rate) pairs of "
        f"{', '.join(FORMATS)}, bf16 first at rate 1.0"
    )
