"""Number formats of the tensor cores: their rates, MAC area and energy (docs/models.md).

An accelerator's :attr:`~arch_space.accelerator.Accelerator.formats` lists the formats its
tensor cores run, each with its MACs per cycle relative to bf16. A preset takes them from its
published dense peaks (``data/formats.toml`` (a): H100 fp8 1,979 of bf16 989 TFLOP/s is 2x);
a searched design from its space's format set and the format options (``data/formats.toml``
(d)), which also give each format's MAC area and energy relative to a bf16 MAC.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType
from typing import Any, Final

import numpy as np

from arch_space._data import shipped_toml
from phaze_common.errors import ConfigError
from workloads.ops import FORMATS, HALF_FORMATS
from workloads.precision import recipe

__all__ = [
    "BASE_FORMAT",
    "FormatOption",
    "format_options",
    "format_set_rates",
    "preset_format_rates",
    "peak_format_rates",
    "format_lane_factor",
    "format_problem",
    "format_set_problems",
    "format_set_name",
    "FormatSetSummary",
    "format_set_summaries",
    "check_precision",
]

BASE_FORMAT: Final = "bf16"
_DATA_FILE: Final = "formats.toml"


@dataclass(frozen=True, slots=True)
class FormatOption:
    """One format a tensor core may add: its rate, MAC area and MAC energy relative to bf16,
    and the bytes of one operand element in it."""

    format: str
    relative_rate: float
    relative_area: float
    relative_energy: float
    element_bytes: float


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
            float(r["element_bytes"]),
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
    """(format, dense peak over the base peak) of preset ``name`` for the formats Phaze
    models that its data sheet lists as supported, the base first: bf16, or fp16 on a part
    without bf16 (the V100); None for a preset without peaks (where two sources disagree the
    first row counts)."""
    return peak_format_rates([r for r in shipped_toml(_DATA_FILE)["peak"] if r["preset"] == name])


def peak_format_rates(rows: Iterable[Mapping[str, Any]]) -> tuple[tuple[str, float], ...] | None:
    """(format, dense peak over the base peak) of one chip's ``[[peak]]`` rows, as
    :func:`preset_format_rates`."""
    peaks: dict[str, float] = {}
    for row in rows:
        if row["supported"] and row["format"] in _TENSOR_FORMATS:
            peaks.setdefault(row["format"], float(row["dense_ops_per_s"]))
    base = next((f for f in HALF_FORMATS if f in peaks), None)
    if base is None:
        return None
    return tuple((f, peaks[f] / peaks[base]) for f in _ordered(base) if f in peaks)


#: Every format a tensor core may list: the 16-bit ones, then the narrower GEMM formats.
_TENSOR_FORMATS: Final = (*HALF_FORMATS, *FORMATS[1:])


def _ordered(base: str) -> tuple[str, ...]:
    """The tensor formats with ``base`` first."""
    return (base, *(f for f in _TENSOR_FORMATS if f != base))


def format_lane_factor(formats: tuple[tuple[str, float], ...]) -> float:
    """Area of the lanes beyond the 16-bit ones, in bf16 MACs per bf16 MAC: the sum over the
    narrower formats of rate x relative MAC area (dedicated lanes; fp16 and bf16 share the
    16-bit MAC, both Horowitz's fp16 multiply + fp32 add)."""
    options = format_options()
    return float(
        sum(rate * options[f].relative_area for f, rate in formats if f not in HALF_FORMATS)
    )


def format_problem(owner: str, formats: object) -> str | None:
    """Why ``formats`` is not a valid (format, rate) tuple with a 16-bit base first at rate 1
    (bf16, or fp16 on a part without bf16) and narrower formats after it, or None."""
    ok = (
        isinstance(formats, tuple)
        and formats
        and all(
            isinstance(p, tuple)
            and len(p) == 2
            and p[0] in _TENSOR_FORMATS
            and isinstance(p[1], float)
            and p[1] > 0
            for p in formats
        )
        and formats[0] in tuple((f, 1.0) for f in HALF_FORMATS)
        and all(p[0] in FORMATS[1:] for p in formats[1:] if p[0] != "fp16")
        and len({p[0] for p in formats}) == len(formats)
    )
    if ok:
        return None
    return (
        f"{owner}: formats = {formats!r} must be distinct (format, rate) pairs of "
        f"{', '.join(_TENSOR_FORMATS)}, bf16 (or fp16) first at rate 1.0"
    )


def format_set_problems(sets: Any, where: str) -> list[str]:
    """Why ``sets`` is not a valid tuple of format sets of a space (``where`` names it)."""
    rule = (
        f"{where}: formats = {sets!r} must be a non-empty list of format sets, each a list "
        f"of distinct formats of {', '.join(FORMATS)} holding {BASE_FORMAT}"
    )
    if not isinstance(sets, tuple) or not sets:
        return [rule]
    for fs in sets:
        if not (
            isinstance(fs, tuple)
            and BASE_FORMAT in fs
            and all(f in FORMATS for f in fs)
            and len(set(fs)) == len(fs)
        ):
            return [rule]
    if len(set(sets)) != len(sets):
        return [f"{where}: formats = {sets!r} lists a format set twice"]
    return []


def format_set_name(fs: tuple[str, ...]) -> str:
    """A format set as ``bf16+fp8``."""
    return "+".join(fs)


@dataclass(frozen=True, slots=True)
class FormatSetSummary:
    """One format set of a space: its designs, its lanes' area beyond bf16 per bf16 MAC, and
    the area range of its designs (mm2)."""

    formats: str
    designs: int
    lane_area_fraction: float
    area_mm2_min: float
    area_mm2_max: float


def format_set_summaries(
    sets: tuple[tuple[str, ...], ...], design_sets: tuple[tuple[str, ...], ...], area: Any
) -> tuple[FormatSetSummary, ...]:
    """Per format set of a space, its designs (``design_sets[i]`` is design i's set, whose
    area is ``area[i]``), lane area and area range."""
    out = []
    for fs in sets:
        which = np.fromiter((x == fs for x in design_sets), dtype=bool, count=len(design_sets))
        mine = np.asarray(area)[which]
        out.append(
            FormatSetSummary(
                format_set_name(fs),
                int(mine.size),
                format_lane_factor(format_set_rates(fs)),
                float(mine.min()) if mine.size else float("nan"),
                float(mine.max()) if mine.size else float("nan"),
            )
        )
    return tuple(out)


def check_precision(acc: Any, precision: str, what: str | None = None) -> None:
    """Raise a ConfigError naming the formats ``acc`` runs when its tensor cores have none
    for the GEMM format of recipe ``precision`` (``what`` names the choice that asked for
    it, by default ``precision <recipe>``)."""
    fmt = recipe(precision).gemm_format
    if fmt not in acc.format_names:
        raise ConfigError(
            f"{what or f'precision {precision}'} needs {fmt} tensor cores; "
            f"{acc.name or 'the design'} "
            f"runs {', '.join(acc.format_names)}"
        )
