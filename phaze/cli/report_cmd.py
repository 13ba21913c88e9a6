"""``phaze report``, ``phaze pareto`` and ``phaze export``: read a sweep's results store.

DIR is a sweep's output directory (the one holding ``phaze.sqlite``). A missing directory or
store is an ``Error:`` with exit status 1; ``pareto`` exits 3 when no point is feasible.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from phaze.cli._files import cannot_write, check_writable, check_writable_dir
from phaze.cli._render import echo_json, table
from phaze_common.errors import ConfigError, Infeasible
from results.display import design_label, fmt_values, knob_columns, workload_title
from results.export import json_document, pairs_document, write_csv, write_pairs_csv
from results.pairs import FRONT_AXES, meeting
from results.pareto import Objective, pareto, parse_objectives
from results.schema import AGGREGATE_WORKLOAD, NUMERIC_COLUMNS
from results.store import load
from results.summary import by_workload, metric_for

__all__ = ["report", "pareto_cmd", "export"]

_DIR = click.Path(path_type=Path)


def _out_option(help_text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The ``--out FILE`` option (no default) with ``help_text``."""
    return click.option(
        "--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help=help_text
    )


@click.command("report")
@click.argument("directory", type=_DIR, metavar="DIR")
@_out_option("Where to write the HTML file (default: DIR/report.html).")
@click.option("--svg", is_flag=True, help="Embed the plots as SVG instead of PNG.")
@click.option(
    "--plots",
    "plots_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Also write every plot as PNG and SVG files into this directory.",
)
def report(directory: Path, out: Path | None, svg: bool, plots_dir: Path | None) -> None:
    """Write the self-contained HTML report of the sweep in DIR and print its path."""
    # matplotlib loads in about a second: only the command that draws pays for it.
    from results.report import REPORT_FILENAME, write_report

    load(directory).close()  # a missing or damaged store first, before creating anything
    target = out if out is not None else directory / REPORT_FILENAME
    check_writable(target, "--out")
    if plots_dir is not None:
        check_writable_dir(plots_dir, "--plots")
    try:
        path = write_report(
            directory, out, image_format="svg" if svg else "png", plots_dir=plots_dir
        )
    except OSError as e:
        raise cannot_write(Path(e.filename or target), e, "--out") from None
    if plots_dir is not None:
        click.echo(f"plots: PNG and SVG files in {plots_dir}", err=True)
    click.echo(str(path))


