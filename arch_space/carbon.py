"""Embodied carbon of an accelerator board (ACT and a product footprint) and operational carbon
of the energy it uses.

Embodied, after Gupta et al., "ACT", ISCA 2022: a good die carries
``area x (CI_fab x EPA + GPA + MPA) / yield`` (fab energy, process gases, materials per cm2,
divided by the same negative-binomial yield as the dollar cost, :func:`arch_space.cost.die_yield`),
plus ``HBM GB x gCO2e/GB`` with a package term per HBM stack, and a per-package term. The rest
of the board follows the component split of NVIDIA's HGX H100 product carbon footprint: heat
sinks per watt of board power, and the PCB, power delivery and assembly per board.
Operational: ``E x PUE x grid intensity``.
Constants live in ``data/carbon.toml`` with their sources; :meth:`CarbonParams.from_toml`
overrides any of them, including the grid regions.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from arch_space._data import build_params, params_hash, read_toml, shipped_toml
from arch_space.accelerator import Accelerator
from arch_space.area import hbm_stacks
from arch_space.cost import CostParams, made_die
from arch_space.system import board_limit_w
from arch_space.tech import TechNode
from phaze_common.errors import ConfigError, unknown_name

__all__ = [
    "CarbonParams",
    "carbon_per_area_g_per_cm2",
    "embodied_breakdown_kgco2e",
    "embodied_kgco2e",
    "operational_kgco2e",
    "grid_intensity",
    "grid_regions",
]

_MM2_PER_CM2 = 100.0
_BYTES_PER_GB = 1e9
_J_PER_KWH = 3.6e6
_G_PER_KG = 1000.0

_SCHEMA: Mapping[str, Mapping[str, str]] = MappingProxyType(
    {
        "fab": {"ci_g_per_kwh": "fab_ci_g_per_kwh"},
        "memory": {"hbm_g_per_gb": "hbm_g_per_gb", "g_per_hbm_stack": "hbm_stack_g"},
        "package": {"g_per_package": "package_g"},
        "board": {"g_per_board": "board_g", "thermal_g_per_w": "thermal_g_per_w"},
        "operation": {"pue": "pue"},
    }
)
_NODE_SCHEMA: Mapping[str, str] = MappingProxyType(
    {
        "epa_kwh_per_cm2": "epa_kwh_per_cm2",
        "gpa_g_per_cm2": "gpa_g_per_cm2",
        "mpa_g_per_cm2": "mpa_g_per_cm2",
    }
)
_FREE = ("grid",)


@dataclass(frozen=True, slots=True)
class CarbonParams:
    """Constants of the carbon models (units in the names); per-node values keyed by nm,
    grid intensities (gCO2e/kWh) keyed by region name."""

    fab_ci_g_per_kwh: float
    hbm_g_per_gb: float
    package_g: float
    pue: float
    epa_kwh_per_cm2: Mapping[int, float] = field(default_factory=lambda: MappingProxyType({}))
    gpa_g_per_cm2: Mapping[int, float] = field(default_factory=lambda: MappingProxyType({}))
    mpa_g_per_cm2: Mapping[int, float] = field(default_factory=lambda: MappingProxyType({}))
    grid: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    hbm_stack_g: float = 0.0
    board_g: float = 0.0
    thermal_g_per_w: float = 0.0

    def __hash__(self) -> int:
        return params_hash(self)

    @classmethod
    def default(cls) -> CarbonParams:
        """The shipped constants (``arch_space/data/carbon.toml``)."""
        return _shipped_carbon()

    @classmethod
    def from_mapping(
        cls,
        data: Mapping[str, Any],
        source: str = "carbon params",
        base: CarbonParams | None = None,
    ) -> CarbonParams:
        """``base`` (default: the shipped constants) with the values in ``data`` replaced.

        ``data`` has the layout of ``carbon.toml``: ``[fab]``, ``[memory]``, ``[board]``,
        ``[package]``, ``[operation]``, ``[grid]`` (any region names) and ``[node.N]`` tables.
        """
        base = base if base is not None else cls.default()
        return build_params(cls, data, source, base, _SCHEMA, _NODE_SCHEMA, _FREE)

    @classmethod
    def from_toml(cls, path: str | Path) -> CarbonParams:
        """The shipped constants overridden by the TOML file at ``path``."""
        return cls.from_mapping(read_toml(path), source=str(path))


@functools.lru_cache(maxsize=1)
def _shipped_carbon() -> CarbonParams:
    return build_params(
        CarbonParams,
        shipped_toml("carbon.toml"),
        "arch_space/data/carbon.toml",
        None,
        _SCHEMA,
        _NODE_SCHEMA,
        _FREE,
    )


def carbon_per_area_g_per_cm2(node_nm: int, params: CarbonParams | None = None) -> float:
    """ACT's carbon per fabricated cm2: ``CI_fab x EPA + GPA + MPA`` (gCO2e/cm2)."""
    p = params or CarbonParams.default()
    tables = (p.epa_kwh_per_cm2, p.gpa_g_per_cm2, p.mpa_g_per_cm2)
    if any(node_nm not in t for t in tables):
        known = sorted(set.intersection(*(set(t) for t in tables)), reverse=True)
        raise ConfigError(
            f"carbon params: no EPA/GPA/MPA for node {node_nm} nm (known: {', '.join(map(str, known))})"
        )
    return (
        p.fab_ci_g_per_kwh * p.epa_kwh_per_cm2[node_nm]
        + p.gpa_g_per_cm2[node_nm]
        + p.mpa_g_per_cm2[node_nm]
    )


