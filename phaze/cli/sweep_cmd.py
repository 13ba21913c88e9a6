"""``phaze sweep``: run (or resume) a sweep, print the best designs and the report's path."""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from phaze.cli import INTERRUPTED, NoFeasiblePoint
from phaze.cli._files import cannot_write, check_parent
from phaze.cli._render import echo_json, table
from phaze.cli._settings import setting_options
from phaze.config import (
    MODE_KEYS,
    MODES,
    SERVE_OBJECTIVES,
    SERVE_OBJECTIVES_AT_RATE,
    SweepConfig,
    load_sweep_config,
    quick_sweep_config,
    quick_sweep_data,
)
from phaze.config_toml import config_sources, config_toml
from phaze.executors import EXECUTORS, check_executor, check_reachable
from phaze.model.scoring import ScoringParams
from phaze.settings import flag_of
from phaze.sweep import SweepResult, run_sweep
from phaze.sweep.planning import plan
from phaze_common.errors import ConfigError
from phaze_common.files import read_toml
from phaze_common.units import fmt_noun
from results.compare import comparison_text
from results.display import fmt_values, layout_label
from results.pairs import FRONT_AXES, cheapest, front
from results.pareto import parse_objectives
from results.schema import AGGREGATE_WORKLOAD, AT_RATE_COLUMNS, SERVE_COLUMNS
from results.store import load
from results.summary import by_workload, top_designs
from workloads.precision import DEFAULT_PRECISION

__all__ = ["sweep"]

logger = logging.getLogger(__name__)

_TOP = 3
#: the settings ``phaze sweep`` offers as options, in the order of its help (each sets the
#: ``[sweep]`` key of the same setting)
_SWEEP_FLAGS = (
    "workloads",
    "space",
    "devices",
    "devices_per_node",
    "seq_len",
    "allow_context_extension",
    "global_batch",
    "micro_batches",
    "hbm_gib",
    "recompute",
    "precision",
    "zero",
    "objectives",
    "prune",
    "framework",
    "tokens_to_train",
    "optimizer_state",
    "mode",
    "input_tokens",
    "output_tokens",
    "ttft_limit_s",
    "tpot_limit_s",
    "batches",
    "weight_formats",
    "rate",
    "requests",
    "seed",
    "p99_ttft_limit_s",
    "p99_tpot_limit_s",
    "pairs",
    "hbm_tbps",
)


def _key_of(name: str) -> str:
    """The ``[sweep]`` key a command parameter sets (its own name if none)."""
    s = flag_of(name)
    return name if s is None else s.key


def _overridden(cfg: SweepConfig, **options) -> SweepConfig:
    """The config with every option the user gave on the command line."""
    given = {k: v for k, v in options.items() if v not in (None, ())}
    for key in ("hbm_gib", "hbm_tbps"):
        if key in given:
            given[key] = tuple(float(x) for x in given[key])
    return cfg.with_settings(**given)


def _check_mode_options(ctx: click.Context, mode: str) -> None:
    """Refuse the options given on the command line for the mode this sweep does not run
    (they would be ignored without a word), naming them and the mode that takes them."""
    (other,) = (m for m in MODES if m != mode)
    given = [
        p.opts[0]
        for p in ctx.command.params
        if p.name is not None
        and _key_of(p.name) in MODE_KEYS[other]
        and ctx.get_parameter_source(p.name) is ParameterSource.COMMANDLINE
    ]
    if given:
        raise ConfigError(
            f"{', '.join(given)} only apply to --mode {other}; this sweep runs --mode {mode} "
            f"(give --mode {other}, or leave them out)"
        )


def _config_text(ctx: click.Context, cfg: SweepConfig, from_file: SweepConfig, config) -> str:
    """``--show-config``: the effective configuration as TOML, each key's source beside it."""
    flags = [
        _key_of(p.name)
        for p in ctx.command.params
        if p.name is not None and ctx.get_parameter_source(p.name) is ParameterSource.COMMANDLINE
    ]
    data = read_toml(config, "sweep config") if config else quick_sweep_data()
    where = str(config) if config else "phaze/data/quick.toml, the built-in quick sweep"
    digest = cfg.config_hash()
    header = (
        "The effective configuration of this `phaze sweep`: give it back as CONFIG.toml to",
        f"run the same sweep (config hash {digest}, default --out phaze-out/sweep-{digest[:8]}).",
        f"Each value's source: default, file ({where}) or flag.",
    )
    return config_toml(cfg, config_sources(cfg, from_file, data, flags), header)


