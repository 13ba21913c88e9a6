"""Every figure of merit of one accelerator in one plain mapping (what ``phaze arch show``
prints), computed by the area, power, cost and carbon models with the given parameters."""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any

from arch_space.accelerator import Accelerator
from arch_space.area import (
    area_breakdown_mm2,
    dynamic_power_breakdown_w,
    hbm_stacks,
    peak_power_w,
    static_power_w,
)
from arch_space.carbon import CarbonParams, embodied_breakdown_kgco2e
from arch_space.cost import CostParams, cost_breakdown_usd, dies_per_wafer, made_die
from arch_space.power import tdp_w
from arch_space.space import design_id
from arch_space.system import datasheet_board_w
from arch_space.tco import build_cost_usd, buy_price_usd
from arch_space.tech import TechNode, tech_node

__all__ = ["describe"]


def describe(
    acc: Accelerator,
    tech: TechNode | None = None,
    cost: CostParams | None = None,
    carbon: CarbonParams | None = None,
) -> dict[str, Any]:
    """All parameters of ``acc`` (SI units) and its modelled figures, as a flat dict.

    Keys: the Accelerator fields (``extra_units`` as a list of dicts), ``design_id``, ``hbm_stacks_effective``, ``peak_flops``,
    ``area_mm2``, ``area_breakdown_mm2``, ``load_power_w`` (modelled, under tensor load),
    ``tdp_w`` and ``tdp_source`` (the data sheet's board power of a preset in a shipped
    server, else None), ``peak_power_w``
    (every unit busy) and its ``power_breakdown_w``, ``static_power_w``,
    ``dies_per_wafer``, ``yield``, ``die_cost_usd``, ``device_cost_usd`` (the chip),
    ``cost_breakdown_usd``, ``build_cost_usd`` (chip, board, a new design's non-recurring
    cost), ``price_usd`` (what an owner pays), ``embodied_kgco2e``, ``embodied_breakdown_kgco2e``
    (the board).
    """
    tech = tech or tech_node(acc.node_nm)
    cost = cost or CostParams.default()
    carbon = carbon or CarbonParams.default()
    area = dict(area_breakdown_mm2(acc, tech))
    area_total = sum(area.values())
    made_mm2, made_yield = made_die(acc, cost, tech)
    costs = dict(cost_breakdown_usd(acc, cost, tech))
    embodied = dict(embodied_breakdown_kgco2e(acc, carbon, cost, tech))
    # ``measured_as`` only where set: a design without keeps the keys it always had
    doc: dict[str, Any] = {
        f.name: getattr(acc, f.name)
        for f in fields(acc)
        if f.name != "measured_as" or acc.measured_as
    }
    doc["extra_units"] = [asdict(u) for u in acc.extra_units]
    board = datasheet_board_w(acc.profile_name)
    doc.update(
        design_id=design_id(acc),
        hbm_stacks_effective=hbm_stacks(acc, tech),
        peak_flops=acc.peak_flops,
        area_mm2=area_total,
        area_breakdown_mm2=area,
        load_power_w=tdp_w(acc, tech),
        tdp_w=board[0] if board else None,
        tdp_source=board[1] if board else None,
        peak_power_w=peak_power_w(acc, tech),
        power_breakdown_w={
            **dynamic_power_breakdown_w(acc, tech),
            "leakage": static_power_w(acc, tech),
        },
        static_power_w=static_power_w(acc, tech),
        die_area_mm2=made_mm2,  # one die as made: a harvested preset's spare cores too
        dies_per_wafer=dies_per_wafer(made_mm2, cost),
        **{"yield": made_yield},
        die_cost_usd=costs["die"],
        device_cost_usd=sum(costs.values()),
        cost_breakdown_usd=costs,
        build_cost_usd=build_cost_usd(acc, cost),
        price_usd=buy_price_usd(acc, cost),
        embodied_kgco2e=sum(embodied.values()),
        embodied_breakdown_kgco2e=embodied,
    )
    return doc
