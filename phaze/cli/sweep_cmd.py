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
from phaze.cli._options import (
    FiniteFloat,
    RecomputeMode,
    context_extension_option,
    optimizer_state_option,
)
from phaze.cli._render import echo_json, table
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
from phaze.model.run import parse_tokens
from phaze.model.scoring import ScoringParams
from phaze.sweep import SweepResult, run_sweep
from phaze.sweep.planning import plan
from phaze_common.errors import ConfigError
from phaze_common.files import read_toml
from phaze_common.limits import MAX_DEVICES, MAX_GLOBAL_BATCH, MAX_SEQ_LEN
from phaze_common.units import fmt_noun
from results.compare import comparison_text
from results.display import fmt_values, layout_label
from results.pairs import FRONT_AXES, cheapest, front
from results.pareto import parse_objectives
from results.schema import AGGREGATE_WORKLOAD, AT_RATE_COLUMNS, SERVE_COLUMNS
from results.store import load
from results.summary import by_workload, top_designs
from workloads.framework import DEFAULT_FRAMEWORK, framework_names
from workloads.precision import DEFAULT_PRECISION, recipe_names
from workloads.serving import serving_settings

__all__ = ["sweep"]

logger = logging.getLogger(__name__)

_TOP = 3
# the [sweep] key each option sets, where the names differ (phaze.config.MODE_KEYS)
_KEY_OF = {
    "ttft_ms": "ttft_limit_s",
    "tpot_ms": "tpot_limit_s",
    "p99_ttft_ms": "p99_ttft_limit_s",
    "p99_tpot_ms": "p99_tpot_limit_s",
    "no_prune": "prune",
}


def _overridden(cfg: SweepConfig, **options) -> SweepConfig:
    """The config with every option the user gave on the command line."""
    given = {k: v for k, v in options.items() if v not in (None, ())}
    for key in ("hbm_gib", "hbm_tbps"):
        if key in given:
            given[key] = tuple(float(x) for x in given[key])
    return dataclasses.replace(cfg, **given)


