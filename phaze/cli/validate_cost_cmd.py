"""``phaze validate cost``: the cost of owning a preset, what it costs to make, and its board's
embodied carbon, beside published figures (``arch_space/data/cost_analyses.toml``).

A preset's cost per device-hour is its capital terms (:func:`arch_space.tco.device_hour_cost`,
in its own host server, on a fat tree the size of the analysed run) plus electricity at the
node's measured typical training load (0.76 of its maximum) and the default PUE and price;
the published ownership-cost analyses decide. Build costs are compared with teardown
estimates, board footprints with product carbon footprints. Rows marked fit are in-sample
(their constants come from the compared figure); informative rows and cloud rental prices
do not set the exit status.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import click

from arch_space import device_cost_usd, embodied_kgco2e, preset
from arch_space._data import shipped_toml
from arch_space.system import typical_load_fraction
from arch_space.tco import build_cost_usd, device_hour_cost
from phaze.cli import NoFeasiblePoint
from phaze.cli._render import echo_json, table
from phaze.cli.validate_cmd import report_validation, tolerance_option
from phaze.model.scoring import ScoringParams, system_capex
from phaze.validation.rows import ValidationRow
from phaze_common.units import fmt_column, fmt_noun

__all__ = ["device_hour_usd", "cost"]

_GIB = 1 << 30


def device_hour_usd(arch: str, devices: int) -> float:
    """The cost (USD) of holding one ``arch`` preset for an hour in a cluster of ``devices``,
    in its own host server, with the default scoring and electricity at typical load."""
    acc = preset(arch)
    params = ScoringParams().for_accelerator(acc.profile_name)
    capex = system_capex(acc, devices, params)
    rates = device_hour_cost(capex, lifetime_s=params.lifetime_s, interest=params.interest)
    typical_kw = capex.provisioned_w * typical_load_fraction() / 1000.0
    return rates.total + typical_kw * params.pue * params.usd_per_kwh


def _rows(section: str) -> Mapping[str, Mapping[str, Any]]:
    return shipped_toml("cost_analyses.toml")[section]


def _case(name: str, row: Mapping[str, Any]) -> str:
    return name + (" (fit)" if row.get("fit") else "")


def _ownership() -> tuple[list[ValidationRow], list[ValidationRow]]:
    gated, informative = [], []
    for name, r in _rows("ownership").items():
        row = ValidationRow(
            f"{name}, {fmt_noun(r['devices'], 'device')}",
            r["usd_per_device_hour"],
            device_hour_usd(r["arch"], r["devices"]),
            r["source"],
        )
        (informative if r.get("informative") else gated).append(row)
    return gated, informative


def _teardown() -> list[ValidationRow]:
    rows = []
    for name, r in _rows("teardown").items():
        acc = preset(r["arch"])
        made = device_cost_usd(acc) if r["part"] == "chip" else build_cost_usd(acc)
        rows.append(ValidationRow(f"{_case(name, r)} {r['part']}", r["usd"], made, r["source"]))
    return rows


def _embodied() -> list[ValidationRow]:
    rows = []
    for name, r in _rows("embodied").items():
        acc = preset(r["arch"])
        if "hbm_gib" in r:
            acc = dataclasses.replace(acc, hbm_bytes=int(r["hbm_gib"] * _GIB))
        rows.append(
            ValidationRow(f"{_case(name, r)} board", r["kgco2e"], embodied_kgco2e(acc), r["source"])
        )
    return rows


def _cloud_table() -> str:
    cloud = _rows("cloud")
    rates = fmt_column([r["usd_per_device_hour"] for r in cloud.values()], "USD")
    owned = {r["arch"]: device_hour_usd(r["arch"], 1024) for r in cloud.values()}
    modelled = fmt_column([owned[r["arch"]] for r in cloud.values()], "USD")
    body = [
        [name, rate, own, r["source"]]
        for (name, r), rate, own in zip(cloud.items(), rates, modelled, strict=True)
    ]
    return table(
        body, ["cloud rate (context)", "per device-hour", "owned, 1,024 devices", "source"]
    )


@click.command("cost")
@tolerance_option("--tolerance-pct", 30.0, "a cost per device-hour, build cost or footprint")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def cost(tolerance_pct: float, as_json: bool) -> None:
    """A preset's cost per device-hour against published ownership-cost analyses, build
    costs against teardown estimates and board footprints against product carbon footprints
    (cloud rental prices are printed as context)."""
    ownership, informative = _ownership()
    checks = (
        ("Cost of owning an accelerator, per device-hour", ownership, "USD"),
        ("Cost to make one accelerator", _teardown(), "USD"),
        ("Embodied carbon of one accelerator board, cradle to gate", _embodied(), "kgCO2e"),
    )
    outside = [r.case for _, rows, _ in checks for r in rows if abs(r.error_pct) > tolerance_pct]
    if as_json:
        cloud = [
            {"case": n, "usd_per_device_hour": r["usd_per_device_hour"], "source": r["source"]}
            for n, r in _rows("cloud").items()
        ]
        echo_json(
            {
                "tolerance_pct": tolerance_pct,
                "rows": [r.record() for _, rows, _ in checks for r in rows],
                "informative": [r.record() for r in informative],
                "cloud": cloud,
                "within_tolerance": not outside,
            }
        )
    else:
        for title, rows, unit in checks:
            more = ("Informative (no tolerance)", informative) if rows is ownership else None
            try:
                report_validation(
                    title,
                    rows,
                    unit=unit,
                    tolerance_pct=tolerance_pct,
                    as_json=False,
                    informative=more,
                )
            except NoFeasiblePoint:
                pass
            click.echo("")
        click.echo(_cloud_table())
    if outside:
        raise NoFeasiblePoint(f"validation outside ±{tolerance_pct:g}%: {', '.join(outside)}")
