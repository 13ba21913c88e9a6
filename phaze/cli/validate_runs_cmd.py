"""``phaze validate runs``: the time model against the registry of published training runs.

Every run of ``phaze/data/published_runs.toml`` (or ``--registry FILE``) is predicted at its
published layout and compared in its publication's metric (:mod:`phaze.validation.runs`);
the table shows each row's error, then the mean and largest |error| of the fitted and the
held-out rows, by GPU, by framework, by precision recipe and by model kind (dense or
MoE). Exit status 3 when a target is missed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from phaze.cli import NoFeasiblePoint
from phaze.cli._render import echo_json, table
from phaze.cli.validate_cmd import mean_max_text, pct_text, tolerance_option
from phaze.validation.published_runs import METRICS, PublishedRun, Registry, load_registry
from phaze.validation.runs import (
    RunResult,
    Targets,
    evaluate_runs,
    fit_preset,
    outside_targets,
    summarize,
)
from phaze_common.errors import ConfigError
from phaze_common.units import fmt_quantity

__all__ = ["runs"]


def _select(registry_runs: tuple[PublishedRun, ...], ids: tuple[str, ...]) -> list[PublishedRun]:
    """The runs named by ``ids`` (all when none), in registry order."""
    if not ids:
        return list(registry_runs)
    known = {r.id for r in registry_runs}
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise ConfigError(
            f"--run {', '.join(unknown)}: not in the registry (ids: {', '.join(sorted(known))})"
        )
    return [r for r in registry_runs if r.id in ids]


def _fmt(value: float | None, unit: str) -> str:
    return "infeasible" if value is None else fmt_quantity(value, unit, digits=4)


def _row(r: RunResult, sources: list[str]) -> list[str]:
    run = r.run
    unit = METRICS[run.metric]
    profile = run.framework if not r.profile_note else f"{run.framework} ({r.profile_used})"
    return [
        run.id,
        run.arch,
        str(run.gpus),
        profile,
        _fmt(run.measured, unit),
        _fmt(r.predicted, unit),
        pct_text(r.error_pct),
        pct_text(r.time_error_pct),
        "fit" if run.fitted else "held out",
        f"[{sources.index(run.citation) + 1}]",
    ]


def _summary_rows(summary: dict) -> list[list[str]]:
    def line(name: str, g: dict) -> list[str]:
        return [
            name,
            str(g["runs"]),
            *mean_max_text(g),
            pct_text(g["mean_time_error_pct"]),
            str(g["infeasible"]),
        ]

    rows = [line("fitted", summary["fitted"]), line("held out", summary["held_out"])]
    for by, name in (
        ("by_gpu", "gpu"),
        ("by_framework", "framework"),
        ("by_precision", "precision"),
        ("by_model", "model"),
    ):
        for k, groups in summary[by].items():
            rows += [
                line(f"{name} {k}, {part.replace('_', ' ')}", g)
                for part, g in groups.items()
                if g["runs"]
            ]
    return rows


def _print(results: list[RunResult], summary: dict, targets: Targets, path: str) -> None:
    sources = list(dict.fromkeys(r.run.citation for r in results))
    n_fit = sum(r.run.fitted for r in results)
    click.echo(
        f"Published training runs ({path}): {len(results)} runs, {n_fit} fitted, "
        f"{len(results) - n_fit} held out"
    )
    head = ["run", "gpu", "gpus", "framework (profile used)", "published", "predicted"]
    head += ["error %", "time error %", "", "source"]
    click.echo(table([_row(r, sources) for r in results], head))
    click.echo("")
    click.echo(
        "error %: of the published metric; time error %: of the iteration time it implies "
        "(+ = the model is slower than the run)"
    )
    click.echo(
        table(
            _summary_rows(summary),
            ["group", "runs", "mean |error| %", "max |error| %", "mean time error %", "infeasible"],
        )
    )
    click.echo(
        f"targets: held-out mean |error| <= {targets.held_out_mean_pct:g}%, max <= "
        f"{targets.held_out_max_pct:g}%; every fitted run <= {targets.fitted_max_pct:g}%; each "
        f"GPU's, framework's and the MoE rows' held-out mean <= {targets.group_mean_pct:g}%"
    )
    notes = {r.run.framework: (r.profile_used, r.profile_note) for r in results if r.profile_note}
    for fw, (profile, why) in notes.items():
        click.echo(f"{fw}: evaluated with profile {profile} ({why})")
    for r in results:
        if r.predicted_iteration_s is None:
            click.echo(f"{r.run.id}: infeasible in the model: {r.reason}")
    for i, s in enumerate(sources, 1):
        click.echo(f"[{i}] {s}")


def _fit(registry: Registry, arch: str, as_json: bool) -> None:
    """Fit ``arch``'s parameters to its fitted runs and print the data and the values."""
    fit, rows = fit_preset(registry, arch)
    values = {k: round(v, 3) for k, v in fit.values.items()}
    if as_json:
        echo_json(
            {
                "arch": arch,
                "values": values,
                "rms_error_pct": fit.rms_error_pct,
                "rows": [
                    {
                        "id": r.case,
                        "measured": r.measured,
                        "predicted": r.predicted,
                        "error_pct": r.error_pct,
                    }
                    for r in rows
                ],
                "provenance": fit.device.provenance,
            }
        )
        return
    click.echo(f"Fit of {arch} on {len(rows)} runs marked fitted ({registry.path}):")
    cells = [
        [r.case, f"{r.measured:.4g}", f"{r.predicted:.4g}", f"{r.error_pct:+.1f}"] for r in rows
    ]
    click.echo(table(cells, ["run", "published", "predicted", "error %"]))
    click.echo(f"RMS error {fit.rms_error_pct:.2f}%; for arch_space/data/chips/{arch}.toml:")
    click.echo("[devices.fitted]")
    for k, v in values.items():
        click.echo(f"{k} = {v}")
    click.echo(f'provenance = "{fit.device.provenance}"')


