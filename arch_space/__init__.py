"""The hardware half of Phaze (docs/models.md): accelerators, their area, power, dollar cost and
embodied carbon from cited per-node data, presets of real chips, and the design space.

The operator cost model lives in :mod:`arch_space.perf`. Data files with every constant and
its source: ``arch_space/data/{tech,cost,carbon}.toml``; shipped spaces:
``arch_space/data/space_{default,tiny}.toml``.

Examples
--------
>>> from arch_space import Space, area_mm2, preset
>>> round(preset("a100").peak_flops / 1e12)
312
>>> len(list(Space.named("tiny").enumerate()))
30
"""

from arch_space.accelerator import Accelerator, Cluster
from arch_space.area import (
    area_breakdown_mm2,
    area_mm2,
    hbm_stacks,
    peak_power_w,
    static_power_w,
)
from arch_space.carbon import (
    CarbonParams,
    embodied_kgco2e,
    grid_intensity,
    grid_regions,
    operational_kgco2e,
)
from arch_space.config import (
    accelerator_from_toml,
    accelerator_to_toml,
    cluster_from_toml,
    cluster_to_toml,
    load_accelerator,
)
from arch_space.cost import CostParams, device_cost_usd, die_cost_usd, die_yield, dies_per_wafer
from arch_space.power import tdp_w
from arch_space.presets import preset, preset_names
from arch_space.space import Space, design_id, load_space, space_names
from arch_space.summary import describe
from arch_space.tech import TechNode, known_nodes, tech_node

__all__ = [
    "Accelerator",
    "Cluster",
    "TechNode",
    "tech_node",
    "known_nodes",
    "area_breakdown_mm2",
    "area_mm2",
    "hbm_stacks",
    "static_power_w",
    "tdp_w",
    "peak_power_w",
    "CostParams",
    "dies_per_wafer",
    "die_yield",
    "die_cost_usd",
    "device_cost_usd",
    "CarbonParams",
    "embodied_kgco2e",
    "operational_kgco2e",
    "grid_intensity",
    "grid_regions",
    "preset",
    "preset_names",
    "accelerator_from_toml",
    "accelerator_to_toml",
    "load_accelerator",
    "cluster_from_toml",
    "cluster_to_toml",
    "Space",
    "space_names",
    "load_space",
    "design_id",
    "describe",
]
