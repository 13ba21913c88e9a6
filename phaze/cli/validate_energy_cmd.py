"""``phaze validate energy``: average power and energy of published training runs.

Each run (``arch_space/data/energy_runs.toml``) is evaluated in its published (or stated
assumed) layout; its average accelerator power (board, or with its host's share where the
publication measured that) is compared with the published figure, and that power times the
published GPU-hours (and PUE) with the published energy.
"""

from __future__ import annotations

import click

from arch_space import Cluster, preset
from arch_space._data import shipped_toml
from phaze.api import evaluate as api_evaluate
from phaze.cli import NoFeasiblePoint
from phaze.cli._render import echo_json
from phaze.cli.validate_cmd import ValidationRow, report_validation
from phaze.scoring import ScoringParams

__all__ = ["energy", "energy_rows"]

_J_PER_WH = 3600.0  # joules per watt-hour: power (W) x GPU-hours -> J


def energy_rows() -> tuple[list[ValidationRow], list[ValidationRow]]:
    """(power rows in W, energy rows in J) of every published run."""
    power, energy = [], []
    for name, run in shipped_toml("energy_runs.toml")["run"].items():
        params = ScoringParams(host_profile=run["host"], pue=run["pue"])
        ev = api_evaluate(
            run["workload"],
            preset(run["arch"]),
            Cluster(devices=run["devices"]),
            seq_len=run["seq_len"],
            global_batch=run["global_batch"],
            strategy=run["strategy"],
            scoring=params,
        )
        if not ev.feasible:
            raise NoFeasiblePoint(f"{name}: infeasible in its layout: {ev.reason}")
        sc = ev.score
        per_device = sc.energy_per_batch_j / sc.iteration_s / run["devices"]
        board = (sc.energy_per_batch_j - sc.energy_host_j) / sc.iteration_s / run["devices"]
        source = f"{run['source']}; layout {run['layout_source']}"
        if "board_w" in run:
            power.append(ValidationRow(f"{name} board W", run["board_w"], board, source))
            predicted = board * run["gpu_hours"] * _J_PER_WH * run["pue"]
            energy.append(ValidationRow(f"{name} board", run["board_energy_j"], predicted, source))
        else:
            power.append(ValidationRow(f"{name} with host W", run["system_w"], per_device, source))
            predicted = per_device * run["gpu_hours"] * _J_PER_WH * run["pue"]
            energy.append(
                ValidationRow(f"{name} facility", run["facility_energy_j"], predicted, source)
            )
    return power, energy


@click.command("energy")
@click.option(
    "--power-tolerance-pct",
    type=click.FloatRange(min=0, min_open=True),
    default=20.0,
    show_default=True,
    help="Largest allowed |error| of an average power, in %.",
)
@click.option(
    "--energy-tolerance-pct",
    type=click.FloatRange(min=0, min_open=True),
    default=25.0,
    show_default=True,
    help="Largest allowed |error| of a training energy, in %.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def energy(power_tolerance_pct: float, energy_tolerance_pct: float, as_json: bool) -> None:
    """Average accelerator power and training energy against published runs."""
    power, energy_ = energy_rows()
    outside = [r.case for r in power if abs(r.error_pct) > power_tolerance_pct]
    outside += [r.case for r in energy_ if abs(r.error_pct) > energy_tolerance_pct]
    if as_json:
        echo_json(
            {
                "rows": [
                    {
                        "case": r.case,
                        "measured": r.measured,
                        "predicted": r.predicted,
                        "error_pct": r.error_pct,
                        "source": r.source,
                    }
                    for r in (*power, *energy_)
                ],
                "within_tolerance": not outside,
            }
        )
    else:
        for title, rows, unit, tol in (
            ("Average power per accelerator", power, "W", power_tolerance_pct),
            ("Training energy from published GPU-hours", energy_, "J", energy_tolerance_pct),
        ):
            try:
                report_validation(title, rows, unit=unit, tolerance_pct=tol, as_json=False)
            except NoFeasiblePoint:
                pass
            click.echo("")
    if outside:
        raise NoFeasiblePoint(f"validation outside tolerance: {', '.join(outside)}")