def _check_mode_options(ctx: click.Context, mode: str) -> None:
    """Refuse the options given on the command line for the mode this sweep does not run
    (they would be ignored without a word), naming them and the mode that takes them."""
    (other,) = (m for m in MODES if m != mode)
    given = [
        p.opts[0]
        for p in ctx.command.params
        if p.name is not None
        and _KEY_OF.get(p.name, p.name) in MODE_KEYS[other]
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
        _KEY_OF.get(p.name, p.name)
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
            for n, v in (("TTFT", cfg.ttft_limit_s), ("TPOT", cfg.tpot_limit_s))
            if v is not None
        )
        knobs = (
            f"serving ISL {cfg.input_tokens} OSL {cfg.output_tokens}, batches "
            f"{list(cfg.batches)}, limits {limits or 'none'}"
        )
        if cfg.weight_formats != ("bf16",):
            knobs += f", weights {list(cfg.weight_formats)}"
        if cfg.rate is not None:
            p99 = ", ".join(
                f"p99 {n} <= {v * 1e3:g} ms"
                for n, v in (("TTFT", cfg.p99_ttft_limit_s), ("TPOT", cfg.p99_tpot_limit_s))
                if v is not None
            )
            knobs += f", at {cfg.rate:g} requests/s" + (f" ({p99})" if p99 else "")
            knobs += ", prefill-decode pairs" if cfg.pairs else ""
    else:
        knobs = f"micro-batches {list(cfg.micro_batches)}, recompute {list(cfg.recompute)}"
        if cfg.precision != (DEFAULT_PRECISION,):
            knobs += f", precision {list(cfg.precision)}"
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
@click.option(
    "--workload", "workloads", multiple=True, help="Workload name or config.json (repeatable)."
)
@click.option(
    "--space", help="Design space: a shipped name (tiny, default, reticle) or a TOML file."
)
@click.option("--devices", type=click.IntRange(1, MAX_DEVICES), help="Accelerators in the cluster.")
@click.option(
    "--devices-per-node", type=click.IntRange(1, MAX_DEVICES), help="Accelerators per node."
)
@click.option("--seq-len", type=click.IntRange(1, MAX_SEQ_LEN), help="Tokens per sequence.")
@context_extension_option
@click.option(
    "--global-batch", type=click.IntRange(1, MAX_GLOBAL_BATCH), help="Sequences per iteration."
)
@click.option(
    "--micro-batch",
    "micro_batches",
    type=click.IntRange(1, MAX_GLOBAL_BATCH),
    multiple=True,
    help="Micro-batch size (repeatable).",
)
@click.option(
    "--hbm-gib",
    "hbm_gib",
    type=FiniteFloat(0, 1e6, lo_open=True),
    multiple=True,
    help="HBM per device in GiB for the space's designs (repeatable); presets keep their own.",
)
@click.option(
    "--recompute",
    type=RecomputeMode(),
    multiple=True,
    help="Recompute mode (repeatable): none, selective, full or modules:<groups joined by +>.",
)
@click.option(
    "--precision",
    type=click.Choice(recipe_names()),
    multiple=True,
    help="Precision recipe (repeatable): each design runs those its tensor cores have the "
    "format for.",
)
@click.option(
    "--zero",
    type=click.IntRange(0, 3),
    multiple=True,
    help="ZeRO stage the search may choose (repeatable) [default: 0, 1; 2, 3 when neither fits].",
)
@click.option(
    "--objective", "objectives", multiple=True, help="Metric to rank by, +max or -min (repeatable)."
)
@click.option("--no-prune", is_flag=True, help="Evaluate every design (no bound-based pruning).")
@click.option(
    "--framework",
    type=click.Choice(framework_names()),
    help=f"Overlap profile of the training framework [default: {DEFAULT_FRAMEWORK}].",
)
@click.option(
    "--tokens",
    "tokens_to_train",
    help="Tokens to train every workload: 2e12, 2T, 300B [default: each model's published budget].",
)
@optimizer_state_option
@click.option(
    "--mode",
    type=click.Choice(MODES),
    help="train (the training knobs) or serve (inference serving) [default: train].",
)
@click.option(
    "--input-tokens", type=click.IntRange(1, MAX_SEQ_LEN), help="Serving: prompt tokens (ISL)."
)
@click.option(
    "--output-tokens", type=click.IntRange(2, MAX_SEQ_LEN), help="Serving: tokens generated (OSL)."
)
@click.option("--ttft-ms", type=FiniteFloat(0, 1e9, lo_open=True), help="Serving: mean TTFT limit.")
@click.option("--tpot-ms", type=FiniteFloat(0, 1e9, lo_open=True), help="Serving: mean TPOT limit.")
@click.option(
    "--batch",
    "batches",
    type=click.IntRange(1, MAX_GLOBAL_BATCH),
    multiple=True,
    help="Serving: sequences in flight per replica (repeatable) [default: 1, 4, 16, 64, 256].",
)
@click.option(
    "--weight-format",
    "weight_formats",
    type=click.Choice(tuple(serving_settings().weight_recipes)),
    multiple=True,
    help="Serving: the blocks' weight format (repeatable): each design serves at those its "
    "tensor cores run [default: bf16].",
)
@click.option(
    "--rate",
    type=FiniteFloat(0, 1e9, lo_open=True),
    help="Serving: requests per second arriving (Poisson); every point's layout is also "
    "simulated under it (p99 latencies, SLO attainment, cost per token at the rate).",
)
@click.option(
    "--requests",
    type=click.IntRange(2, 1_000_000),
    help="Serving: requests simulated at --rate [default: 2000].",
)
@click.option(
    "--seed",
    type=click.IntRange(0, 2**63 - 1),
    help="Serving: seed of the arrivals at --rate [default: 0].",
)
@click.option(
    "--p99-ttft-ms",
    type=FiniteFloat(0, 1e9, lo_open=True),
    help="Serving: p99 TTFT limit at --rate, ms: a point meets the SLO there when 99 % of "
    "its requests are within the p99 limits (as serve --capacity) [default: the mean limits].",
)
@click.option(
    "--p99-tpot-ms",
    type=FiniteFloat(0, 1e9, lo_open=True),
    help="Serving: p99 TPOT limit at --rate, ms (as --p99-ttft-ms).",
)
@click.option(
    "--pairs",
    is_flag=True,
    help="Serving: also pair every design's prefill pool with every design's decode pool "
    "(Splitwise), simulated at --rate, and report the pairs' front.",
)
@click.option(
    "--hbm-tbps",
    "hbm_tbps",
    type=FiniteFloat(0, 1e6, lo_open=True),
    multiple=True,
    help="HBM bandwidth in TB/s for the space's designs (repeatable); presets keep their own.",
)
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
    if cfg.rate is not None and cfg.objectives == SERVE_OBJECTIVES:
        cfg = dataclasses.replace(cfg, objectives=SERVE_OBJECTIVES_AT_RATE)
    return cfg


def _sweep_keys(options: dict[str, Any]) -> dict[str, Any]:
    """The ``[sweep]`` keys the command line's sweep options give, in the keys' names and
    units (``--no-prune`` sets ``prune``, the millisecond limits the ``_s`` ones, ``--tokens``
    a count); an option not given is None or empty, for :func:`_overridden` to leave out."""
    keys = dict(options)
    tokens, ttft_ms, tpot_ms, no_prune, p99_ttft_ms, p99_tpot_ms = (
        keys.pop(k)
        for k in ("tokens_to_train", "ttft_ms", "tpot_ms", "no_prune", "p99_ttft_ms", "p99_tpot_ms")
    )
    return {
        **keys,
        "pairs": True if keys["pairs"] else None,
        "p99_ttft_limit_s": None if p99_ttft_ms is None else p99_ttft_ms / 1e3,
        "p99_tpot_limit_s": None if p99_tpot_ms is None else p99_tpot_ms / 1e3,
        "allow_context_extension": keys["allow_context_extension"] or None,
        "prune": False if no_prune else None,
        "tokens_to_train": None if tokens is None else parse_tokens(tokens),
        "ttft_limit_s": None if ttft_ms is None else ttft_ms / 1e3,
        "tpot_limit_s": None if tpot_ms is None else tpot_ms / 1e3,
    }


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
    if cfg.pairs:
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