def _banner(cfg: SweepConfig, out: Path) -> str:
    """The plan's line on stderr: workloads, space, cluster, knobs, HBM and the directory."""
    if cfg.mode == "serve":
        limits = ", ".join(
            f"{n} <= {v * 1e3:g} ms"
            for n, v in (("TTFT", cfg.serving.ttft_limit_s), ("TPOT", cfg.serving.tpot_limit_s))
            if v is not None
        )
        knobs = (
            f"serving ISL {cfg.serving.input_tokens} OSL {cfg.serving.output_tokens}, batches "
            f"{list(cfg.serving.batches)}, limits {limits or 'none'}"
        )
        if cfg.serving.weight_formats != ("bf16",):
            knobs += f", weights {list(cfg.serving.weight_formats)}"
        if cfg.serving.rate is not None:
            p99 = ", ".join(
                f"p99 {n} <= {v * 1e3:g} ms"
                for n, v in (
                    ("TTFT", cfg.serving.p99_ttft_limit_s),
                    ("TPOT", cfg.serving.p99_tpot_limit_s),
                )
                if v is not None
            )
            knobs += f", at {cfg.serving.rate:g} requests/s" + (f" ({p99})" if p99 else "")
            knobs += ", prefill-decode pairs" if cfg.serving.pairs else ""
    else:
        knobs = f"micro-batches {list(cfg.training.micro_batches)}, recompute {list(cfg.training.recompute)}"
        if cfg.training.precision != (DEFAULT_PRECISION,):
            knobs += f", precision {list(cfg.training.precision)}"
    return (
        f"sweep: {', '.join(cfg.workloads)} on space {cfg.space!r}, "
        f"{fmt_noun(cfg.devices, 'device')} "
        f"({cfg.devices_per_node}/node); {knobs}, {_hbm_text(cfg)} -> {out}"
    )


def _hbm_text(cfg: SweepConfig) -> str:
    """The HBM sizes of the banner: the space's own, or the given ones (never the presets')."""
    if not cfg.hbm_gib:
        return "HBM per design"
    sizes = ", ".join(f"{g:g}" for g in cfg.hbm_gib)
    kept = " (presets keep their own)" if cfg.presets else ""
    return f"HBM [{sizes}] GiB{kept}"


def _training_objectives(cfg: SweepConfig) -> bool:
    """Are the config's objectives all training metrics (a serving sweep asked of a training
    config, such as the quick one)? A bad name is left for the plan to report."""
    try:
        metrics = {o.metric for o in parse_objectives(cfg.objectives)}
    except ConfigError:
        return False
    return not metrics & set(SERVE_COLUMNS)


def _top_tables(out: Path, cfg: SweepConfig) -> list[str]:
    lines = []
    with load(out) as store:
        points = store.points(feasible_only=True)
    workloads = list(cfg.workloads) + ([AGGREGATE_WORKLOAD] if len(cfg.workloads) > 1 else [])
    objectives = parse_objectives(cfg.objectives)
    serve = cfg.mode == "serve"
    for w in workloads:
        pts = [p for p in points if p["workload"] == w and (not serve or p["meets_slo"])]
        if not pts:
            lines.append(f"\n{w}: no feasible point{' at the latency limits' if serve else ''}")
            continue
        at_rate = [p for p in points if p["workload"] == w and p["feasible_at_rate"]]
        ranked = {o.metric: at_rate for o in objectives if o.metric in AT_RATE_COLUMNS}
        objs = (
            objectives
            if w != AGGREGATE_WORKLOAD
            else parse_objectives(
                ["throughput_score", *(str(o) for o in objectives if o.metric != "tokens_per_s")]
            )
        )
        for o in objs:
            rows = []
            top = top_designs(ranked.get(o.metric, pts), o, objs, _TOP)
            columns = {k: fmt_values(k, [p[k] for p in top]) for k in ("glb_bytes", "hbm_bytes")}
            columns[o.metric] = fmt_values(o.metric, [p[o.metric] for p in top])
            for i, p in enumerate(top):
                shape = f"{p['num_tc']}x{p['tc_rows']}x{p['tc_cols']} TC, {p['num_vc']}x{p['vc_lanes']} VC"
                if w == AGGREGATE_WORKLOAD:
                    knobs = ""
                elif p["mode"] == "serve":
                    knobs = json.loads(p["placement"])["strategy"]
                else:
                    knobs = layout_label(p)
                rows.append(
                    [
                        p["design_name"] or p["design_id"],
                        shape,
                        columns["glb_bytes"][i],
                        columns["hbm_bytes"][i],
                        knobs,
                        columns[o.metric][i],
                    ]
                )
            where = " at the limits" if serve else ""
            where = " meeting the SLO at the rate" if o.metric in AT_RATE_COLUMNS else where
            header = f"\n{w}: best by {o.metric} ({o.sense}){where}"
            if not top:
                lines.append(f"{header}: no point")
                continue
            lines.append(header)
            lines.append(table(rows, ["design", "cores", "buffer", "HBM", "placement", o.metric]))
    return lines


