"""``phaze validate serve``: the serving model against published serving measurements.

Every point of ``phaze/data/serving_points.toml`` is predicted at its published layout
(:mod:`phaze.validation.serving`); the table shows each row's error, then the mean and
largest |error| of the fitted and held-out rows and by kind of point, and lists the rows
that wait (a weight format not modelled, a dataset's lengths not collected). Each row runs
under the engine profile it names (``phaze/data/serving_engines.toml``). Exit status 3 when
the held-out mean or largest |error| misses its target.

A second section, "under load", simulates each run of ``phaze/data/serving_load_points.toml``
at its published request rate (:mod:`phaze.validation.serving_load`) and compares the
published TTFT, TPOT and end-to-end percentiles, with the p50 and the p99 points summarised
apart against their own targets (reported, not part of the exit status).
"""

from __future__ import annotations

import sys

import click

from phaze.cli import NoFeasiblePoint
from phaze.cli._render import echo_json, table
from phaze.cli.validate_cmd import mean_max_text, pct_text, tolerance_option
from phaze.cli.validate_serve_load import load_section, print_load_section
from phaze.validation.serving import RowResult, evaluate_rows, load_points, summarize
from phaze_common.units import fmt_quantity

__all__ = ["serve"]


def _group_rows(summary: dict) -> list[list[str]]:
    def line(name: str, g: dict) -> list[str]:
        return [name, str(g["evaluated"]), *mean_max_text(g)]

    rows = [line("fitted", summary["fitted"]), line("held out", summary["held_out"])]
    rows += [line(f"kind {k}", g) for k, g in summary["by_kind"].items()]
    return rows


def _print(results: list[RowResult], summary: dict, targets: tuple[float, float]) -> None:
    sources = list(dict.fromkeys(r.row.citation for r in results))
    live = [r for r in results if not r.row.waiting]
    click.echo(
        f"Published serving points (phaze/data/serving_points.toml): {len(results)} points, "
        f"{len(live)} evaluated, {summary['waiting']} waiting"
    )
    rows = [
        [
            r.row.case,
            r.row.engine,
            r.row.metric,
            fmt_quantity(r.row.measured, r.row.unit, digits=4),
            "infeasible" if r.predicted is None else fmt_quantity(r.predicted, r.row.unit, 4),
            pct_text(r.error_pct),
            "fit" if r.row.fitted else "held out",
            f"[{sources.index(r.row.citation) + 1}]",
        ]
        for r in live
    ]
    head = ["point", "engine", "metric", "published", "predicted", "error %", "", "source"]
    click.echo(table(rows, head))
    click.echo("")
    click.echo(table(_group_rows(summary), ["group", "rows", "mean |error| %", "max |error| %"]))
    click.echo(
        f"target: held-out mean |error| <= {targets[0]:g}% and max <= {targets[1]:g}% (no "
        "parameter is fitted to these rows)"
    )
    for r in live:
        if r.predicted is None:
            click.echo(f"{r.row.case}: {r.reason}")
    waiting = [r for r in results if r.row.waiting]
    if waiting:
        click.echo("")
        click.echo("waiting (not evaluated):")
        for r in waiting:
            click.echo(f"  {r.row.case}: {r.reason}")
    for i, s in enumerate(sources, 1):
        click.echo(f"[{i}] {s}")


@click.command("serve")
@tolerance_option("--held-out-mean-pct", 12.0, "the held-out points' mean")
@tolerance_option("--held-out-max-pct", 35.0, "any held-out point")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def serve(held_out_mean_pct: float, held_out_max_pct: float, as_json: bool) -> None:
    """Published serving measurements (gpt-fast decode at batch 1, TensorRT-LLM static-batch
    throughput and first-token latency, MLPerf and TensorRT-LLM FP8 tables) against the
    serving model at their published layouts, and published latency percentiles at a
    request rate (MLPerf Server runs) against the simulation under load.

    Points that ran a weight format Phaze does not model for serving, or whose dataset's
    lengths are not collected, are listed as waiting. Each point runs under the serving
    engine it was measured with (its profile). No parameter is fitted to these points.
    Exits 3 when the held-out mean or largest |error| misses its target.
    """
    rows = load_points()
    show = sys.stderr.isatty()

    def progress(i: int, row) -> None:
        if show:
            click.echo(f"[{i + 1}/{len(rows)}] {row.case}", err=True)

    results = evaluate_rows(rows, progress)
    summary = summarize(results)
    under_load = load_section(show)
    held = summary["held_out"]
    mean, largest = held["mean_abs_error_pct"], held["max_abs_error_pct"]
    misses = []
    if mean is None:
        misses.append("held-out mean |error|: no evaluated point")
    else:
        if mean > held_out_mean_pct:
            misses.append(f"held-out mean |error| {mean:.1f}% exceeds {held_out_mean_pct:g}%")
        if largest > held_out_max_pct:
            misses.append(f"held-out max |error| {largest:.1f}% exceeds {held_out_max_pct:g}%")
    if as_json:
        echo_json(
            {
                "target_held_out_mean_abs_error_pct": held_out_mean_pct,
                "target_held_out_max_abs_error_pct": held_out_max_pct,
                "rows": [r.record() for r in results],
                "summary": summary,
                "within_target": not misses,
                "under_load": under_load,
            }
        )
    else:
        _print(results, summary, (held_out_mean_pct, held_out_max_pct))
        print_load_section(under_load)
    if misses:
        raise NoFeasiblePoint("; ".join(misses))