_TARGETS = Targets()


@click.command("runs")
@click.option(
    "--registry",
    "registry_path",
    type=click.Path(path_type=Path),
    help="A registry TOML file [default: the shipped phaze/data/published_runs.toml].",
)
@click.option("--run", "run_ids", multiple=True, help="Only this run id (repeatable).")
@tolerance_option("--held-out-mean-pct", _TARGETS.held_out_mean_pct, "the held-out runs' mean")
@tolerance_option("--held-out-max-pct", _TARGETS.held_out_max_pct, "any held-out run")
@tolerance_option("--fitted-max-pct", _TARGETS.fitted_max_pct, "any fitted run")
@tolerance_option(
    "--group-mean-pct",
    _TARGETS.group_mean_pct,
    "the held-out mean of each GPU, each framework and the MoE rows",
)
@click.option(
    "--fit",
    "fit_arch",
    metavar="PRESET",
    help="Fit PRESET's unmeasured parameters to its runs marked fitted and print them (the "
    "data, the values and the chip file's lines) instead of the validation.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def runs(
    registry_path: Path | None,
    run_ids: tuple[str, ...],
    held_out_mean_pct: float,
    held_out_max_pct: float,
    fitted_max_pct: float,
    group_mean_pct: float,
    fit_arch: str | None,
    as_json: bool,
) -> None:
    """Published training runs (V100, A100, H100, H800, TPU v5p; Megatron-LM, Megatron-Core,
    DeepSpeed, FSDP, DeepSeek's HAI-LLM, MaxText) against the model's predictions at their published
    layouts, by GPU, framework, precision recipe and model kind (dense or MoE).

    Rows a fitted parameter came from are marked fit; the others are held out. A stack with
    no framework profile of its own is evaluated with the closest one (named per row).
    Exits 3 when the held-out mean or largest |error|, or a fitted row's, misses its target.
    """
    registry = load_registry(registry_path)
    if fit_arch is not None:
        _fit(registry, fit_arch, as_json)
        return
    selected = _select(registry.runs, run_ids)
    targets = Targets(held_out_mean_pct, held_out_max_pct, fitted_max_pct, group_mean_pct)
    show = sys.stderr.isatty()

    def progress(i: int, run: PublishedRun) -> None:
        if show:
            click.echo(f"[{i + 1}/{len(selected)}] {run.id}", err=True)

    results = evaluate_runs(selected, registry, progress)
    summary = summarize(results)
    misses = outside_targets(summary, targets)
    if as_json:
        echo_json(
            {
                "registry": registry.path,
                "targets": {
                    "held_out_mean_abs_error_pct": targets.held_out_mean_pct,
                    "held_out_max_abs_error_pct": targets.held_out_max_pct,
                    "fitted_max_abs_error_pct": targets.fitted_max_pct,
                    "group_held_out_mean_abs_error_pct": targets.group_mean_pct,
                },
                "rows": [r.record() for r in results],
                "summary": summary,
                "within_targets": not misses,
                "missed": misses,
            }
        )
    else:
        _print(results, summary, targets, registry.path)
    if misses:
        raise NoFeasiblePoint("outside the targets: " + "; ".join(misses))