@click.command("sweep")
@click.argument("config", required=False, type=click.Path(path_type=Path))
@setting_options(*_SWEEP_FLAGS)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Output directory [default: phaze-out/sweep-<config hash>].",
)
@click.option("--jobs", type=click.IntRange(min=1), help="Parallel workers [default: all cores].")
@click.option("--executor", type=click.Choice(EXECUTORS), default="local", show_default=True)
@click.option(
    "--address", help="Ray cluster address (with --executor ray); none starts a local Ray."
)
@click.option("--no-report", is_flag=True, help="Do not write the HTML report at the end.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of tables.")
@click.option(
    "--show-config",
    is_flag=True,
    help="Print the effective configuration as TOML, each key's source in a comment, and exit.",
)
def sweep(config, out, jobs, executor, address, no_report, as_json, show_config, **options):
    """Sweep designs x workloads x training knobs; with no arguments, the built-in quick sweep.

    Every point is stored as it completes in OUT/phaze.sqlite; re-running the same command
    resumes an interrupted sweep. Ends with the best designs per objective and an HTML report.
    """
    # options: those that set the sweep's [sweep] keys (_sweep_keys)
    if out is not None:
        check_parent(out, "--out")
    cfg = from_file = load_sweep_config(config) if config else quick_sweep_config()
    _check_mode_options(click.get_current_context(), options["mode"] or cfg.mode)
    cfg = _overridden(cfg, **_sweep_keys(options))
    if cfg.mode == "serve" and not options["objectives"]:
        cfg = _serve_objectives(cfg)
    if show_config:
        click.echo(_config_text(click.get_current_context(), cfg, from_file, config), nl=False)
        return
    planned = plan(cfg)  # every problem of the config at once, before the banner
    if executor == "ray" and address is not None:
        check_reachable(address)  # seconds, where Ray itself retries for minutes
    check_executor(executor, jobs, address)  # before anything is printed
    out = out or Path("phaze-out") / f"sweep-{cfg.config_hash()[:8]}"
    click.echo(_banner(cfg, out), err=True)
    click.echo(_scoring_text(cfg.scoring), err=True)
    try:
        result: SweepResult = run_sweep(
            cfg,
            out,
            executor=executor,
            jobs=jobs,
            address=address,
            progress=not as_json,
            planned=planned,
        )
    except KeyboardInterrupt:
        click.echo(
            f"\ninterrupted: finished points are stored in {out}; re-run the same command to resume",
            err=True,
        )
        sys.exit(INTERRUPTED)
    report_path = None if no_report else _write_report(out)
    if as_json:
        echo_json(_result_doc(result, report_path, cfg))
    else:
        _echo_outcome(result, out, report_path, cfg)
    _exit_if_infeasible(result)


def _serve_objectives(cfg: SweepConfig) -> SweepConfig:
    """A serving sweep's default objectives where none were given on the command line: the
    serving ones for a config left with the training ones, the cost per million tokens at
    the rate first when there is a rate and the config left the serving ones."""
    if _training_objectives(cfg):
        cfg = dataclasses.replace(cfg, objectives=SERVE_OBJECTIVES)
    if cfg.serving.rate is not None and cfg.objectives == SERVE_OBJECTIVES:
        cfg = dataclasses.replace(cfg, objectives=SERVE_OBJECTIVES_AT_RATE)
    return cfg


