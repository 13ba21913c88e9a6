"""Dollar cost of one device: die (wafer price / good dies per wafer), HBM, packaging, and
final test and assembly.

Die cost follows the textbook chain (Hennessy & Patterson, "Computer Architecture", 6th ed.,
§1.6): dies per wafer with edge loss, a negative-binomial yield, and the wafer price of the
node. Every constant comes from ``data/cost.toml`` (with its source) and can be overridden
from a user TOML file of the same layout (:meth:`CostParams.from_toml`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from arch_space._data import build_params, params_hash, read_toml, shipped_toml
from arch_space.accelerator import Accelerator
from arch_space.area import (
    area_mm2,
    core_area_mm2,
    harvest_cores,
    hbm_stacks,
    made_die_area_mm2,
)
from arch_space.tech import TechNode
from phaze_common.errors import ConfigError, Infeasible

__all__ = [
    "CostParams",
    "dies_per_wafer",
    "die_yield",
    "harvested_yield",
    "made_die",
    "die_cost_usd",
    "hbm_cost_usd",
    "package_cost_usd",
    "cost_breakdown_usd",
    "device_cost_usd",
]

_MM2_PER_CM2 = 100.0
_BYTES_PER_GB = 1e9

_SCHEMA: Mapping[str, Mapping[str, str]] = MappingProxyType(
    {
        "wafer": {
            "diameter_mm": "wafer_diameter_mm",
            "edge_exclusion_mm": "edge_exclusion_mm",
            "scribe_mm": "scribe_mm",
        },
        "yield": {"cluster_alpha": "cluster_alpha"},
        "memory": {"hbm_usd_per_gb": "hbm_usd_per_gb"},
        "package": {
            "base_usd": "package_base_usd",
            "interposer_usd_per_mm2": "interposer_usd_per_mm2",
            "hbm_stack_footprint_mm2": "hbm_stack_footprint_mm2",
            "interposer_margin": "interposer_margin",
            "test_assembly_usd": "test_assembly_usd",
        },
        "board": {"usd": "board_usd"},
        "market": {"gross_margin": "gross_margin", "volume_units": "volume_units"},
    }
)
_NODE_SCHEMA: Mapping[str, str] = MappingProxyType(
    {
        "wafer_usd": "wafer_usd",
        "defect_density_per_cm2": "defect_density_per_cm2",
        "nre_usd": "nre_usd",
    }
)
_FREE = ("price",)


@dataclass(frozen=True, slots=True)
class CostParams:
    """Constants of the cost model (units in the names); per-node values keyed by nm,
    published prices (USD) keyed by preset name."""

    wafer_diameter_mm: float
    edge_exclusion_mm: float
    scribe_mm: float
    cluster_alpha: float
    hbm_usd_per_gb: float
    package_base_usd: float
    interposer_usd_per_mm2: float
    hbm_stack_footprint_mm2: float
    interposer_margin: float
    wafer_usd: Mapping[int, float] = field(default_factory=lambda: MappingProxyType({}))
    defect_density_per_cm2: Mapping[int, float] = field(
        default_factory=lambda: MappingProxyType({})
    )
    test_assembly_usd: float = 0.0
    nre_usd: Mapping[int, float] = field(default_factory=lambda: MappingProxyType({}))
    board_usd: float = 0.0
    gross_margin: float = 0.0
    volume_units: float = 1.0
    price: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        problems = []
        if not 0 <= self.gross_margin < 1:
            problems.append(f"gross_margin = {self.gross_margin!r} must be in [0, 1)")
        if not self.volume_units >= 1:
            problems.append(f"volume_units = {self.volume_units!r} must be >= 1")
        if problems:
            raise ConfigError("cost params: " + "; ".join(problems))

    def __hash__(self) -> int:
        return params_hash(self)

    @classmethod
    def default(cls) -> CostParams:
        """The shipped constants (``arch_space/data/cost.toml``)."""
        return _shipped_cost()

    @classmethod
    def from_mapping(
        cls, data: Mapping[str, Any], source: str = "cost params", base: CostParams | None = None
    ) -> CostParams:
        """``base`` (default: the shipped constants) with the values in ``data`` replaced.

        ``data`` has the layout of ``cost.toml``: ``[wafer]``, ``[yield]``, ``[memory]``,
        ``[package]``, ``[board]``, ``[market]``, ``[price]`` and ``[node.N]`` tables, plain
        numbers or ``{value, source}``.
        """
        base = base if base is not None else cls.default()
        return build_params(cls, data, source, base, _SCHEMA, _NODE_SCHEMA, _FREE)

    @classmethod
    def from_toml(cls, path: str | Path) -> CostParams:
        """The shipped constants overridden by the TOML file at ``path``."""
        return cls.from_mapping(read_toml(path), source=str(path))

    def node(self, node_nm: int) -> tuple[float, float]:
        """(wafer price USD, defect density per cm2) of ``node_nm``."""
        if node_nm not in self.wafer_usd or node_nm not in self.defect_density_per_cm2:
            known = sorted(set(self.wafer_usd) & set(self.defect_density_per_cm2), reverse=True)
            raise ConfigError(
                f"cost params: no wafer price / defect density for node {node_nm} nm "
                f"(known: {', '.join(map(str, known))})"
            )
        return self.wafer_usd[node_nm], self.defect_density_per_cm2[node_nm]


@functools.lru_cache(maxsize=1)
def _shipped_cost() -> CostParams:
    return build_params(
        CostParams,
        shipped_toml("cost.toml"),
        "arch_space/data/cost.toml",
        None,
        _SCHEMA,
        _NODE_SCHEMA,
        _FREE,
    )


def dies_per_wafer(die_area_mm2: Any, params: CostParams | None = None) -> Any:
    """Whole dies per wafer, with edge loss (works elementwise on numpy arrays).

    ``DPW = pi (d/2)^2 / A - pi d / sqrt(2 A)`` (Hennessy & Patterson 6th ed., §1.6)
    with ``d`` the usable diameter (wafer minus twice the edge exclusion) and ``A`` the die
    area grown by the scribe line on each edge (a square die is assumed).
    """
    p = params or CostParams.default()
    a = (np.sqrt(np.asarray(die_area_mm2, dtype=float)) + p.scribe_mm) ** 2
    d = p.wafer_diameter_mm - 2.0 * p.edge_exclusion_mm
    dpw = np.floor(np.maximum(math.pi * (d / 2.0) ** 2 / a - math.pi * d / np.sqrt(2.0 * a), 0.0))
    return int(dpw) if dpw.ndim == 0 else dpw.astype(np.int64)


def die_yield(die_area_mm2: Any, defect_density_per_cm2: float, cluster_alpha: float) -> Any:
    """Negative-binomial die yield ``Y = (1 + A D0 / alpha)^-alpha`` (A in cm2).

    Stapper (1983); tends to Poisson ``exp(-A D0)`` as alpha grows and to 1 as A -> 0.
    """
    a_cm2 = np.asarray(die_area_mm2, dtype=float) / _MM2_PER_CM2
    y = (1.0 + a_cm2 * defect_density_per_cm2 / cluster_alpha) ** (-cluster_alpha)
    return float(y) if y.ndim == 0 else y


_QUADRATURE_NODES = 512  # trapezoid points over the log of the gamma-distributed density


def harvested_yield(
    uncore_mm2: float,
    core_mm2: float,
    cores: int,
    shipped_cores: int,
    defect_density_per_cm2: float,
    cluster_alpha: float,
) -> float:
    """Share of dies that work when the uncore is defect-free and at least ``shipped_cores``
    of the ``cores`` identical cores are (a harvested die: the product enables only those).

    Defects are Poisson with a density that varies from die to die as a gamma distribution of
    shape ``cluster_alpha`` and mean ``D0``: the negative-binomial model (Stapper 1983; Koren
    & Koren, Proc. IEEE 1998), so with ``shipped_cores == cores`` this is :func:`die_yield`
    of the whole area. For a given density the uncore survives with ``exp(-D A_u)`` and the
    working cores are binomial with ``exp(-D A_c)`` each; the mixture over the density is a
    trapezoid sum over ``log D``, where the gamma density decays doubly exponentially on both
    sides (so the sum converges geometrically); ``cluster_alpha >= 1``.
    """
    if not 0 < shipped_cores <= cores:
        raise ConfigError(f"shipped_cores = {shipped_cores} must be between 1 and cores = {cores}")
    if cluster_alpha < 1:
        raise ConfigError(f"cluster_alpha = {cluster_alpha} must be >= 1 for harvested yield")
    a = cluster_alpha
    spread = math.sqrt(80.0 / a)
    t = np.linspace(
        math.log(a) - 40.0 / a - spread,
        math.log(a) + math.log1p(40.0 / a) + spread + 1.0,
        _QUADRATURE_NODES,
    )
    x = np.exp(t)  # density over its mean times alpha: gamma(alpha, 1) distributed
    weight = np.exp(a * t - x - math.lgamma(a)) * (t[1] - t[0])
    density = x * defect_density_per_cm2 / a  # defects per cm2 at each node
    good = np.exp(-density * core_mm2 / _MM2_PER_CM2)
    spare_ok = sum(
        math.comb(cores, k) * (1.0 - good) ** k * good ** (cores - k)
        for k in range(cores - shipped_cores + 1)
    )
    uncore_ok = np.exp(-density * uncore_mm2 / _MM2_PER_CM2)
    return float(np.sum(weight * uncore_ok * spare_ok))


def made_die(
    acc: Accelerator, params: CostParams | None = None, tech: TechNode | None = None
) -> tuple[float, float]:
    """(area mm2, yield) of one of the ``acc.dies`` identical dies made for ``acc``
    (:func:`~arch_space.area.made_die_area_mm2`): a preset with a ``[harvest]`` table sells
    when its shipped cores work (:func:`harvested_yield`); any other design is made as
    modelled (:func:`die_yield`)."""
    p = params or CostParams.default()
    area = made_die_area_mm2(acc, tech)
    _, d0 = p.node(acc.node_nm)
    harvest = harvest_cores(acc)
    if harvest is None:
        return area, die_yield(area, d0, p.cluster_alpha)
    cores, shipped = harvest
    core_mm2 = core_area_mm2(acc, tech)
    uncore = area - cores * core_mm2
    return area, harvested_yield(uncore, core_mm2, cores, shipped, d0, p.cluster_alpha)


def _die_terms(
    acc: Accelerator, params: CostParams, tech: TechNode | None
) -> tuple[float, int, float, float]:
    """(area mm2, dies per wafer, yield, wafer USD) of the die made for ``acc``."""
    area, y = made_die(acc, params, tech)
    wafer_usd, _ = params.node(acc.node_nm)
    dpw = dies_per_wafer(area, params)
    if dpw < 1:
        raise Infeasible(
            f"a {area:.0f} mm2 die does not fit on a {params.wafer_diameter_mm:g} mm wafer"
        )
    return area, dpw, y, wafer_usd


def die_cost_usd(
    acc: Accelerator, params: CostParams | None = None, tech: TechNode | None = None
) -> float:
    """Cost of the good dies of one device: ``dies`` x wafer price / (dies per wafer x
    yield)."""
    _, dpw, y, wafer_usd = _die_terms(acc, params or CostParams.default(), tech)
    return acc.dies * wafer_usd / (dpw * y)


def hbm_cost_usd(acc: Accelerator, params: CostParams | None = None) -> float:
    """HBM cost: capacity in GB (10^9 bytes) x $/GB."""
    p = params or CostParams.default()
    return acc.hbm_bytes / _BYTES_PER_GB * p.hbm_usd_per_gb


def package_cost_usd(
    acc: Accelerator, params: CostParams | None = None, tech: TechNode | None = None
) -> float:
    """2.5D package (CoWoS-like): base assembly and test + interposer under every die and
    stack (a multi-die package's interposer or bridges span all its dies)."""
    p = params or CostParams.default()
    interposer_mm2 = p.interposer_margin * (
        area_mm2(acc, tech) + hbm_stacks(acc, tech) * p.hbm_stack_footprint_mm2
    )
    return p.package_base_usd + interposer_mm2 * p.interposer_usd_per_mm2


def cost_breakdown_usd(
    acc: Accelerator, params: CostParams | None = None, tech: TechNode | None = None
) -> Mapping[str, float]:
    """Device cost by part: ``die``, ``hbm``, ``package``, ``test_assembly`` (USD)."""
    p = params or CostParams.default()
    return MappingProxyType(
        {
            "die": die_cost_usd(acc, p, tech),
            "hbm": hbm_cost_usd(acc, p),
            "package": package_cost_usd(acc, p, tech),
            "test_assembly": p.test_assembly_usd,
        }
    )


def device_cost_usd(
    acc: Accelerator, params: CostParams | None = None, tech: TechNode | None = None
) -> float:
    """Manufacturing cost of one device (die + HBM + package + test and assembly), USD."""
    return math.fsum(cost_breakdown_usd(acc, params, tech).values())
