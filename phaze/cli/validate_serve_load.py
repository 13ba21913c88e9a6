"""``phaze validate serve``'s section "under load": published TTFT, TPOT and end-to-end
percentiles at a request rate against the simulation of ``phaze serve --rate``
(docs/serving.md, "Under load")."""

from __future__ import annotations

import click

from phaze.cli._render import table
from phaze.cli.validate_cmd import mean_max_text, pct_text
from phaze.validation.serving_load import evaluate_points, load_points, summarize
from phaze_common.units import fmt_time

__all__ = ["load_section", "print_load_section"]


def load_section(show_progress: bool) -> dict:
    """The section's JSON document: every point's record and the summary."""
    points = load_points()
    runs = list(dict.fromkeys(p.run for p in points))

    def progress(i: int, run) -> None:
        if show_progress:
            click.echo(f"[under load {i + 1}/{len(runs)}] {run.case}", err=True)

    results = evaluate_points(points, progress)
    return {"rows": [r.record() for r in results], "summary": summarize(results)}


def print_load_section(doc: dict) -> None:
    """The section as a table of points, the p50 and p99 summary and the sources."""
    rows, summary = doc["rows"], doc["summary"]
    sources = list(dict.fromkeys(r["source"] for r in rows))
    click.echo("")
    click.echo(
        f"Published latency under load (phaze/data/serving_load_points.toml): {len(rows)} "
        f"points, {summary['held_out']['evaluated']} evaluated, all held out"
    )
    body = [
        [
            r["case"],
            f"{r['rate_per_s']:.4g}/s",
            f"{r['metric'].upper()} p{r['percentile']}",
            fmt_time(r["measured_s"]),
            "-" if r["predicted_s"] is None else fmt_time(r["predicted_s"]),
            pct_text(r["error_pct"]),
            f"[{sources.index(r['source']) + 1}]",
        ]
        for r in rows
    ]
    head = ["run", "rate", "latency", "published", "simulated", "error %", "source"]
    click.echo(table(body, head))
    click.echo("")
    targets = summary["target_mean_abs_error_pct"]
    groups = [
        ["p50", str(summary["p50"]["evaluated"]), *mean_max_text(summary["p50"])],
        ["p99", str(summary["p99"]["evaluated"]), *mean_max_text(summary["p99"])],
        *[
            [f"{m.upper()}", str(g["evaluated"]), *mean_max_text(g)]
            for m, g in summary["by_metric"].items()
        ],
        *[
            [f"source {k}", str(g["evaluated"]), *mean_max_text(g)]
            for k, g in summary["by_source"].items()
        ],
    ]
    click.echo(table(groups, ["group", "points", "mean |error| %", "max |error| %"]))
    verdict = "met" if summary["within_target"] else "missed"
    click.echo(
        f"target: held-out mean |error| <= {targets['p50']:g}% at p50 and <= {targets['p99']:g}% "
        f"at p99 ({verdict}; reported, not part of the exit status)"
    )
    for r in rows:
        if r["predicted_s"] is None:
            click.echo(f"{r['case']} {r['metric']} p{r['percentile']}: {r['reason']}")
    for i, s in enumerate(sources, 1):
        click.echo(f"[{i}] {s}")
