"""Die area, peak throughput and power of an accelerator, from per-node technology data.

The area model is a sum of components (docs/models.md), each a count times a per-unit area from
``data/tech.toml``::

    tensor_cores  = num_tc * (tc_rows * tc_cols * mac_area * (1 + format_lanes)
                              + (tc_rows + tc_cols) * operand_port_area + core_fixed_area)
    vector_cores  = num_vc * (vc_lanes * vector_lane_area + core_fixed_area)
    glb_sram      = glb MiB * sram_area_per_mib
    hbm_phy       = hbm_stacks * hbm_phy_area_per_stack
    extra_units   = sum of count * area_mm2 of any further unit  # (only when there are any)
    uncore        = overhead_fraction * (sum of the above)       # NoC, IO, PCIe, clocking

``format_lanes`` is the area of the tensor cores' lanes for formats beyond bf16, in bf16 MACs
per bf16 MAC (:func:`arch_space.formats.format_lane_factor`); 0 for a preset, whose published
die holds its lanes already. A tensor array's ``rows + cols`` operand ports (what feeds it each cycle) make a small GPU
tensor core cost far more per MAC than a large systolic array. The same kernel
(:func:`area_terms_mm2`) works on numpy arrays, so a whole design grid is costed in one
vectorised call (:mod:`arch_space.space`). A harvested preset's die as made
(:func:`made_die_area_mm2`) adds its spare cores.

Made dies against published ones (tests/test_arch_presets.py; the two calibrated constants are
fitted on the first two by benchmarks/fit_area.py): A100 826 mm2 vs 826, H100 814 vs 814,
V100 730 vs 815 (-10 %), each B200 die 660 vs ~800 (-17 %), TPUv4 359 vs "<400".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from arch_space._data import shipped_toml
from arch_space.accelerator import TENSOR, VECTOR, Accelerator, ComputeUnit
from arch_space.formats import format_lane_factor, format_options, preset_format_rates
from arch_space.tech import TechNode, tech_node
from phaze_common.errors import ConfigError
from workloads.ops import HALF_FORMATS

__all__ = [
    "COMPONENTS",
    "area_terms_mm2",
    "hbm_stacks",
    "hbm_stacks_for",
    "area_breakdown_mm2",
    "area_mm2",
    "die_area_mm2",
    "harvest_cores",
    "core_area_mm2",
    "made_die_area_mm2",
    "static_power_w",
    "capped_clock_fraction",
    "mac_pj",
    "format_mac_pj",
    "counted_format_lanes",
    "mac_energy_pj",
    "unit_pj_per_op",
    "with_uncore",
    "tensor_load_power_w",
    "dynamic_power_breakdown_w",
    "peak_power_w",
]

_MIB = 2**20
_UM2_PER_MM2 = 1e6
_PJ = 1e-12

#: The area components, in the order they are reported.
COMPONENTS: tuple[str, ...] = ("tensor_cores", "vector_cores", "glb_sram", "hbm_phy", "uncore")


def hbm_stacks_for(hbm_bytes: Any, hbm_bandwidth_bytes_per_s: Any, tech: TechNode) -> Any:
    """Stacks needed for a capacity and a bandwidth with the node's HBM generation.

    ``max(ceil(bandwidth / stack bandwidth), ceil(capacity / largest stack), 1)``; works
    elementwise on numpy arrays.
    """
    by_bw = np.ceil(np.asarray(hbm_bandwidth_bytes_per_s) / tech.hbm_stack_bandwidth_bytes_per_s)
    by_cap = np.ceil(np.asarray(hbm_bytes) / tech.hbm_stack_max_bytes)
    stacks = np.maximum(np.maximum(by_bw, by_cap), 1).astype(np.int64)
    return int(stacks) if stacks.ndim == 0 else stacks


def hbm_stacks(acc: Accelerator, tech: TechNode | None = None) -> int:
    """HBM stacks of ``acc``: its own ``hbm_stacks`` if set, else :func:`hbm_stacks_for`."""
    if acc.hbm_stacks:
        return acc.hbm_stacks
    return hbm_stacks_for(
        acc.hbm_bytes, acc.hbm_bandwidth_bytes_per_s, tech or tech_node(acc.node_nm)
    )


def area_terms_mm2(
    tech: TechNode,
    *,
    num_tc: Any,
    tc_rows: Any,
    tc_cols: Any,
    num_vc: Any,
    vc_lanes: Any,
    glb_bytes: Any,
    stacks: Any,
    extra_mm2: float = 0.0,
    format_lanes: Any = 0.0,
) -> dict[str, Any]:
    """Area of each component (mm2) for scalars or broadcastable numpy arrays;
    ``extra_mm2`` is the area of any further units (:attr:`Accelerator.extra_units`),
    ``format_lanes`` the tensor cores' lanes beyond bf16 (see the module docstring).

    The one kernel behind :func:`area_breakdown_mm2` and the vectorised space enumeration.
    """
    array_um2 = tc_rows * tc_cols * tech.mac_area_um2 + (tc_rows + tc_cols) * (
        tech.operand_port_area_um2
    )
    if np.any(format_lanes):
        array_um2 = array_um2 + tc_rows * tc_cols * tech.mac_area_um2 * format_lanes
    tensor = num_tc * (array_um2 / _UM2_PER_MM2 + tech.core_fixed_area_mm2)
    vector = num_vc * (
        vc_lanes * tech.vector_lane_area_um2 / _UM2_PER_MM2 + tech.core_fixed_area_mm2
    )
    glb = glb_bytes / _MIB * tech.sram_area_mm2_per_mib
    phy = stacks * tech.hbm_phy_area_mm2_per_stack
    uncore = tech.overhead_fraction * (tensor + vector + glb + phy + extra_mm2)
    return {
        "tensor_cores": tensor,
        "vector_cores": vector,
        "glb_sram": glb,
        "hbm_phy": phy,
        "extra_units": extra_mm2,
        "uncore": uncore,
    }


def area_breakdown_mm2(acc: Accelerator, tech: TechNode | None = None) -> Mapping[str, float]:
    """Die area per component (mm2), keys in :data:`COMPONENTS` order (with
    ``extra_units`` before ``uncore`` when the design has further units).

    Examples
    --------
    >>> from arch_space.presets import preset
    >>> b = area_breakdown_mm2(preset("a100"))
    >>> round(sum(b.values())) == round(area_mm2(preset("a100")))
    True
    """
    tech = tech or tech_node(acc.node_nm)
    terms = area_terms_mm2(
        tech,
        num_tc=acc.num_tc,
        tc_rows=acc.tc_rows,
        tc_cols=acc.tc_cols,
        num_vc=acc.num_vc,
        vc_lanes=acc.vc_lanes,
        glb_bytes=acc.glb_bytes,
        stacks=hbm_stacks(acc, tech),
        extra_mm2=sum(u.count * u.area_mm2 for u in acc.extra_units),
        format_lanes=counted_format_lanes(acc),
    )
    keys = COMPONENTS if not acc.extra_units else (*COMPONENTS[:-1], "extra_units", "uncore")
    return MappingProxyType({k: float(terms[k]) for k in keys})


def area_mm2(acc: Accelerator, tech: TechNode | None = None) -> float:
    """Total modelled logic silicon area (mm2), every die of the package together."""
    return math.fsum(area_breakdown_mm2(acc, tech).values())


def die_area_mm2(acc: Accelerator, tech: TechNode | None = None) -> float:
    """Modelled area (mm2) of one of ``acc``'s ``dies`` identical logic dies: the package's
    silicon (:func:`area_mm2`) split evenly; the size a reticle and a wafer hold.

    Examples
    --------
    >>> from arch_space.presets import preset
    >>> round(die_area_mm2(preset("b200")) * 2) == round(area_mm2(preset("b200")))
    True
    """
    return area_mm2(acc, tech) / acc.dies


def harvest_cores(acc: Accelerator) -> tuple[int, int] | None:
    """(physical, shipped) cores per die of a preset whose chip file has a ``[harvest]`` table
    (a chip whose dies carry spare cores the product does not enable), else None."""
    harvest = shipped_toml("harvest.toml").get("preset", {}).get(acc.profile_name)
    if harvest is None:
        return None
    cores = int(harvest["physical_cores"]["value"])
    shipped = int(harvest["shipped_cores"]["value"])
    if shipped * acc.dies != acc.num_vc:
        raise ConfigError(
            f"arch_space/data/chips/{acc.profile_name}.toml [harvest]: shipped_cores = {shipped} per die x "
            f"dies = {acc.dies} must equal num_vc = {acc.num_vc}"
        )
    return cores, shipped


def core_area_mm2(acc: Accelerator, tech: TechNode | None = None) -> float:
    """Area (mm2) of one core as a harvested chip counts them: its tensor and vector cores
    over the vector-core count (on a GPU, one SM), without its uncore share."""
    parts = area_breakdown_mm2(acc, tech)
    return (parts["tensor_cores"] + parts["vector_cores"]) / acc.num_vc


def made_die_area_mm2(acc: Accelerator, tech: TechNode | None = None) -> float:
    """Area (mm2) of one die as made, the size a published die figure measures: the modelled
    die (:func:`die_area_mm2`) plus, for a preset in ``harvest.toml``, its spare cores, each
    with its uncore share like every shipped core.

    Examples
    --------
    >>> from arch_space.presets import preset
    >>> round(made_die_area_mm2(preset("a100")))
    826
    """
    tech = tech or tech_node(acc.node_nm)
    area = die_area_mm2(acc, tech)
    harvest = harvest_cores(acc)
    if harvest is None:
        return area
    cores, shipped = harvest
    return area + with_uncore(tech, (cores - shipped) * core_area_mm2(acc, tech))


def counted_format_lanes(acc: Accelerator) -> float:
    """The format lanes the area model adds to ``acc``'s tensor cores: none for a preset
    with published peaks (its measured die holds them), else
    :func:`~arch_space.formats.format_lane_factor` of its formats."""
    if acc.profile_name and preset_format_rates(acc.profile_name) is not None:
        return 0.0
    return format_lane_factor(acc.formats)


def with_uncore(tech: TechNode, on_die: Any) -> Any:
    """``on_die`` (the area, energy or power of on-die units) with the node's uncore share
    on top: ``overhead_fraction`` more for clock tree, control and on-chip network, the same
    fraction the area model counts as uncore area."""
    return on_die * (1.0 + tech.overhead_fraction)


def mac_pj(acc: Accelerator, tech: TechNode) -> float:
    """Energy (pJ) of one MAC on ``acc``'s tensor cores: arithmetic, control and clocking,
    and operand delivery of ``1/rows + 1/cols`` elements (an array of ``rows x cols`` MACs
    takes ``rows`` inputs and gives ``cols`` partial sums per cycle)."""
    return _mac_pj(tech, acc.tc_rows, acc.tc_cols, acc.bytes_per_element)


def mac_energy_pj(acc: Accelerator, tech: TechNode) -> float:
    """Energy (pJ) the op model charges each MAC of ``acc``: :func:`mac_pj` with its uncore
    share (:func:`with_uncore`)."""
    return with_uncore(tech, mac_pj(acc, tech))


def unit_pj_per_op(acc: Accelerator, unit: ComputeUnit, tech: TechNode) -> float:
    """Energy (pJ, without the uncore share) of one operation on ``unit``: a MAC of the
    tensor cores (:func:`mac_pj`), a lane operation of the vector cores (the node's), or a
    further unit's own ``pj_per_op``."""
    if unit.kind == TENSOR:
        return mac_pj(acc, tech)
    if unit.kind == VECTOR:
        return tech.vector_lane_energy_pj
    return unit.pj_per_op


def format_mac_pj(acc: Accelerator, tech: TechNode, fmt: str) -> float:
    """Energy (pJ) of one MAC in ``fmt`` on ``acc``'s tensor cores: the arithmetic at the
    format's relative energy (``data/formats.toml`` (d)), control and clocking, and operand
    delivery at the format's bytes (one for an 8-bit format, half for fp4); bf16 is
    :func:`mac_pj`."""
    return _format_mac_pj(tech, acc.tc_rows, acc.tc_cols, acc.bytes_per_element, fmt)


_FORMAT_BYTES = MappingProxyType({"fp8": 1.0, "int8": 1.0, "fp4": 0.5})


def _format_mac_pj(tech: TechNode, rows: Any, cols: Any, bytes_per_element: int, fmt: str) -> Any:
    if fmt in HALF_FORMATS:  # fp16 and bf16 share the 16-bit MAC (Horowitz's fp16 one)
        return _mac_pj(tech, rows, cols, bytes_per_element)
    operand_bytes = _FORMAT_BYTES[fmt] * (1.0 / rows + 1.0 / cols)
    return (
        tech.mac_energy_pj * format_options()[fmt].relative_energy
        + tech.control_pj_per_mac
        + operand_bytes * tech.operand_pj_per_byte
    )


def _mac_pj(tech: TechNode, rows: Any, cols: Any, bytes_per_element: int) -> Any:
    operand_bytes = bytes_per_element * (1.0 / rows + 1.0 / cols)
    return tech.mac_energy_pj + tech.control_pj_per_mac + operand_bytes * tech.operand_pj_per_byte


def tensor_load_power_w(
    tech: TechNode,
    *,
    num_tc: Any,
    tc_rows: Any,
    tc_cols: Any,
    clock_hz: float,
    bytes_per_element: int,
    area_mm2: Any,
    formats: tuple[tuple[str, float], ...] = (("bf16", 1.0),),
) -> Any:
    """Power (W) with every tensor core doing a MAC each cycle (with its control, operand
    delivery and uncore share) plus leakage: the closed form of a design's power under
    tensor load, elementwise on numpy arrays, for filtering whole design spaces at once.
    With several ``formats`` (format, relative rate) the load is the most power-hungry
    one's (fp8 at twice the bf16 rate draws more than bf16)."""
    macs_per_s = num_tc * tc_rows * tc_cols * clock_hz
    mac = _mac_pj(tech, tc_rows, tc_cols, bytes_per_element)
    for fmt, rate in formats[1:]:
        mac = np.maximum(mac, rate * _format_mac_pj(tech, tc_rows, tc_cols, 2, fmt))
    return with_uncore(tech, macs_per_s * mac) * _PJ + area_mm2 * tech.leakage_w_per_mm2


def capped_clock_fraction(power_w: Any, leakage_w: Any, budget_w: float) -> Any:
    """The share of its clock a chip drawing ``power_w`` under tensor load (``leakage_w`` of
    it leakage) holds at a board limit of ``budget_w``: dynamic power scales with the clock
    at a fixed voltage and leakage does not; in [0, 1], elementwise on numpy arrays."""
    return np.clip((budget_w - leakage_w) / (power_w - leakage_w), 0.0, 1.0)


def static_power_w(acc: Accelerator, tech: TechNode | None = None) -> float:
    """Leakage power (W): the silicon as made (:func:`made_die_area_mm2`, every die) x the
    node's leakage per mm2, which is a whole die's measured idle power over its size."""
    tech = tech or tech_node(acc.node_nm)
    return made_die_area_mm2(acc, tech) * acc.dies * tech.leakage_w_per_mm2


def dynamic_power_breakdown_w(
    acc: Accelerator, tech: TechNode | None = None
) -> Mapping[str, float]:
    """Peak dynamic power (W) per component when every unit is busy every cycle.

    * tensor cores: every MAC each cycle, with its operand delivery;
    * vector cores: every lane one operation each cycle;
    * GLB: each weight-stationary tensor core reads ``tc_rows`` input elements and writes
      ``tc_cols`` output elements per cycle; each vector lane streams one element per cycle
      from the buffer (its other operand and its result stay in its register slice);
    * further units (only when there are any): every unit its operations each cycle;
    * HBM: the full bandwidth;
    * uncore: the overhead fraction of the on-die dynamic power (clock tree, NoC, control),
      the same fraction the area model uses for uncore area.
    """
    tech = tech or tech_node(acc.node_nm)
    f = acc.clock_hz
    e = acc.bytes_per_element
    tc = acc.macs_per_cycle * f * mac_pj(acc, tech) * _PJ
    vc = acc.num_vc * acc.vc_lanes * f * tech.vector_lane_energy_pj * _PJ
    read_b = (acc.num_tc * acc.tc_rows + acc.num_vc * acc.vc_lanes) * e * f
    write_b = acc.num_tc * acc.tc_cols * e * f
    glb = (read_b * tech.sram_read_pj_per_byte + write_b * tech.sram_write_pj_per_byte) * _PJ
    parts = {"tensor_cores": tc, "vector_cores": vc, "glb_sram": glb}
    if acc.extra_units:
        parts["extra_units"] = sum(
            u.count * u.ops_per_cycle * f * u.pj_per_op * _PJ for u in acc.extra_units
        )
    uncore = tech.overhead_fraction * sum(parts.values())
    hbm = acc.hbm_bandwidth_bytes_per_s * tech.hbm_energy_pj_per_byte * _PJ
    return MappingProxyType({**parts, "uncore": uncore, "hbm": hbm})


def peak_power_w(acc: Accelerator, tech: TechNode | None = None) -> float:
    """Power (W) with every unit busy every cycle at the nominal clock: the peak dynamic power
    of every component plus leakage, above what any real op draws (a design-time ceiling)."""
    tech = tech or tech_node(acc.node_nm)
    return math.fsum(dynamic_power_breakdown_w(acc, tech).values()) + static_power_w(acc, tech)
