"""``phaze evaluate``: one design on one workload, with a searched or a fixed placement."""

from __future__ import annotations

import dataclasses
import json

import click

from arch_space import load_accelerator
from arch_space.power import headroom
from arch_space.tco import COST_VIEWS
from phaze.api import evaluate as api_evaluate
from phaze.cli import NoFeasiblePoint
from phaze.cli._options import (
    DEFAULT_SEQ_LEN,
    cluster_of,
    default_seq_len,
    design_options,
    scoring_of,
    scoring_options,
)
from phaze.cli._render import echo_json, table
from phaze.config import RECOMPUTE_MODES
from phaze.executors.progress import ticking
from phaze.run import RunAnswers, parse_tokens, run_answers
from phaze.scoring import Score, ScoringParams
from phaze.sweep import placement_summary, schedule_exactness
from phaze_common.limits import MAX_GLOBAL_BATCH, MAX_SEQ_LEN
from phaze_common.units import fmt_column, fmt_pair, fmt_percent, fmt_quantity, fmt_time
from placement import Placement, parse_strategy
from results.display import area_headroom_text, power_headroom_text
from workloads import model_flops_per_sequence, resolve_model
from workloads.framework import (
    DEFAULT_FRAMEWORK,
    framework_names,
    framework_profile,
    search_exclusions,
)
from workloads.precision import recipe, recipe_names

__all__ = ["evaluate"]

_J_PER_KWH = 3.6e6