def embodied_breakdown_kgco2e(
    acc: Accelerator,
    params: CarbonParams | None = None,
    cost: CostParams | None = None,
    tech: TechNode | None = None,
) -> Mapping[str, float]:
    """Embodied carbon of one accelerator board by part: ``die`` (its good dies), ``hbm`` (per
    GB and per stack), ``package``, ``thermal`` (heat sinks, per watt of its board power limit)
    and ``board`` (PCB, power delivery, passives, assembly)."""
    p = params or CarbonParams.default()
    c = cost or CostParams.default()
    area, y = made_die(acc, c, tech)
    die_g = acc.dies * area / _MM2_PER_CM2 * carbon_per_area_g_per_cm2(acc.node_nm, p) / y
    hbm_g = acc.hbm_bytes / _BYTES_PER_GB * p.hbm_g_per_gb + hbm_stacks(acc, tech) * p.hbm_stack_g
    thermal_g = p.thermal_g_per_w * board_limit_w(acc.profile_name, acc.node_nm)
    parts_g = {"die": die_g, "hbm": hbm_g, "package": p.package_g, "thermal": thermal_g}
    return MappingProxyType({k: g / _G_PER_KG for k, g in {**parts_g, "board": p.board_g}.items()})


def embodied_kgco2e(
    acc: Accelerator,
    params: CarbonParams | None = None,
    cost: CostParams | None = None,
    tech: TechNode | None = None,
) -> float:
    """Embodied carbon of one accelerator board (kgCO2e): good dies, HBM, package, heat sinks
    and the rest of the board."""
    return math.fsum(embodied_breakdown_kgco2e(acc, params, cost, tech).values())


def operational_kgco2e(energy_j: float, pue: float, grid_gco2e_per_kwh: float) -> float:
    """Operational carbon (kgCO2e) of ``energy_j`` of IT energy: ``E x PUE x CI_grid``.

    Examples
    --------
    >>> operational_kgco2e(3.6e6, 1.0, 480.0)  # 1 kWh on the 2023 world grid
    0.48
    """
    return energy_j / _J_PER_KWH * pue * grid_gco2e_per_kwh / _G_PER_KG


def grid_regions(params: CarbonParams | None = None) -> tuple[str, ...]:
    """Region names with a grid carbon intensity, sorted."""
    return tuple(sorted((params or CarbonParams.default()).grid))


def grid_intensity(region: str, params: CarbonParams | None = None) -> float:
    """Grid carbon intensity of ``region`` (gCO2e/kWh), whatever its letter case; unknown
    names suggest the nearest.

    Examples
    --------
    >>> grid_intensity("FRANCE") == grid_intensity("france")
    True
    """
    p = params or CarbonParams.default()
    by_name = {k.casefold(): v for k, v in p.grid.items()}
    try:
        return by_name[region.casefold()]
    except KeyError:
        raise unknown_name("grid region", region.casefold(), by_name) from None
