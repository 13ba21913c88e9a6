"""The accelerator design space: parameter choices, an area budget, and its valid designs.

Like the reference (msr-fiddle/phaze, Estimator/architecture.py), every parameter is a power of
two, the vector-core width equals the tensor-core width unless given separately, and a design
is kept when its modelled area lies within ``[area_fraction_min, area_fraction_max]`` of the
budget, except that designs with a single tensor or vector core are kept however small
(``keep_single_core``). The budget defaults to the area of the ``ref-max`` preset at the
space's node. Beside the area budget, a power budget, by default the board limit of the node's
era (``data/system.toml``): a design whose power under tensor load at the space's clock
(:func:`arch_space.area.tensor_load_power_w`) exceeds ``power_budget_w`` is power-capped like a
board at its limit: it runs at the clock whose power fits, dynamic power scaling with the clock
at a fixed voltage (leakage does not; a lower voltage would save more, so the clock is a lower
bound), and its peak falls with it. A design whose leakage alone exceeds the budget is dropped.
A space lists the number-format sets of its tensor cores (``formats``, bf16 alone by default):
every grid point is a design per set, its lanes beyond bf16 adding area
(:func:`arch_space.formats.format_lane_factor`) and its power under tensor load taken at
its most power-hungry format. The capped clock is a design's share of what a measured chip's
fitted training clock holds; the rest it pays as :mod:`arch_space.perf.residual`'s residual.
The grid's area is one vectorised call (:func:`arch_space.area.area_terms_mm2`);
Accelerators are built only for the survivors.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
import math
import numbers
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from arch_space._data import is_power_of_two, read_toml, toml_literal, unknown_keys
from arch_space.accelerator import ACCELERATOR_FIELDS, Accelerator
from arch_space.area import (
    area_mm2,
    area_terms_mm2,
    capped_clock_fraction,
    hbm_stacks_for,
    tensor_load_power_w,
)
from arch_space.bounds import bounded_number_problem
from arch_space.config import ACCELERATOR_TOML_KEYS
from arch_space.formats import (
    BASE_FORMAT,
    FormatSetSummary,
    format_lane_factor,
    format_set_name,
    format_set_problems,
    format_set_rates,
    format_set_summaries,
)
from arch_space.presets import preset
from arch_space.system import power_budget_w
from arch_space.tech import known_nodes, tech_node, unknown_node_problem
from phaze_common.errors import ConfigError, unknown_name
from workloads.ops import FORMATS

__all__ = [
    "Space",
    "SpaceSummary",
    "space_names",
    "load_space",
    "design_id",
    "PARAMETERS",
]

_MIB = 2**20
_GIB = 2**30
# a space's kept designs: per-parameter values, areas, grid size, power, clock share, why none
_Kept = tuple[list[tuple[Any, ...]], np.ndarray, int, np.ndarray, np.ndarray, str]
_REF_MAX = preset("ref-max")
_BF16_ONLY = _REF_MAX.formats

# Allowed powers of two per parameter, as (TOML key, scale to SI, low, high). The core and
# array ranges and the buffer range are the reference's (max_acc_config_per_dim); the vector
# width may range as widely as the core count.
_POW2: Mapping[str, tuple[str, int, int, int]] = MappingProxyType(
    {
        "num_tc": ("num_tc", 1, 1, 4096),
        "tc_rows": ("tc_rows", 1, 2, 256),
        "tc_cols": ("tc_cols", 1, 2, 256),
        "num_vc": ("num_vc", 1, 1, 4096),
        "vc_lanes": ("vc_lanes", 1, 2, 4096),
        "glb_bytes": ("glb_mib", _MIB, 1, 1024),
    }
)
# ``hbm_stacks`` (derived per design) and ``dies`` (a space's designs are single dies), then the
# space's own.
_TOML_FIELD: Mapping[str, tuple[str, int | None]] = MappingProxyType(
    {k: v for k, v in ACCELERATOR_TOML_KEYS.items() if k not in ("hbm_stacks", "dies")}
)
_TOML_KEYS: tuple[str, ...] = (
    *_TOML_FIELD,
    "formats",
    "budget_mm2",
    "power_budget_w",
    "area_fraction_min",
    "area_fraction_max",
    "keep_single_core",
)
_SHIPPED: Mapping[str, str] = MappingProxyType(
    {"default": "space_default.toml", "tiny": "space_tiny.toml", "reticle": "space_reticle.toml"}
)


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _problems(s: Space, where: str) -> list[str]:
    """Every rule ``s`` breaks, as messages naming ``where``, the key, the value and the rule."""
    out: list[str] = []
    for f, (key, scale, lo, hi) in _POW2.items():
        values = getattr(s, f)
        if not values and f != "vc_lanes":
            out.append(f"{where}: {key} must list at least one value")
        for v in values:
            ok = _is_count(v) and v % scale == 0 and is_power_of_two(v // scale)
            if not (ok and lo <= v // scale <= hi):
                shown = _scaled(v, scale) if _is_count(v) else v
                out.append(f"{where}: {key} = {shown!r} must be a power of two in [{lo}, {hi}]")
    for f, key, scale in (("hbm_bytes", "hbm_gib", _GIB), ("hbm_bandwidth_bytes_per_s", None, 1)):
        values = getattr(s, f)
        if not values:
            out.append(f"{where}: {key or f} must list at least one value")
        for v in values:
            if f == "hbm_bytes" and not _is_count(v):
                out.append(f"{where}: {key} = {v!r} must be a number of GiB")
                continue
            p = bounded_number_problem(where, key or f, _scaled(v, scale) if scale > 1 else v)
            if p:
                out.append(p)
    for key, strict in (
        ("clock_hz", True),
        ("area_fraction_max", True),
        ("area_fraction_min", False),
    ):
        p = bounded_number_problem(where, key, getattr(s, key), strict=strict)
        if p:
            out.append(p)
    if not out and s.area_fraction_min > s.area_fraction_max:
        out.append(
            f"{where}: area_fraction_min = {s.area_fraction_min!r} must be <= "
            f"area_fraction_max = {s.area_fraction_max!r}"
        )
    for key in ("power_budget_w", "budget_mm2"):  # None: the default
        v = getattr(s, key)
        p = None if v is None else bounded_number_problem(where, key, v)
        if p:
            out.append(p)
    p = bounded_number_problem(where, "bytes_per_element", s.bytes_per_element)
    if p or not _is_count(s.bytes_per_element):
        out.append(p or f"{where}: bytes_per_element = {s.bytes_per_element!r} must be an integer")
    out += format_set_problems(s.format_sets, where)
    if not isinstance(s.name, str):
        out.append(f"{where}: name = {s.name!r} must be a string")
    if not isinstance(s.keep_single_core, bool):
        out.append(f"{where}: keep_single_core = {s.keep_single_core!r} must be true or false")
    if s.node_nm not in known_nodes():
        out.append(unknown_node_problem(where, f"{s.node_nm!r}"))
    elif not out:
        # A buffer that alone exceeds the budget can never be part of a valid design.
        limit = s.budget() * s.area_fraction_max
        sram = tech_node(s.node_nm).sram_area_mm2_per_mib
        for v in s.glb_bytes:
            if v / _MIB * sram > limit:
                out.append(
                    f"{where}: glb_mib = {_scaled(v, _MIB)} needs {v / _MIB * sram:.0f} mm2 of "
                    f"SRAM, more than the area budget ({limit:.0f} mm2)"
                )
    return out


@dataclass(frozen=True, slots=True)
class SpaceSummary:
    """What :meth:`Space.summary` reports: design count, budget, area range and, for each
    parameter, the number of designs per value (SI units)."""

    designs: int
    grid_points: int
    budget_mm2: float
    area_mm2_min: float
    area_mm2_max: float
    counts: Mapping[str, Mapping[float, int]]
    power_budget_w: float = math.inf
    power_w_min: float = math.nan
    power_w_max: float = math.nan
    capped_designs: int = 0
    clock_hz_min: float = math.nan
    empty_reason: str = ""  # with no design: which rules removed the grid's points
    format_sets: tuple[FormatSetSummary, ...] = ()


@dataclass(frozen=True, slots=True)
class Space:
    """Choices per parameter (tuples, SI units) and the area filter (see the module doc).

    ``vc_lanes = ()`` ties the vector width to ``tc_cols`` (the reference's restriction);
    ``budget_mm2 = None`` means the area of the ``ref-max`` preset at ``node_nm``. HBM, clock,
    node and element size default to the ``ref-max`` preset's (TPUv4's). ``format_sets``
    (TOML ``formats``) are the tensor cores' number-format sets, each holding bf16.
    """

    num_tc: tuple[int, ...]
    tc_rows: tuple[int, ...]
    tc_cols: tuple[int, ...]
    num_vc: tuple[int, ...]
    glb_bytes: tuple[int, ...]
    vc_lanes: tuple[int, ...] = ()
    hbm_bytes: tuple[int, ...] = (_REF_MAX.hbm_bytes,)
    hbm_bandwidth_bytes_per_s: tuple[float, ...] = (_REF_MAX.hbm_bandwidth_bytes_per_s,)
    clock_hz: float = _REF_MAX.clock_hz
    node_nm: int = _REF_MAX.node_nm
    bytes_per_element: int = _REF_MAX.bytes_per_element
    budget_mm2: float | None = None
    power_budget_w: float | None = None
    area_fraction_min: float = 0.3
    area_fraction_max: float = 1.0
    keep_single_core: bool = True
    format_sets: tuple[tuple[str, ...], ...] = ((BASE_FORMAT,),)
    name: str = ""
    source: str = field(default="", compare=False, repr=False)

    def __post_init__(self) -> None:
        for f in PARAMETERS:
            values = tuple(getattr(self, f))
            if all(isinstance(v, numbers.Real) for v in values):
                values = tuple(sorted(set(values)))
            object.__setattr__(self, f, values)
        if isinstance(self.format_sets, list | tuple):
            # each set in FORMATS order, bf16 first, so equal sets compare equal
            sets = tuple(
                tuple(f for f in FORMATS if f in fs) + tuple(f for f in fs if f not in FORMATS)
                if isinstance(fs, list | tuple)
                else fs
                for fs in self.format_sets
            )
            object.__setattr__(self, "format_sets", sets)
        problems = _problems(self, self.source or f"space {self.name or '(unnamed)'}")
        if problems:
            raise ConfigError("; ".join(problems))
        # One representation per value, so equal spaces compare and hash equal.
        bandwidths = tuple(float(v) for v in self.hbm_bandwidth_bytes_per_s)
        object.__setattr__(self, "hbm_bandwidth_bytes_per_s", bandwidths)
        object.__setattr__(self, "clock_hz", float(self.clock_hz))
        if self.budget_mm2 is not None:
            object.__setattr__(self, "budget_mm2", float(self.budget_mm2))
        if self.power_budget_w is not None:
            object.__setattr__(self, "power_budget_w", float(self.power_budget_w))
        for f in ("area_fraction_min", "area_fraction_max"):
            object.__setattr__(self, f, float(getattr(self, f)))

    # construction ---------------------------------------------------------------------

    @classmethod
    def named(cls, name: str) -> Space:
        """A shipped space: ``default`` (the reference's), ``tiny`` (tests, quick start) or
        ``reticle`` (designs of the H100's size, node and power)."""
        if name not in _SHIPPED:
            raise unknown_name("space", name, _SHIPPED)
        return _shipped_space(name)

    @classmethod
    def from_toml(cls, path: str | Path) -> Space:
        """A space from a TOML file with a ``[space]`` table (see :meth:`to_toml`)."""
        return cls.from_mapping(read_toml(path), source=str(path))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], source: str = "space") -> Space:
        """A space from ``{"space": {...}}``, checking every key and value.

        Lists may be given as ``[1, 2, 4]``, a single value, or ``{min = 1, max = 64}`` (every
        power of two in between). Sizes use ``glb_mib`` and ``hbm_gib``.
        """
        problems = unknown_keys(source, data, ["space"])
        table = data.get("space")
        if not isinstance(table, Mapping):
            problems.append(f"{source}: needs a [space] table")
            raise ConfigError("; ".join(problems))
        where = f"{source} [space]"
        problems += unknown_keys(where, table, _TOML_KEYS)
        kwargs: dict[str, Any] = {}
        for key, value in table.items():
            if key not in _TOML_KEYS:
                continue
            field_name, scale = _TOML_FIELD.get(key, (key, None))
            if key == "formats":
                field_name = "format_sets"
                value = (
                    [tuple(v) if isinstance(v, list) else v for v in value]
                    if isinstance(value, list)
                    else value
                )
            if field_name in PARAMETERS:
                values, p = _choices(where, key, value)
                problems += p
                kwargs[field_name] = tuple(
                    round(v * scale) if scale and isinstance(v, int | float) else v for v in values
                )
            else:
                kwargs[field_name] = value
        missing = [
            f for f in ("num_tc", "tc_rows", "tc_cols", "num_vc", "glb_bytes") if f not in kwargs
        ]
        problems += [f"{where}: missing key {_POW2[f][0]!r}" for f in missing]
        if missing:
            raise ConfigError("; ".join(problems))
        try:
            space = cls(**kwargs, source=where)
        except ConfigError as e:
            problems.append(str(e))
        if problems:
            raise ConfigError("; ".join(problems))
        return space

    def to_toml(self) -> str:
        """This space as TOML text that :meth:`from_toml` reads back to an equal Space."""
        lines = ["[space]"]
        if self.name:
            lines.append(f"name = {toml_literal(self.name)}")
        for key in _TOML_KEYS[1:]:
            field_name, scale = _TOML_FIELD.get(key, (key, None))
            if key == "formats":
                if self.format_sets != ((BASE_FORMAT,),):
                    lines.append(f"formats = {toml_literal(self.format_sets)}")
                continue
            value = getattr(self, field_name)
            if value is None or (field_name == "vc_lanes" and not value):
                continue
            if scale:
                value = tuple(_scaled(v, scale) for v in value)
            lines.append(f"{key} = {toml_literal(value)}")
        return "\n".join(lines) + "\n"

    # queries --------------------------------------------------------------------------

    def budget(self) -> float:
        """The area budget (mm2): ``budget_mm2``, or the ref-max preset's area at this node."""
        if self.budget_mm2 is not None:
            return float(self.budget_mm2)
        return _ref_max_area(self.node_nm)

    def power_budget(self) -> float:
        """The power budget (W) under tensor load: ``power_budget_w``, or the node's default
        board limit (:func:`arch_space.system.power_budget_w`)."""
        if self.power_budget_w is not None:
            return float(self.power_budget_w)
        return power_budget_w(self.node_nm)

    def enumerate(self) -> Iterator[Accelerator]:
        """Every valid design, in a stable order (grid order of :data:`PARAMETERS`)."""
        values, _, _, _, clock_fraction, _ = self._survivors()
        for row, fraction in zip(zip(*values, strict=True), clock_fraction, strict=True):
            yield Accelerator(
                num_tc=row[0],
                tc_rows=row[1],
                tc_cols=row[2],
                num_vc=row[3],
                vc_lanes=row[4],
                glb_bytes=row[5],
                hbm_bytes=row[6],
                hbm_bandwidth_bytes_per_s=row[7],
                clock_hz=self.clock_hz * float(fraction),
                node_nm=self.node_nm,
                bytes_per_element=self.bytes_per_element,
                formats=format_set_rates(row[8]),
            )

    def summary(self) -> SpaceSummary:
        """Counts and area range of the valid designs, without building them."""
        values, area, grid_points, power, clock_fraction, why = self._survivors()
        counts = {
            p: MappingProxyType(
                {v.item(): int(n) for v, n in zip(*np.unique(col, return_counts=True), strict=True)}
            )
            for p, col in zip(PARAMETERS, values[: len(PARAMETERS)], strict=True)
        }
        return SpaceSummary(
            designs=int(area.size),
            grid_points=grid_points,
            budget_mm2=self.budget(),
            area_mm2_min=float(area.min()) if area.size else math.nan,
            area_mm2_max=float(area.max()) if area.size else math.nan,
            counts=MappingProxyType(counts),
            power_budget_w=self.power_budget(),
            power_w_min=float(power.min()) if power.size else math.nan,
            power_w_max=float(power.max()) if power.size else math.nan,
            capped_designs=int(np.count_nonzero(clock_fraction < 1.0)),
            clock_hz_min=self.clock_hz * float(clock_fraction.min()) if area.size else math.nan,
            empty_reason=why,
            format_sets=format_set_summaries(self.format_sets, values[len(PARAMETERS)], area),
        )

    def check_not_empty(self) -> None:
        """Raise a ConfigError saying which rules removed every design, if none is left."""
        why = self._survivors()[5]
        if why:
            raise ConfigError(f"{self.source or 'space ' + repr(self.name)}: no design left: {why}")

    def _survivors(self) -> _Kept:
        """(per-parameter value lists of the valid designs, their areas, grid size, their
        power under tensor load at their clock, their clock over the space's, and when no
        design is left, why)."""
        return _survivors_cached(self)


