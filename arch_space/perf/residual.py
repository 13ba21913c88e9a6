"""The part of a preset's fitted training clock that its power does not explain.

A preset's ``[<preset>.fitted] sustained_clock_fraction`` (``arch_space/data/devices.toml``)
is fitted to published training runs, so it holds both the clock the board's power limit
allows and what else a run loses (launch gaps, memory-bound kernels' clocks, framework
overheads). A searched design pays the first through its design space's power cap
(:mod:`arch_space.space`: every tensor core doing a MAC each cycle,
:func:`arch_space.area.tensor_load_power_w`, clocked down to the power budget). The residual
of a preset is its fitted clock over the clock that same cap gives its own silicon at its
board limit: the loss its fit holds beyond what a design pays. Designs, and presets without a
fitted clock, pay the mean residual of the presets with one, never more than 1 (a residual
above 1 says the cap already costs a design more than the fit costs the preset; it grants no
clock above the cap). Computed from the stored fits at load time, so a re-fit moves it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Final

from arch_space._data import shipped_toml
from arch_space.area import area_mm2, capped_clock_fraction, tensor_load_power_w
from arch_space.power_limit import preset_board_limit_w
from arch_space.presets import preset
from arch_space.tech import tech_node

__all__ = ["ClockResidual", "clock_residuals", "design_clock_residual", "power_capped_clock"]

_DATA_FILE: Final = "devices.toml"
_FITTED_CLOCK: Final = "sustained_clock_fraction"


@dataclass(frozen=True, slots=True)
class ClockResidual:
    """One fitted preset: its fitted training clock, the clock the design space's power cap
    gives its silicon at its board limit (both over its data-sheet clock), and their ratio."""

    preset: str
    fitted_clock_fraction: float
    power_clock_fraction: float

    @property
    def residual(self) -> float:
        """Fitted clock over the power-capped clock."""
        return self.fitted_clock_fraction / self.power_clock_fraction


def power_capped_clock(name: str) -> float:
    """The share of its data-sheet clock preset ``name``'s silicon would hold as a searched
    design at its board limit: :mod:`arch_space.space`'s cap under bf16 tensor load (the
    format of the runs the clocks are fitted to), at most 1."""
    acc = preset(name)
    tech = tech_node(acc.node_nm)
    area = area_mm2(acc, tech)
    power = tensor_load_power_w(
        tech,
        num_tc=acc.num_tc,
        tc_rows=acc.tc_rows,
        tc_cols=acc.tc_cols,
        clock_hz=acc.clock_hz,
        bytes_per_element=acc.bytes_per_element,
        area_mm2=area,
    )
    leakage = area * tech.leakage_w_per_mm2
    return float(capped_clock_fraction(power, leakage, preset_board_limit_w(name)))


@cache
def clock_residuals() -> tuple[ClockResidual, ...]:
    """Every preset whose stored table fits a training clock, by name."""
    data = shipped_toml(_DATA_FILE)
    return tuple(
        ClockResidual(name, float(table["fitted"][_FITTED_CLOCK]), power_capped_clock(name))
        for name, table in sorted(data.items())
        if _FITTED_CLOCK in table.get("fitted", {})
    )


def design_clock_residual(residuals: tuple[ClockResidual, ...] | None = None) -> float:
    """The training clock share a design (or a preset without a fitted clock) pays beyond
    its power cap: the mean residual of ``residuals`` (the stored fits by default), at most
    1; 1 when no preset fits a clock."""
    rows = clock_residuals() if residuals is None else residuals
    if not rows:
        return 1.0
    return min(1.0, sum(r.residual for r in rows) / len(rows))