def _sweep_keys(options: dict[str, Any]) -> dict[str, Any]:
    """The ``[sweep]`` keys the command line's sweep options give, in the keys' names and
    units (:meth:`~phaze.settings.Setting.from_flag`: ``--no-prune`` sets ``prune``, the
    millisecond limits the ``_s`` ones, ``--tokens`` a count); an option not given is None,
    for :func:`_overridden` to leave out."""
    return {_key_of(name): flag_of(name).from_flag(value) for name, value in options.items()}


def _scoring_text(scoring: ScoringParams) -> str:
    """The scoring settings' line on stderr. The host server's terms left open are chosen
    for each accelerator (:meth:`~phaze.model.scoring.ScoringParams.for_accelerator`: a preset's
    own server, else a DGX A100) and say so, not None."""
    return "scoring defaults: " + ", ".join(
        f"{k}={'per accelerator' if v is None and k.startswith('host_') else v}"
        for k, v in scoring.as_dict().items()
    )


def _write_report(out: Path) -> Path:
    """Write the sweep's HTML report; a failure to write is one error naming ``--out``."""
    from results.report import write_report

    try:
        return write_report(out)
    except OSError as e:
        raise cannot_write(Path(e.filename or out), e, "--out") from None


def _echo_outcome(
    result: SweepResult, out: Path, report_path: Path | None, cfg: SweepConfig
) -> None:
    """Print a finished sweep for a person: its counts and time, the comparison of the
    designs (training), the best designs per objective and the report's path."""
    click.echo(
        f"{result.points} points ({result.feasible} feasible): {result.evaluated_designs} designs "
        f"evaluated, {result.pruned_designs} pruned by bounds, {result.skipped_designs} already "
        f"stored; {result.wall_s:.1f} s"
    )
    if cfg.mode != "serve":  # the report compares serving designs at the latency limits
        click.echo(comparison_text(out))
    for line in _top_tables(out, cfg):
        click.echo(line)
    if cfg.serving.pairs:
        click.echo(_pairs_text(out))
    if report_path is not None:
        click.echo(f"\nreport: {report_path}")


def _pairs_text(out: Path) -> str:
    """Per workload, the cheapest prefill-decode pair meeting the SLO at the rate beside
    the cheapest single design there, and the size of the pairs' front."""
    with load(out) as store:
        pairs, points = store.pairs(), store.points(feasible_only=True)
    lines = []
    metric = FRONT_AXES[0]
    for w, w_pairs in by_workload(pairs).items():
        pair = cheapest(w_pairs)
        single = cheapest([p for p in points if p["workload"] == w])
        head = f"\n{w}: {len(w_pairs)} prefill-decode pairs, {len(front(w_pairs))} on the front"
        if pair is None:
            lines.append(f"{head}; none meets the SLO at the rate")
            continue
        usd = fmt_values(metric, [pair[metric], single[metric] if single else None])
        lines.append(
            f"{head}; the cheapest meeting the SLO at the rate: prefill on "
            f"{pair['prefill_design_name'] or pair['prefill_design_id']} "
            f"({pair['prefill_strategy']}), decode on "
            f"{pair['decode_design_name'] or pair['decode_design_id']} "
            f"({pair['decode_strategy']}), {usd[0]} per million output tokens "
            f"(the cheapest single design: {usd[1]})"
        )
    return "\n".join(lines)


def _result_doc(result: SweepResult, report_path: Path | None, cfg: SweepConfig) -> dict:
    """The ``--json`` document of a finished sweep."""
    return {
        "out_dir": str(result.out_dir),
        "points": result.points,
        "feasible": result.feasible,
        "evaluated_designs": result.evaluated_designs,
        "pruned_designs": result.pruned_designs,
        "skipped_designs": result.skipped_designs,
        "wall_s": result.wall_s,
        "report": None if report_path is None else str(report_path),
        "defaults": cfg.scoring.as_dict(),
    }


def _exit_if_infeasible(result: SweepResult) -> None:
    """Exit status 3 when no point of the sweep is feasible (after its store is written)."""
    if not result.feasible:
        raise NoFeasiblePoint(
            f"no feasible point among {result.points} points; every point and its reason is stored "
            f"in {result.out_dir} (see `phaze export {result.out_dir} --csv`)"
        )