#: The swept parameters (the accelerator fields a Space gives choices for), in enumeration
#: (grid axis) order.
PARAMETERS: tuple[str, ...] = tuple(
    name
    for name in ACCELERATOR_FIELDS
    if any(f.name == name and f.type.startswith("tuple") for f in fields(Space))
)


def _survivors_kernel(s: Space) -> _Kept:
    """The vectorised filter of every format set in turn (:func:`_format_set_kernel`), the
    kept points' values with their format set last."""
    parts = [_format_set_kernel(s, fs) for fs in s.format_sets]
    if len(parts) == 1:
        values, kept, grid_points, power, fraction, why = parts[0]
        return [*values, (s.format_sets[0],) * len(kept)], kept, grid_points, power, fraction, why
    values = [sum((p[0][c] for p in parts), ()) for c in range(len(parts[0][0]))]
    values.append(sum(((fs,) * len(p[1]) for fs, p in zip(s.format_sets, parts, strict=True)), ()))
    kept, power, fraction = (np.concatenate([p[i] for p in parts]) for i in (1, 3, 4))
    for a in (kept, power, fraction):
        a.setflags(write=False)
    whys = [f"{format_set_name(fs)}: {p[5]}" for fs, p in zip(s.format_sets, parts, strict=True)]
    why = "" if kept.size else "; ".join(whys)
    return values, kept, sum(p[2] for p in parts), power, fraction, why