@click.command("pareto")
@click.argument("directory", type=_DIR, metavar="DIR")
@click.option(
    "--x", "x", default=None, metavar="METRIC", help="First objective (a column name; required)."
)
@click.option("--y", "y", default=None, metavar="METRIC", help="Second objective (required).")
@click.option("--z", "z", default=None, metavar="METRIC", help="Optional third objective.")
@click.option(
    "--workload",
    "-w",
    default=None,
    help=f"Only this workload ('{AGGREGATE_WORKLOAD}' = per-design aggregate). Default: one front per workload.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.option("--csv", "as_csv", is_flag=True, help="Print the front's points as CSV.")
@click.option(
    "--pairs",
    is_flag=True,
    help="The front of the prefill-decode design pairs a paired serving sweep stored "
    "(default objectives: the report's pair front).",
)
def pareto_cmd(
    directory: Path,
    x: str | None,
    y: str | None,
    z: str | None,
    workload: str | None,
    as_json: bool,
    as_csv: bool,
    pairs: bool,
) -> None:
    """Print the Pareto-optimal points of the sweep in DIR.

    METRIC is a column of `phaze export` (tokens_per_s, system_cost_usd, total_kgco2e, tcdp,
    ...). Each metric is maximised or minimised as it should be (throughput up, cost down);
    a prefix overrides it: `--x -tcdp` minimises, `--x +area_mm2` maximises. Fronts are
    computed per workload, since throughputs of different models do not compare; throughput
    metrics mean the throughput score for the aggregate rows.

    --json prints {"schema_version": 8, "objectives": [{"metric", "sense"}], "points": [...]}
    whose points have exactly the keys of `phaze export --json`, ordered by workload, then
    by the objectives (best first).

    --pairs: the front of the prefill-decode design pairs that meet the SLO at the rate,
    over --x and --y (default the report's pair front: usd_per_million_tokens_at_rate and
    tpot_p99_s, both minimised); --json gives "pairs" with the keys of `phaze export
    --pairs --json`.
    """
    if as_json and as_csv:
        raise click.UsageError("give at most one of --json and --csv")
    if pairs:
        _pairs_front(directory, (x, y, z), workload, as_json, as_csv)
        return
    if x is None or y is None:
        raise click.UsageError("give --x and --y (or --pairs, whose objectives have defaults)")
    objectives = parse_objectives([s for s in (x, y, z) if s is not None])
    with load(directory) as store:
        points = store.points(feasible_only=True)
    groups = by_workload(points)
    if workload is not None:
        if workload not in groups:
            known = ", ".join(groups) or "none"
            raise ConfigError(
                f"workload {workload!r} has no feasible point in {directory} (workloads: {known})"
            )
        groups = {workload: groups[workload]}
    if not groups:
        raise Infeasible(f"no feasible point is stored in {directory}")
    _check_metrics(objectives, groups, directory)
    fronts = {
        w: pareto(pts, [(metric_for(w, o.metric), o.sense) for o in objectives])
        for w, pts in groups.items()
    }
    if workload is None:  # e.g. mfu has no aggregate rows: leave out fronts with no point
        fronts = {w: front for w, front in fronts.items() if front} or fronts
    rows = [p for front in fronts.values() for p in front]
    if as_json:
        echo_json(
            json_document(
                rows, objectives=[{"metric": o.metric, "sense": o.sense} for o in objectives]
            )
        )
        return
    if as_csv:
        write_csv(rows, sys.stdout)
        return
    for w, front in fronts.items():
        metrics = [metric_for(w, o.metric) for o in objectives]
        names = ", ".join(
            f"{m} ({'max' if o.sense == 'max' else 'min'})"
            for m, o in zip(metrics, objectives, strict=True)
        )
        click.echo(
            f"{workload_title(w)}: {len(front)} of {len(groups[w])} feasible points on the front of {names}"
        )
        columns = [fmt_values(m, [p.get(m) for p in front]) for m in metrics]
        knobs, cells = knob_columns(front)  # a serving sweep's batch and layout
        body = [[design_label(p), *cells[i], *[c[i] for c in columns]] for i, p in enumerate(front)]
        click.echo(table(body, ["design", *knobs, *metrics]))
        click.echo("")


def _stored_pairs(directory: Path) -> list[dict[str, Any]]:
    """The prefill-decode pairs stored in ``directory``; none is one ConfigError."""
    with load(directory) as store:
        found = store.pairs()
    if not found:
        raise ConfigError(
            f"no prefill-decode pairs are stored in {directory}: a serving sweep stores them "
            "with --rate R --pairs"
        )
    return found


def _pairs_front(
    directory: Path,
    specs: tuple[str | None, str | None, str | None],
    workload: str | None,
    as_json: bool,
    as_csv: bool,
) -> None:
    """``pareto --pairs``: per workload, the front of the pairs meeting the SLO at the rate,
    over the given objectives or the report's (:data:`results.pairs.FRONT_AXES`)."""
    x, y, z = specs
    if (x is None) != (y is None):
        raise click.UsageError("with --pairs give both --x and --y, or neither")
    given = [s for s in (x, y, z) if s is not None]
    objectives = parse_objectives(given or [(m, "min") for m in FRONT_AXES])
    groups = by_workload(_stored_pairs(directory))
    if workload is not None:
        if workload not in groups:
            known = ", ".join(groups)
            raise ConfigError(
                f"workload {workload!r} has no pair in {directory} (workloads: {known})"
            )
        groups = {workload: groups[workload]}
    fronts = {w: pareto(meeting(ps), objectives) for w, ps in groups.items()}
    rows = [p for front in fronts.values() for p in front]
    if not rows:
        raise Infeasible(f"no prefill-decode pair stored in {directory} meets the SLO at the rate")
    if as_json:
        sense = [{"metric": o.metric, "sense": o.sense} for o in objectives]
        echo_json(pairs_document(rows, objectives=sense))
        return
    if as_csv:
        write_pairs_csv(rows, sys.stdout)
        return
    metrics = [o.metric for o in objectives]
    for w, front in fronts.items():
        click.echo(
            f"{workload_title(w)}: {len(front)} of {len(groups[w])} prefill-decode pairs on the "
            f"front of {', '.join(f'{o.metric} ({o.sense})' for o in objectives)}"
        )
        columns = [fmt_values(m, [p.get(m) for p in front]) for m in metrics]
        body = [
            [
                str(p.get("prefill_design_name") or p.get("prefill_design_id")),
                str(p.get("decode_design_name") or p.get("decode_design_id")),
                str(p.get("prefill_strategy")),
                str(p.get("decode_strategy")),
                *[c[i] for c in columns],
            ]
            for i, p in enumerate(front)
        ]
        click.echo(
            table(
                body, ["prefill design", "decode design", "prefill pool", "decode pool", *metrics]
            )
        )
        click.echo("")


def _check_metrics(
    objectives: tuple[Objective, ...], groups: dict[str, list[dict[str, Any]]], directory: Path
) -> None:
    """Refuse an objective no feasible point of the sweep has a value for (a serving metric
    of a training sweep), naming the metrics it has."""

    def has(metric: str) -> bool:
        return any(
            p.get(metric_for(w, metric)) is not None for w, pts in groups.items() for p in pts
        )

    missing = [o.metric for o in objectives if not has(o.metric)]
    if missing:
        modes = sorted({p.get("mode") or "train" for pts in groups.values() for p in pts})
        raise ConfigError(
            f"no feasible point of {directory} (mode {', '.join(modes)}) has a value of "
            f"{', '.join(missing)}: its metrics are "
            + ", ".join(m for m in NUMERIC_COLUMNS if has(m))
        )


@click.command("export")
@click.argument("directory", type=_DIR, metavar="DIR")
@click.option("--csv", "as_csv", is_flag=True, help="CSV, one row per point.")
@click.option(
    "--json", "as_json", is_flag=True, help='One JSON document {"schema_version": 8, "points"}.'
)
@click.option("--feasible-only", is_flag=True, help="Leave out infeasible and pruned points.")
@click.option(
    "--pairs",
    is_flag=True,
    help="Export the prefill-decode design pairs a paired serving sweep stored instead.",
)
@_out_option("Write to this file instead of stdout.")
def export(
    directory: Path,
    as_csv: bool,
    as_json: bool,
    feasible_only: bool,
    pairs: bool,
    out: Path | None,
) -> None:
    """Export every stored point of the sweep in DIR (all columns, SI units), or with
    --pairs its prefill-decode design pairs (--feasible-only: those meeting the SLO at the
    rate)."""
    if as_csv and as_json:
        raise click.UsageError("give one of --csv and --json, not both")
    if not (as_csv or as_json):
        raise click.UsageError("give --csv or --json")
    if pairs:
        rows = _stored_pairs(directory)
        rows = meeting(rows) if feasible_only else rows
        csv_out, doc, noun = write_pairs_csv, pairs_document, "pairs"
    else:
        with load(directory) as store:
            rows = store.points(feasible_only=feasible_only)
        csv_out, doc, noun = write_csv, json_document, "points"
    if out is not None:
        check_writable(out, "--out")
        try:
            with out.open("w", encoding="utf-8", newline="") as fh:
                if as_csv:
                    csv_out(rows, fh)
                else:
                    fh.write(json.dumps(doc(rows), indent=2, allow_nan=False) + "\n")
        except OSError as e:
            raise cannot_write(out, e, "--out") from None
        click.echo(f"{len(rows)} {noun} written to {out}", err=True)
    elif as_csv:
        csv_out(rows, sys.stdout)
    else:
        echo_json(doc(rows))
