"""Per-process-node technology data (area, energy, leakage), loaded from data/tech.toml.

Every number lives in the data file beside its source; this module only types and loads it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TechNode"]


@dataclass(frozen=True, slots=True)
class TechNode:
    """Technology constants of one process node, in SI-derived units named in each field."""

    node_nm: int
    mac_area_um2: float  # one bf16 MAC with its pipeline registers
    mac_energy_pj: float  # one bf16 multiply-accumulate
    sram_area_mm2_per_mib: float
    sram_read_pj_per_byte: float
    sram_write_pj_per_byte: float
    vector_lane_area_um2: float
    vector_lane_energy_pj: float  # one lane operation (one FLOP-ish op on one element)
    hbm_phy_area_mm2_per_stack: float
    hbm_energy_pj_per_byte: float
    overhead_fraction: float  # NoC / IO / uncore area as a fraction of the core area
    leakage_w_per_mm2: float