def _format_set_kernel(s: Space, format_set: tuple[str, ...]) -> _Kept:
    """The vectorised filter of one format set: area, power under tensor load and
    power-capped clock of every grid point at once, then the kept points' values."""
    rates = format_set_rates(format_set)
    tech = tech_node(s.node_nm)
    tied = not s.vc_lanes
    hbm_pairs = [(b, bw) for b in s.hbm_bytes for bw in s.hbm_bandwidth_bytes_per_s]
    axes = [
        np.asarray(s.num_tc, dtype=float),
        np.asarray(s.tc_rows, dtype=float),
        np.asarray(s.tc_cols, dtype=float),
        np.asarray(s.num_vc, dtype=float),
        np.asarray((1,) if tied else s.vc_lanes, dtype=float),
        np.asarray(s.glb_bytes, dtype=float),
        np.arange(len(hbm_pairs)),
    ]
    tc, rows, cols, vc, lanes, glb, hbm = np.meshgrid(*axes, indexing="ij", sparse=True)
    if tied:
        lanes = cols
    stacks = np.asarray([hbm_stacks_for(b, bw, tech) for b, bw in hbm_pairs], dtype=float)[hbm]
    terms = area_terms_mm2(
        tech,
        num_tc=tc,
        tc_rows=rows,
        tc_cols=cols,
        num_vc=vc,
        vc_lanes=lanes,
        glb_bytes=glb,
        stacks=stacks,
        format_lanes=format_lane_factor(rates),
    )
    area = sum(terms.values())
    budget = s.budget()
    large_enough = area >= s.area_fraction_min * budget
    if s.keep_single_core:
        large_enough = large_enough | (tc == 1) | (vc == 1)
    power = tensor_load_power_w(
        tech,
        num_tc=tc,
        tc_rows=rows,
        tc_cols=cols,
        clock_hz=s.clock_hz,
        bytes_per_element=s.bytes_per_element,
        area_mm2=area,
        formats=rates,
    )
    leakage = area * tech.leakage_w_per_mm2
    fraction = capped_clock_fraction(power, leakage, s.power_budget())
    small_enough = area <= s.area_fraction_max * budget
    keep = large_enough & small_enough & (fraction > 0.0)
    idx = np.nonzero(keep)
    choices = [s.num_tc, s.tc_rows, s.tc_cols, s.num_vc, s.vc_lanes or s.tc_cols, s.glb_bytes]
    values = [tuple(np.asarray(c, dtype=object)[i]) for c, i in zip(choices, idx[:6], strict=True)]
    if tied:
        values[4] = values[2]
    values.append(tuple(hbm_pairs[i][0] for i in idx[6]))
    values.append(tuple(hbm_pairs[i][1] for i in idx[6]))
    grid_points = int(np.prod([len(a) for a in axes]))
    kept = np.asarray(area)[idx]
    kept.setflags(write=False)
    kept_fraction = np.broadcast_to(fraction, np.shape(area))[idx]
    kept_fraction.setflags(write=False)
    kept_leakage = np.asarray(leakage)[idx]
    full_power = np.broadcast_to(power, np.shape(area))[idx]
    kept_power = kept_leakage + (full_power - kept_leakage) * kept_fraction
    kept_power.setflags(write=False)
    why = "" if kept.size else _why_empty(s, grid_points, area, large_enough, small_enough, leakage)
    return values, kept, grid_points, kept_power, kept_fraction, why


