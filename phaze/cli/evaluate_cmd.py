"""``phaze evaluate``: one design on one workload, with a searched or a fixed placement."""

from __future__ import annotations

import dataclasses
import json

import click

from arch_space import Cluster, load_accelerator
from phaze.api import evaluate as api_evaluate
from phaze.cli import NoFeasiblePoint
from phaze.cli._render import echo_json, table
from phaze.config import RECOMPUTE_MODES
from phaze.limits import MAX_DEVICES, MAX_GLOBAL_BATCH, MAX_SEQ_LEN
from phaze.sweep import placement_summary, schedule_exactness
from placement import Placement
from results.units import fmt_bytes, fmt_percent, fmt_quantity, fmt_time
from workloads import model_flops_per_sequence, resolve_model

__all__ = ["evaluate"]


@click.command("evaluate")
@click.option("--workload", required=True, help="Catalog name or a Hugging Face config.json.")
@click.option("--arch", "arch", required=True, help="Accelerator preset name or TOML file.")
@click.option(
    "--devices",
    type=click.IntRange(1, MAX_DEVICES),
    required=True,
    help="Accelerators in the cluster.",
)
@click.option(
    "--devices-per-node", type=click.IntRange(1, MAX_DEVICES), default=8, show_default=True
)
@click.option(
    "--intra-node-gbps",
    type=click.FloatRange(min=0, min_open=True),
    default=300.0,
    show_default=True,
    help="Intra-node link bandwidth per device, GB/s.",
)
@click.option(
    "--inter-node-gbps",
    type=click.FloatRange(min=0, min_open=True),
    default=25.0,
    show_default=True,
    help="Inter-node link bandwidth per device, GB/s.",
)
@click.option(
    "--global-batch",
    type=click.IntRange(1, MAX_GLOBAL_BATCH),
    required=True,
    help="Sequences per iteration.",
)
@click.option("--seq-len", type=click.IntRange(1, MAX_SEQ_LEN), default=2048, show_default=True)
@click.option(
    "--micro-batch",
    type=click.IntRange(1, MAX_GLOBAL_BATCH),
    default=1,
    show_default=True,
    help="With --strategy search.",
)
@click.option(
    "--recompute",
    type=click.Choice(RECOMPUTE_MODES),
    default="none",
    show_default=True,
    help="With --strategy search.",
)
@click.option(
    "--sp/--no-sp",
    "sequence_parallel",
    default=True,
    show_default=True,
    help="Sequence parallelism (with --strategy search).",
)
@click.option(
    "--tokens",
    "tokens_to_train",
    type=click.IntRange(min=1),
    help="Tokens to train (default: the model's published budget).",
)
@click.option(
    "--strategy",
    default="search",
    show_default=True,
    help="'search', or fixed: t=8,p=8,d=1,mbs=1,v=3,recompute=full,sp=on,zero=1",
)
@click.option(
    "--state-bytes",
    type=click.IntRange(min=1),
    help="Weights + gradients + optimizer state per parameter (default 18: Adam, mixed "
    "precision; 20: DeepSpeed's BF16 optimizer).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def evaluate(
    workload,
    arch,
    devices,
    devices_per_node,
    intra_node_gbps,
    inter_node_gbps,
    global_batch,
    seq_len,
    micro_batch,
    recompute,
    sequence_parallel,
    tokens_to_train,
    strategy,
    state_bytes,
    as_json,
):
    """Iteration time, throughput, MFU and memory of one design, and its placement."""
    acc = load_accelerator(arch)
    cluster = Cluster(
        devices=devices,
        devices_per_node=devices_per_node,
        intra_node_bandwidth_bytes_per_s=intra_node_gbps * 1e9,
        inter_node_bandwidth_bytes_per_s=inter_node_gbps * 1e9,
    )
    model = resolve_model(workload)
    ev = api_evaluate(
        workload,
        acc,
        cluster,
        seq_len=seq_len,
        global_batch=global_batch,
        micro_batch=micro_batch,
        recompute=recompute,
        sequence_parallel=sequence_parallel,
        strategy=None if strategy == "search" else strategy,
        tokens_to_train=tokens_to_train or model.tokens_to_train or 1,
        state_bytes_per_parameter=state_bytes,
    )
    if not ev.feasible:
        raise NoFeasiblePoint(f"infeasible: {ev.reason}")
    pl, sc = ev.placement, ev.score
    tflops = (
        global_batch
        * model_flops_per_sequence(model, seq_len)
        / pl.time_per_batch_s
        / devices
        / 1e12
    )
    doc = {
        "workload": workload,
        "arch": acc.name or arch,
        "devices": devices,
        "iteration_s": pl.time_per_batch_s,
        "samples_per_s": sc.samples_per_s,
        "tokens_per_s": sc.tokens_per_s,
        "tflops_per_device": tflops,
        "mfu": sc.mfu,
        "memory_per_device_bytes": pl.memory_per_device_bytes,
        "hbm_bytes": acc.hbm_bytes,
        "bubble_fraction": pl.bubble_fraction,
        "communication_s": pl.communication_s,
        "breakdown": {**pl.breakdown.terms(), "iteration_s": pl.breakdown.iteration_s},
        "memory_breakdown": {
            **dataclasses.asdict(pl.memory_breakdown),
            "total_bytes": pl.memory_breakdown.total_bytes,
        },
        "placement": json.loads(placement_summary(pl)),
        "strategy_defaults": ev.defaults,
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
        ["iteration time", fmt_time(pl.time_per_batch_s)],
        [
            "throughput",
            f"{fmt_quantity(sc.samples_per_s, 'samples/s')}, "
            f"{fmt_quantity(sc.tokens_per_s, 'tokens/s')}",
        ],
        ["model FLOP/s per device", fmt_quantity(tflops * 1e12, "FLOP/s")],
        ["MFU", fmt_percent(sc.mfu)],
        [
            "memory per device",
            f"{fmt_bytes(pl.memory_per_device_bytes)} of {fmt_bytes(acc.hbm_bytes)}",
        ],
        ["pipeline bubble", f"{fmt_time(bubble_s)} ({fmt_percent(bubble_share)} of the iteration)"],
        ["exposed communication", fmt_time(pl.communication_s)],
        ["layer schedules", f"worst gap {fmt_percent(gap)} ({methods})"],
        [
            "placement",
            f"t={pl.tp} p={pl.pp} d={pl.dp} v={pl.virtual_stages} mbs={pl.micro_batch} "
            f"recompute={pl.recompute} sp={'on' if pl.sequence_parallel else 'off'} "
            f"zero={pl.zero}",
        ],
    ]
    click.echo(table(rows, ["metric", f"{workload} on {acc.name or arch}, {devices} devices"]))
    if ev.defaults:
        click.echo(f"strategy defaults used (not given): {ev.defaults}")
    click.echo("")
    click.echo(_breakdown_table(pl))
    stage_rows = [
        [
            i,
            f"{min(s.layers)}-{max(s.layers)}",
            s.devices,
            fmt_time(s.load_s),
            fmt_bytes(s.memory_bytes),
        ]
        for i, s in enumerate(pl.stages)
    ]
    click.echo("")
    click.echo(table(stage_rows, ["stage", "layers", "devices", "load per micro-batch", "memory"]))


def _breakdown_table(pl: Placement) -> str:
    """Where the iteration's time goes, beside the fullest device's memory."""
    total = pl.breakdown.iteration_s
    times = [
        (name.removesuffix("_s"), fmt_time(value), fmt_percent(value / total if total else 0.0))
        for name, value in pl.breakdown.terms().items()
    ]
    times.append(("iteration", fmt_time(total), fmt_percent(1.0)))
    mem = pl.memory_breakdown
    memory = [
        (f.name.removesuffix("_bytes"), fmt_bytes(getattr(mem, f.name)))
        for f in dataclasses.fields(mem)
    ]
    memory.append(("total", fmt_bytes(mem.total_bytes)))
    memory += [("", "")] * (len(times) - len(memory))
    rows = [[*t, *m] for t, m in zip(times, memory, strict=True)]
    return table(rows, ["time term", "per iteration", "share", "memory (fullest device)", ""])