@click.command("evaluate")
@design_options("Accelerators in the cluster.")
@click.option(
    "--global-batch",
    type=click.IntRange(1, MAX_GLOBAL_BATCH),
    required=True,
    help="Sequences per iteration.",
)
@click.option(
    "--seq-len",
    type=click.IntRange(1, MAX_SEQ_LEN),
    help="Tokens per sequence [default: 2048, or the model's context if shorter].",
)
@click.option(
    "--micro-batch",
    type=click.IntRange(1, MAX_GLOBAL_BATCH),
    help="With --strategy search [default: searched, 1, 2, 4 or 8 dividing the batch].",
)
@click.option(
    "--recompute",
    type=click.Choice(RECOMPUTE_MODES),
    help="With --strategy search [default: searched, none, selective or full].",
)
@click.option(
    "--precision",
    type=click.Choice(recipe_names()),
    help="Precision recipe: the blocks' GEMM format and the training state "
    "[default: bf16, or the strategy's precision=].",
)
@click.option(
    "--sp/--no-sp",
    "sequence_parallel",
    default=None,
    help="Sequence parallelism [default: searched, on or off at each width t > 1].",
)
@click.option(
    "--tokens",
    "tokens_to_train",
    help="Tokens to train: 2e12, 2T, 300B (default: the model's published budget, else one "
    "iteration).",
)
@scoring_options(training=True)
@click.option(
    "--strategy",
    default="search",
    show_default=True,
    help="'search', or fixed: t=8,p=8,d=1,mbs=1,v=3,recompute=full,sp=on,zero=1,ep=1,cp=1 "
    "(keys left out are searched)",
)
@click.option(
    "--state-bytes",
    type=click.IntRange(min=1),
    help="Weights + gradients + optimizer state per parameter, at least 16 (2 B weights, "
    "2 B gradients, Adam's 12 B) [default 18: Adam, mixed precision, fp32 gradients; 20: "
    "DeepSpeed's BF16 optimizer].",
)
@click.option(
    "--framework",
    default=DEFAULT_FRAMEWORK,
    show_default=True,
    help=f"Overlap profile of the training framework ({', '.join(framework_names())}).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def evaluate(
    workload,
    arch,
    global_batch,
    seq_len,
    micro_batch,
    recompute,
    precision,
    sequence_parallel,
    tokens_to_train,
    strategy,
    framework,
    state_bytes,
    as_json,
    **kw,
):
    """Iteration time, throughput, MFU and memory of one design, and its placement."""
    acc = load_accelerator(arch)
    cluster = cluster_of(kw)
    devices = cluster.devices
    model = resolve_model(workload)
    if seq_len is None:
        seq_len = default_seq_len(model)
        if seq_len < DEFAULT_SEQ_LEN:
            click.echo(
                f"note: seq_len {seq_len}, the model's context (--seq-len to choose)", err=True
            )
    scoring = scoring_of(kw, acc)
    if tokens_to_train is not None:
        tokens, source = parse_tokens(tokens_to_train), "--tokens"
    elif model.tokens_to_train:
        tokens, source = model.tokens_to_train, "the model's published budget"
    else:
        tokens, source = global_batch * seq_len, "one iteration (no published budget; --tokens N)"
    layout = None
    if strategy != "search":  # the options fill what it leaves open; a clash names both
        sp_flag = "--sp" if sequence_parallel else "--no-sp"
        layout = parse_strategy(
            strategy,
            {
                "mbs": ("--micro-batch", micro_batch),
                "recompute": ("--recompute", recompute),
                "sp": (sp_flag, sequence_parallel),
                "precision": ("--precision", precision),
            },
        )
    ev = ticking("phaze evaluate")(api_evaluate)(
        workload,
        acc,
        cluster,
        seq_len=seq_len,
        global_batch=global_batch,
        micro_batch=micro_batch,
        recompute=recompute,
        sequence_parallel=sequence_parallel,
        strategy=layout,
        tokens_to_train=tokens,
        scoring=scoring,
        framework=framework,
        state_bytes_per_parameter=state_bytes,
        precision=precision if layout is None else None,
    )
    if not ev.feasible:
        raise NoFeasiblePoint(f"infeasible: {ev.reason}")
    pl, sc = ev.placement, ev.score
    run = run_answers(
        sc,
        acc=acc,
        cluster=cluster,
        tokens_to_train=float(tokens),
        tokens_source=source,
        params=scoring,
    )
    tflops = (
        global_batch
        * model_flops_per_sequence(model, seq_len)
        / pl.breakdown.iteration_s
        / devices
        / 1e12
    )
    doc = {
        "workload": workload,
        "arch": acc.name or arch,
        "devices": devices,
        "framework": framework,
        "seq_len": seq_len,
        "precision": _precision_doc(ev, state_bytes),
        "iteration_s": pl.breakdown.iteration_s,
        "samples_per_s": sc.samples_per_s,
        "tokens_per_s": sc.tokens_per_s,
        "tflops_per_device": tflops,
        "mfu": sc.mfu,
        "memory_per_device_bytes": pl.memory_breakdown.total_bytes,
        "hbm_bytes": acc.hbm_bytes,
        "bubble_fraction": pl.bubble_fraction,
        "communication_s": pl.breakdown.communication_s,
        "breakdown": {**pl.breakdown.terms(), "iteration_s": pl.breakdown.iteration_s},
        "dp_comm": {
            "unoverlapped_s": pl.dp_comm_unoverlapped_s,
            "overlapped_s": pl.dp_comm_overlapped_s,
            "exposed_s": pl.breakdown.dp_comm_exposed_s,
        },
        "memory_breakdown": {
            **dataclasses.asdict(pl.memory_breakdown),
            "total_bytes": pl.memory_breakdown.total_bytes,
        },
        "energy_breakdown": {
            **energy_terms(sc),
            "it_j": sc.energy_per_batch_j,
            "facility_overhead_j": sc.energy_per_batch_j * (scoring.pue - 1.0),
        },
        **dataclasses.asdict(run),
        "placement": json.loads(placement_summary(pl)),
        "strategy_defaults": ev.defaults,
        "search_exclusions": _exclusions(framework) if layout is None or ev.defaults else [],
        "headroom": headroom(acc).figures(),
    }
    if as_json:
        echo_json(doc)
        return
    # The bubble as its share of the iteration (pl.bubble_fraction is SC21's bubble / ideal
    # ratio, which passes 100 % when there are fewer micro-batches than stages).
    bubble_s = pl.breakdown.bubble_s
    bubble_share = bubble_s / pl.breakdown.iteration_s if pl.breakdown.iteration_s > 0 else 0.0
    gap, methods = schedule_exactness(ev.pass_timings)
    rows = [
        ["iteration time", fmt_time(pl.breakdown.iteration_s)],
        [
            "throughput",
            f"{fmt_quantity(sc.samples_per_s, 'samples/s')}, "
            f"{fmt_quantity(sc.tokens_per_s, 'tokens/s')}",
        ],
        ["model FLOP/s per device", fmt_quantity(tflops * 1e12, "FLOP/s")],
        ["MFU", fmt_percent(sc.mfu)],
        [
            "memory per device",
            "{} of {}".format(*fmt_pair(pl.memory_breakdown.total_bytes, acc.hbm_bytes, "B")),
        ],
        ["pipeline bubble", f"{fmt_time(bubble_s)} ({fmt_percent(bubble_share)} of the iteration)"],
        ["exposed communication", fmt_time(pl.breakdown.communication_s)],
        [
            "data-parallel collectives",
            f"{fmt_time(pl.dp_comm_unoverlapped_s)} end to end, "
            f"{fmt_time(pl.dp_comm_overlapped_s)} of it beside compute",
        ],
        ["layer schedules", f"worst gap {fmt_percent(gap)} ({methods})"],
        ["area headroom", area_headroom_text(doc["headroom"])],
        ["power headroom", power_headroom_text(doc["headroom"])],
        ["precision", _precision_text(doc["precision"])],
        ["placement", str(pl.layout)],
    ]
    click.echo(table(rows, ["metric", f"{workload} on {acc.name or arch}, {devices} devices"]))
    if ev.defaults:
        click.echo(f"strategy defaults used (not given): {ev.defaults}")
    if doc["search_exclusions"]:
        rules = "; ".join(f"{x['rule']} ({x['reason']})" for x in doc["search_exclusions"])
        click.echo(f"layouts the search skipped, by {framework}'s rules: {rules}")
    click.echo("")
    click.echo(_breakdown_table(pl))
    loads = fmt_column([s.load_s for s in pl.stages], "s")
    memories = fmt_column([s.memory_bytes for s in pl.stages], "B")
    stage_rows = [
        [i, f"{min(s.layers)}-{max(s.layers)}", s.devices, loads[i], memories[i]]
        for i, s in enumerate(pl.stages)
    ]
    click.echo("")
    click.echo(table(stage_rows, ["stage", "layers", "devices", "load per micro-batch", "memory"]))
    click.echo("")
    click.echo(_run_table(sc, run, scoring))
    click.echo("")
    click.echo(_cost_table(run))