def _why_empty(s: Space, grid_points: int, area, large_enough, small_enough, leakage) -> str:
    """Which rules removed the grid points of a space with no design left, with the numbers
    (a point may break several rules)."""
    area, leakage = np.broadcast_arrays(area, leakage)
    shape = area.shape
    large, small = np.broadcast_to(large_enough, shape), np.broadcast_to(small_enough, shape)
    budget = s.budget()
    parts = []
    if not small.all():
        parts.append(
            f"{np.count_nonzero(~small)} are larger than area_fraction_max x budget = "
            f"{s.area_fraction_max:g} x {budget:.0f} = {s.area_fraction_max * budget:.0f} mm2 "
            f"(the smallest design is {area.min():.0f} mm2)"
        )
    if not large.all():
        parts.append(
            f"{np.count_nonzero(~large)} are smaller than area_fraction_min x budget = "
            f"{s.area_fraction_min:g} x {budget:.0f} = {s.area_fraction_min * budget:.0f} mm2 "
            f"(the largest is {area.max():.0f} mm2)"
        )
    leaky = leakage >= s.power_budget()
    if leaky.any():
        parts.append(
            f"{np.count_nonzero(leaky)} leak more than the {s.power_budget():.0f} W power budget "
            f"at {s.node_nm} nm (the least leakage is {leakage.min():.0f} W)"
        )
    return f"of {grid_points} grid points, " + "; ".join(parts)


