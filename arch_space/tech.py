"""Per-process-node technology data (area, energy, leakage), loaded from data/tech.toml.

Every number lives in the data file beside its source; this module only types and loads it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from arch_space._data import number_problem, plain_values, read_toml, shipped_toml, unknown_keys
from phaze_common.errors import ConfigError

__all__ = [
    "TechNode",
    "tech_node",
    "known_nodes",
    "unknown_node_problem",
    "tech_overrides_from_toml",
]

_TECH_FILE = "tech.toml"


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
    # Fields added after the first contract; the defaults (7 nm values) only keep hand-built
    # TechNodes working, the loader always sets them from tech.toml.
    core_fixed_area_mm2: float = 0.2776  # per tensor or vector core: sequencer, staging, DMA
    hbm_stack_bandwidth_bytes_per_s: float = 409.6e9  # one HBM stack of this node's era
    hbm_stack_max_bytes: int = 16 * 2**30  # largest HBM stack of this node's era
    control_pj_per_mac: float = 0.0  # per MAC beside its arithmetic: clocking, sequencing
    operand_pj_per_byte: float = 0.0  # per byte fed into or out of a MAC array
    operand_port_area_um2: float = 14577.0  # per element a tensor array takes or gives per cycle

    def __post_init__(self) -> None:
        where = f"tech node {self.node_nm} nm"
        problems = []
        for f in fields(self):
            if f.name == "node_nm":
                continue
            strict = f.name not in (
                "overhead_fraction",
                "leakage_w_per_mm2",
                "core_fixed_area_mm2",
                "control_pj_per_mac",
                "operand_pj_per_byte",
                "operand_port_area_um2",
            )
            p = number_problem(
                where,
                f.name,
                getattr(self, f.name),
                integer=f.name == "hbm_stack_max_bytes",
                strict=strict,
            )
            if p:
                problems.append(p)
        if problems:
            raise ConfigError("; ".join(problems))


@functools.lru_cache(maxsize=1)
def known_nodes() -> tuple[int, ...]:
    """The process nodes (nm) with shipped technology data, largest first."""
    return tuple(sorted((int(k) for k in shipped_toml(_TECH_FILE)["node"]), reverse=True))


def unknown_node_problem(where: str, shown: str) -> str:
    """The message for a ``node_nm`` (shown as ``shown``) without technology data."""
    known = ", ".join(map(str, known_nodes()))
    return f"{where}: node_nm = {shown} is not a known process node (known: {known})"


def tech_node(node_nm: int, overrides: Mapping[str, Any] | None = None) -> TechNode:
    """The technology constants of ``node_nm`` from the shipped data, with ``overrides``.

    Parameters
    ----------
    node_nm
        A node listed by :func:`known_nodes` (28, 16, 12, 7, 5, 3).
    overrides
        Field name -> value replacing the shipped value (e.g. ``{"mac_energy_pj": 0.25}``),
        for a user who knows better numbers. Unknown names are errors naming the nearest field.

    Examples
    --------
    >>> tech_node(7).sram_area_mm2_per_mib
    1.0
    >>> tech_node(7, {"mac_energy_pj": 0.25}).mac_energy_pj
    0.25
    """
    base = _shipped_node(node_nm)
    if not overrides:
        return base
    names = [f.name for f in fields(TechNode) if f.name != "node_nm"]
    problems = unknown_keys(f"tech overrides for {node_nm} nm", overrides, names)
    if problems:
        raise ConfigError("; ".join(problems))
    values = {f.name: getattr(base, f.name) for f in fields(TechNode)}
    values.update(overrides)
    return TechNode(**values)


@functools.cache
def _shipped_node(node_nm: int) -> TechNode:
    nodes = shipped_toml(_TECH_FILE)["node"]
    if str(node_nm) not in nodes:
        raise ConfigError(
            f"unknown process node {node_nm!r} nm (known: {', '.join(map(str, known_nodes()))})"
        )
    return TechNode(node_nm=node_nm, **plain_values(nodes[str(node_nm)]))


def tech_overrides_from_toml(path: str | Path) -> dict[int, dict[str, Any]]:
    """Per-node overrides from a TOML file laid out like ``tech.toml`` (``[node.7]`` tables of
    plain numbers or ``{value, source}``), for :func:`tech_node`'s ``overrides``.

    Every node must be known and every key a TechNode field; all problems are reported at once.
    """
    data = read_toml(path)
    problems = unknown_keys(str(path), data, ["node"])
    names = [f.name for f in fields(TechNode) if f.name != "node_nm"]
    out: dict[int, dict[str, Any]] = {}
    nodes = data.get("node", {})
    if not isinstance(nodes, Mapping):
        raise ConfigError(f"{path} [node]: must be a table of [node.N] tables, got {nodes!r}")
    for name, table in nodes.items():
        where = f"{path} [node.{name}]"
        if not isinstance(table, Mapping):
            problems.append(f"{where}: must be a table, got {table!r}")
            continue
        if not name.isdigit() or int(name) not in known_nodes():
            problems.append(
                f"{where}: unknown process node {name!r} (known: {', '.join(map(str, known_nodes()))})"
            )
            continue
        problems += unknown_keys(where, table, names)
        values = {k: v for k, v in plain_values(table).items() if k in names}
        try:
            tech_node(int(name), values)
        except ConfigError as e:
            problems.append(f"{where}: {e}")
        out[int(name)] = values
    if problems:
        raise ConfigError("; ".join(problems))
    return out