def _exclusions(framework: str) -> list[dict[str, str]]:
    """The rules by which a search under ``framework`` skipped layouts the stack cannot run
    (:func:`workloads.framework.search_exclusions`): each rule's name and why."""
    out = []
    for text in search_exclusions(framework_profile(framework)):
        rule, _, reason = text.partition(": ")
        out.append({"rule": rule, "reason": reason})
    return out


def _precision_doc(ev, state_bytes: int | None) -> dict[str, object]:
    """The point's precision recipe: its GEMM format and rate on the accelerator, the
    training state per parameter it ran with (``--state-bytes`` where given, else the
    recipe's) and its stashed Linear inputs' bytes."""
    r = recipe(ev.knobs.precision)
    return {
        "recipe": r.name,
        "gemm_format": r.gemm_format,
        "gemm_rate_vs_bf16": ev.design.format_rate(r.gemm_format),
        "tensor_core_formats": list(ev.design.format_names),
        "state_bytes_per_parameter": (
            r.state_bytes_per_parameter if state_bytes is None else state_bytes
        ),
        "saved_linear_input_bytes": r.saved_linear_input_bytes,
    }


def _precision_text(p: dict[str, object]) -> str:
    return (
        f"{p['recipe']}: block GEMMs in {p['gemm_format']} ({p['gemm_rate_vs_bf16']:.3g}x the "
        f"bf16 rate), {p['state_bytes_per_parameter']} B/parameter of state, Linear inputs "
        f"stashed at {p['saved_linear_input_bytes']} B"
    )


def _breakdown_table(pl: Placement) -> str:
    """Where the iteration's time goes, beside the fullest device's memory."""
    total = pl.breakdown.iteration_s
    terms = pl.breakdown.terms()
    seconds = fmt_column([*terms.values(), total], "s")
    r = recipe(pl.layout.precision)
    # the terms whose block GEMMs run in the recipe's format say so (bf16 says nothing)
    tag = frozenset() if r.gemm_format == "bf16" else frozenset({"compute", "recompute"})
    # the step term also re-casts a caching recipe's fp8 weight copies
    notes = {name[:-2]: f" ({r.gemm_format} GEMMs)" for name in terms if name[:-2] in tag}
    if r.weight_refresh_bytes_per_parameter:
        notes["optimizer"] = f" (and the {r.gemm_format} weight casts)"
    times = [
        (
            name.removesuffix("_s") + notes.get(name[:-2], ""),
            text,
            fmt_percent(value / total if total else 0.0),
        )
        for (name, value), text in zip(terms.items(), seconds, strict=False)
    ]
    times.append(("iteration", seconds[-1], fmt_percent(1.0)))
    mem = pl.memory_breakdown
    names = [f.name for f in dataclasses.fields(mem)]
    sizes = fmt_column([*(getattr(mem, n) for n in names), mem.total_bytes], "B")
    kept = {}
    if tag and pl.layout.recompute != "full":
        kept["activations_bytes"] = f" (Linear inputs at {r.saved_linear_input_bytes} B)"
    memory = [
        (n.removesuffix("_bytes") + kept.get(n, ""), t) for n, t in zip(names, sizes, strict=False)
    ]
    memory.append(("total", sizes[-1]))
    memory += [("", "")] * (len(times) - len(memory))
    rows = [[*t, *m] for t, m in zip(times, memory, strict=True)]
    return table(rows, ["time term", "per iteration", "share", "memory (fullest device)", ""])