_survivors_cached = functools.lru_cache(maxsize=8)(_survivors_kernel)


@functools.cache
def _ref_max_area(node_nm: int) -> float:
    return area_mm2(replace(_REF_MAX, node_nm=node_nm))


def _choices(where: str, key: str, value: Any) -> tuple[list[Any], list[str]]:
    """A list of choices from a list, a single value or a ``{min, max}`` power-of-two range."""
    if isinstance(value, list | tuple):
        return list(value), []
    if isinstance(value, Mapping):
        bad = unknown_keys(f"{where} {key}", value, ["min", "max"])
        lo, hi = value.get("min"), value.get("max")
        if bad or not (is_power_of_two(lo) and is_power_of_two(hi) and lo <= hi):
            return [], bad or [
                f"{where}: {key} = {dict(value)!r} must be {{min = a, max = b}} with powers of two a <= b"
            ]
        return [2**k for k in range(lo.bit_length() - 1, hi.bit_length())], []
    return [value], []


def _scaled(v: int, scale: int) -> int | float:
    return v // scale if v % scale == 0 else v / scale


def space_names() -> tuple[str, ...]:
    """Names of the shipped spaces."""
    return tuple(_SHIPPED)


@functools.cache
def _shipped_space(name: str) -> Space:
    text = (
        importlib.resources.files("arch_space").joinpath("data", _SHIPPED[name]).read_text("utf-8")
    )
    return Space.from_mapping(tomllib.loads(text), source=f"arch_space/data/{_SHIPPED[name]}")


def design_id(acc: Accelerator) -> str:
    """A short, stable content hash of a design's hardware fields (its names excluded).

    Equal designs get equal ids on every machine and run; the store keys designs by it.
    """
    # a single die and no further units are the defaults and leave the ids of such designs
    # as they were
    # the measured profile it names is no hardware, as the name is not
    skip = {"name", "measured_as"} | ({"dies"} if acc.dies == 1 else set())
    skip |= {"extra_units"} if not acc.extra_units else set()
    skip |= {"formats"} if acc.formats == _BF16_ONLY else set()
    text = "|".join(f"{f.name}={getattr(acc, f.name)!r}" for f in fields(acc) if f.name not in skip)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def load_space(spec: str) -> Space:
    """A shipped space by name, or a space TOML file by path (``*.toml`` or an existing file)."""
    if spec.endswith(".toml") or Path(spec).is_file():
        return Space.from_toml(spec)
    return Space.named(spec)
