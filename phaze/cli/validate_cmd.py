"""``phaze validate``: published measurements beside the model's predictions.

Every subcommand builds :class:`phaze.validation.rows.ValidationRow` values (measured, predicted,
source) and hands them to the one routine :func:`report_validation`, which prints the %
errors with their mean and maximum and exits with status 3 when any error is outside the
tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import click

from arch_space.perf import gemm_measurements, gemm_report
from arch_space.perf.device import preset_profile
from arch_space.presets import preset
from phaze.cli import NoFeasiblePoint
from phaze.cli._options import FiniteFloat
from phaze.cli._render import echo_json, table
from phaze.validation.rows import ValidationRow
from phaze_common.units import fmt_column

__all__ = [
    "report_validation",
    "tolerance_option",
    "validate",
    "pct_text",
    "mean_max_text",
]


def report_validation(
    title: str,
    rows: Sequence[ValidationRow],
    *,
    unit: str,
    tolerance_pct: float,
    as_json: bool,
    informative: tuple[str, Sequence[ValidationRow]] | None = None,
) -> None:
    """Print ``rows`` (case, measured, predicted, % error) with the mean and max |error|,
    then the ``informative`` (title, rows), which have no tolerance (in JSON: its
    ``informative`` key).

    Raises
    ------
    NoFeasiblePoint
        (exit status 3) if any of ``rows`` has an |error| over ``tolerance_pct``; the report
        is printed first.
    """
    doc = _summary(title, rows, unit, tolerance_pct)
    outside = [r.case for r in rows if abs(r.error_pct) > tolerance_pct]
    more = _summary(informative[0], informative[1], unit, None) if informative else None
    if as_json:
        echo_json(doc if more is None else {**doc, "informative": more})
    else:
        _print(doc, rows, unit)
        if more is not None:
            click.echo("")
            _print(more, informative[1], unit)
    max_pct = doc["max_abs_error_pct"]
    if outside:
        raise NoFeasiblePoint(
            f"validation outside ±{tolerance_pct:g}%: {', '.join(outside)} "
            f"(max |error| {max_pct:.1f}%)"
        )


def _summary(
    title: str, rows: Sequence[ValidationRow], unit: str, tolerance_pct: float | None
) -> dict:
    errors = [abs(r.error_pct) for r in rows]
    doc = {
        "title": title,
        "unit": unit,
        "tolerance_pct": tolerance_pct,
        "rows": [r.record() for r in rows],
        "mean_abs_error_pct": math.fsum(errors) / len(errors) if errors else 0.0,
        "max_abs_error_pct": max(errors, default=0.0),
    }
    if tolerance_pct is not None:
        doc["within_tolerance"] = all(e <= tolerance_pct for e in errors)
    return doc


def _print(doc: dict, rows: Sequence[ValidationRow], unit: str) -> None:
    sources = list(dict.fromkeys(r.source for r in rows))
    # one unit for both columns: that of the largest of all their values
    values = fmt_column([*(r.measured for r in rows), *(r.predicted for r in rows)], unit, 4)
    body = [
        (
            r.case,
            values[i],
            values[len(rows) + i],
            f"{r.error_pct:+.1f}",
            f"[{sources.index(r.source) + 1}]",
        )
        for i, r in enumerate(rows)
    ]
    tol = doc["tolerance_pct"]
    click.echo(doc["title"] + (f" (tolerance ±{tol:g}%)" if tol is not None else ""))
    click.echo(table(body, ["case", "measured", "predicted", "error %", "source"]))
    click.echo(
        f"mean |error| {doc['mean_abs_error_pct']:.1f}%, "
        f"max |error| {doc['max_abs_error_pct']:.1f}%"
    )
    for i, s in enumerate(sources, 1):
        click.echo(f"[{i}] {s}")


@click.group()
def validate() -> None:
    """Compare the models with published measurements (exit 3 if outside tolerance)."""


def pct_text(value: float | None, signed: bool = True) -> str:
    """A % error of a validation table to one decimal ("-" when there is none)."""
    if value is None:
        return "-"
    return f"{value:+.1f}" if signed else f"{value:.1f}"


def mean_max_text(group: dict) -> list[str]:
    """A summary group's mean and largest |error| % as table cells."""
    return [pct_text(group[k], signed=False) for k in ("mean_abs_error_pct", "max_abs_error_pct")]


def tolerance_option(flag: str, default: float, what: str):
    """A ``--...-tolerance-pct`` option: the largest allowed |error| of ``what``, in %."""
    return click.option(
        flag,
        type=FiniteFloat(0, 1000, lo_open=True),
        default=default,
        show_default=True,
        help=f"Largest allowed |error| of {what}, in %.",
    )


@validate.command()
@tolerance_option("--tolerance-pct", 20.0, "any case")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def gemm(tolerance_pct: float, as_json: bool) -> None:
    """GEMM latency on all tensor cores of a preset against published chip measurements."""
    rows = [
        ValidationRow(
            case=f"{c.preset} {c.case}",
            measured=c.measured_s,
            # one GPU running one kernel: the benchmark clock, not a training run's
            predicted=gemm_report(
                preset(c.preset), c.m, c.k, c.n, device=preset_profile(c.preset).alone()
            ).latency_s,
            source=c.source,
        )
        for c in gemm_measurements()
    ]
    report_validation(
        "GEMM latency, M x N x K", rows, unit="s", tolerance_pct=tolerance_pct, as_json=as_json
    )