def energy_terms(sc: Score) -> dict[str, float]:
    """Joules of one iteration by cause (IT energy: devices and hosts)."""
    return {
        "compute_j": sc.energy_compute_j,
        "memory_j": sc.energy_memory_j,
        "static_j": sc.energy_static_j,
        "idle_j": sc.energy_idle_j,
        "network_j": sc.energy_network_j,
        "host_j": sc.energy_host_j,
    }


def _run_table(sc: Score, run: RunAnswers, scoring: ScoringParams) -> str:
    """The iteration's energy by cause, then the whole run's answers."""
    q = fmt_quantity
    total = sc.energy_per_batch_j
    terms = energy_terms(sc)
    joules = fmt_column([*terms.values(), total * (scoring.pue - 1)], "J")
    rows = [
        [name.removesuffix("_j"), text, q(j / total, "%")]
        for (name, j), text in zip(terms.items(), joules, strict=False)
    ]
    rows.append([f"facility (PUE {scoring.pue:g})", joules[-1], ""])
    energy = table(rows, ["energy term", "per iteration", "share of IT"])
    embodied = run.embodied_breakdown_kgco2e
    answers = [
        ["tokens", f"{q(run.tokens_to_train, 'tokens')} ({run.tokens_source})"],
        [
            "time to train (wall clock)",
            f"{q(run.time_to_train_s, 's')} at goodput {q(run.goodput, '%')} "
            f"({q(run.training_s, 's')} failure-free)",
        ],
        ["device-hours", q(run.device_hours)],
        ["energy (facility)", q(run.energy_j, "J")],
        ["  of which restarts (IT)", q(run.restart_energy_j, "J")],
        [
            "energy, model-card accounting",
            f"{q(run.energy_tdp_accounting_kwh * _J_PER_KWH, 'J')} "
            f"(device-hours x {q(run.board_tdp_w, 'W')} TDP x PUE {run.pue:g})",
        ],
        ["average power per device", q(run.avg_device_power_w, "W")],
        ["average power per node", q(run.avg_node_power_w, "W")],
        ["operational carbon", q(run.operational_kgco2e, "kgCO2e")],
        ["  model-card accounting", q(run.tdp_accounting_kgco2e, "kgCO2e")],
        [f"embodied carbon ({run.embodied_mode})", q(run.embodied_kgco2e, "kgCO2e")],
        *[[f"  of which {k}", q(v, "kgCO2e")] for k, v in embodied.items()],
        ["total carbon", q(run.total_kgco2e, "kgCO2e")],
        ["tCDP", q(run.tcdp_kgco2e_s, "kgCO2e·s")],
    ]
    return f"{energy}\n\n{table(answers, ['whole run', ''])}"


def _cost_table(run: RunAnswers) -> str:
    """The cost to train term by term (per device-hour and over the run), the capex, and
    both views of the accelerator's price."""
    hours = run.device_hours
    terms = dict(run.cost_breakdown)
    per_hour = fmt_column([*(v / hours for v in terms.values()), run.usd_per_device_hour], "USD")
    over_run = fmt_column([*terms.values(), run.tco_usd], "USD")
    rows = [
        [k, per_hour[i], over_run[i], fmt_percent(v / run.tco_usd if run.tco_usd else 0.0)]
        for i, (k, v) in enumerate(terms.items())
    ]
    rows.append(["total (TCO)", per_hour[-1], over_run[-1], fmt_percent(1.0)])
    views = ", ".join(
        f"{v} {fmt_quantity(run.accelerator_usd[v], 'USD')} per accelerator, "
        f"{fmt_quantity(run.tco_usd_by_view[v], 'USD')} to train"
        for v in COST_VIEWS
    )
    lines = [
        table(
            rows, [f"cost term ({run.cost_view} view)", "per device-hour", "over the run", "share"]
        ),
        f"capex (accelerators, hosts, network, data centre): {fmt_quantity(run.capex_usd, 'USD')}",
        f"electricity at ${run.usd_per_kwh:g}/kWh; interest {fmt_percent(run.interest)} a year",
        f"cost views: {views}",
    ]
    return "\n".join(lines)
