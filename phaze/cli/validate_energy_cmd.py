"""``phaze validate energy``: the rows of :mod:`phaze.validation.energy` (power, GPU-hours,
energy and carbon of published training runs beside the model's) as tables or JSON."""

from __future__ import annotations

import click

from phaze.cli import NoFeasiblePoint
from phaze.cli._render import echo_json, table
from phaze.cli.validate_cmd import report_validation, tolerance_option
from phaze.validation.energy import J_PER_KWH, energy_rows
from phaze_common.units import fmt_column

__all__ = ["energy"]


@click.command("energy")
@tolerance_option("--power-tolerance-pct", 20.0, "an average power")
@tolerance_option("--energy-tolerance-pct", 25.0, "a training energy")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def energy(power_tolerance_pct: float, energy_tolerance_pct: float, as_json: bool) -> None:
    """Accelerator power, GPU-hours, training energy and operational carbon against published
    runs; GPU-hours, energy and carbon are held to the energy tolerance."""
    v = energy_rows()
    checks = (
        ("Power per accelerator", v.power, "W", power_tolerance_pct),
        ("GPU-hours for the published tokens", v.hours, "h", energy_tolerance_pct),
        ("Training energy from published GPU-hours", v.energy, "J", energy_tolerance_pct),
        ("Operational carbon at the published intensity", v.carbon, "kgCO2e", energy_tolerance_pct),
    )
    outside = [r.case for _, rows, _, tol in checks for r in rows if abs(r.error_pct) > tol]
    if as_json:
        echo_json(
            {
                "runs": [
                    {
                        "run": n,
                        "board_w": b,
                        "with_host_w": h,
                        "modelled_energy_j": e,
                        "energy_tdp_accounting_kwh": t / J_PER_KWH,
                    }
                    for n, b, h, e, t in v.runs
                ],
                "rows": [r.record() for r in (*v.power, *v.hours, *v.energy, *v.carbon)],
                "within_tolerance": not outside,
            }
        )
    else:
        _, boards, hosts, modelled, tdp = zip(*v.runs, strict=True)
        watts = fmt_column([*boards, *hosts], "W")
        joules = fmt_column([*modelled, *tdp], "J")
        n = len(v.runs)
        rows = [
            [r[0], watts[i], watts[n + i], joules[i], joules[n + i]] for i, r in enumerate(v.runs)
        ]
        headers = ["run", "average board draw", "with host share", "energy, modelled"]
        click.echo(table(rows, [*headers, "model-card (GPU-h x TDP x PUE)"]))
        click.echo("")
        for title, rows, unit, tol in checks:
            try:
                report_validation(title, rows, unit=unit, tolerance_pct=tol, as_json=False)
            except NoFeasiblePoint:
                pass
            click.echo("")
    if outside:
        raise NoFeasiblePoint(f"validation outside tolerance: {', '.join(outside)}")
