"""``phaze schedule``: the optimal op schedule of one layer pass on one accelerator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from arch_space.accelerator import Cluster
from arch_space.config import load_accelerator
from ilp import SCHEDULERS, Schedule
from ilp.schedule import DEFAULT_MIP_GAP, DEFAULT_SEARCH_NODES, DEFAULT_TIME_LIMIT_S
from ilp.timing import pass_schedule
from phaze.cli._files import cannot_write, check_writable
from phaze.cli._options import FiniteFloat, context_extension_option, default_seq_len
from phaze.cli._render import echo_json, table
from phaze.cli._settings import setting_option
from phaze_common.errors import ConfigError, unknown_name
from phaze_common.limits import MAX_DEVICES
from phaze_common.units import fmt_column, fmt_percent, fmt_quantity
from results.gantt import draw_gantt, gantt_formats
from workloads import TrainingSetup, build_layer_graph, resolve_model

__all__ = ["schedule", "schedule_doc"]

_PASSES = {"fwd": "forward", "bwd": "backward", "recompute": "recompute"}


def schedule_doc(s: Schedule) -> dict[str, Any]:
    """A JSON-ready description of a schedule (ops in start order, SI units; units and
    utilisations by resource kind: the design's kinds of compute unit, then channels)."""
    ops = [
        {
            "op": str(v),
            "start_s": s.start_s[v],
            "duration_s": s.duration_s[v],
            "mode": "parallel" if v in s.parallel else "single",
            "units": dict(s.held[v]),
            "cores": s.core_ids[v],
        }
        for v in sorted(s.start_s, key=lambda v: (s.start_s[v], str(v)))
    ]
    return {
        "makespan_s": s.makespan_s,
        "energy_j": s.energy_j,
        "capacity": dict(s.capacity),
        "utilisation": dict(s.utilisation),
        "peak_utilisation": dict(s.peak_utilisation),
        "solver": s.solver,
        "status": str(s.status),
        "method": str(s.method),
        "gap": s.gap,
        "wall_s": s.wall_s,
        "time_limit_s": s.time_limit_s,
        "ops": ops,
    }


def _check_gantt(path: Path) -> None:
    """Refuse a ``--gantt`` file in a format the chart cannot be written in, or in a place it
    cannot be written to, before the schedule is solved."""
    formats = gantt_formats()
    if path.suffix.lower().removeprefix(".") not in formats:
        raise ConfigError(
            f"--gantt {path}: the extension {path.suffix or '(none)'!s} is not an image format; "
            f"give a file ending in one of {', '.join('.' + f for f in formats)}"
        )
    check_writable(path, "--gantt")


@click.command("schedule")
@click.option("--workload", "workload", required=True, help="Catalog model name or config.json.")
@click.option("--arch", "arch", required=True, help="Accelerator preset name or TOML file.")
@click.option(
    "--tp",
    type=click.IntRange(1, MAX_DEVICES),
    default=1,
    show_default=True,
    help="Tensor-parallel width.",
)
@click.option(
    "--pass",
    "pass_",
    type=click.Choice(tuple(_PASSES)),
    default="fwd",
    show_default=True,
    help="Which pass of the layer to schedule.",
)
@click.option("--layer", default="block", show_default=True, help="Distinct layer (class id).")
@setting_option(
    "seq_len", help="Tokens per sequence [default: 2048, or the model's context if shorter]."
)
@context_extension_option
@setting_option(
    "micro_batches", dest="micro_batch", many=False, help="", default=1, show_default=True
)
@click.option("--solver", type=click.Choice(SCHEDULERS), default="highs", show_default=True)
@click.option(
    "--time-limit",
    type=FiniteFloat(0, 1e6, lo_open=True),
    default=DEFAULT_TIME_LIMIT_S,
    show_default=True,
    help="Seconds per independent part of the graph.",
)
@click.option(
    "--mip-gap",
    type=FiniteFloat(0, 1, hi_open=True),
    default=DEFAULT_MIP_GAP,
    show_default=True,
)
@click.option(
    "--search-nodes",
    type=click.IntRange(min=0),
    default=DEFAULT_SEARCH_NODES,
    show_default=True,
    help="Branch-and-bound nodes per part before the MIP (0: none).",
)
@click.option(
    "--gantt",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also draw a Gantt chart to this file, in the format its extension names (.png, .svg, "
    ".pdf, ...).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def schedule(
    workload: str,
    arch: str,
    tp: int,
    pass_: str,
    layer: str,
    seq_len: int | None,
    allow_context_extension: bool,
    micro_batch: int,
    solver: str,
    time_limit: float,
    mip_gap: float,
    search_nodes: int,
    gantt: Path | None,
    as_json: bool,
) -> None:
    """Schedule one layer pass's ops on an accelerator's compute units."""
    if gantt is not None:
        _check_gantt(gantt)
    model = resolve_model(workload)
    acc = load_accelerator(arch)
    seq = seq_len if seq_len is not None else default_seq_len(model)
    setup = TrainingSetup(
        seq_len=seq,
        global_batch=micro_batch,
        micro_batch=micro_batch,
        allow_context_extension=allow_context_extension,
    )
    graph = build_layer_graph(model, setup, tp)
    if layer not in graph.op_graphs:
        raise unknown_name("layer class", layer, graph.op_graphs)
    op_graph = getattr(graph.op_graphs[layer], _PASSES[pass_])
    if tp > 8 and tp % 8:
        raise ConfigError(f"--tp = {tp}: above one 8-device node it must be a multiple of 8")
    cluster = Cluster(devices=max(tp, 1), devices_per_node=8)
    s = pass_schedule(
        op_graph,
        acc,
        cluster,
        solver=solver,
        time_limit_s=time_limit,
        mip_gap=mip_gap,
        search_nodes=search_nodes,
    )
    title = f"{model.name} {layer} {_PASSES[pass_]} (t={tp}) on {acc.name or arch}"
    if gantt is not None:
        try:
            draw_gantt(s, gantt, title)
        except OSError as e:
            raise cannot_write(gantt, e, "--gantt") from None
    if as_json:
        echo_json(
            {
                "workload": model.name,
                "arch": acc.name or arch,
                "tp": tp,
                "pass": _PASSES[pass_],
                "layer": layer,
                "seq_len": seq,
                "micro_batch": micro_batch,
                **schedule_doc(s),
            }
        )
        return
    doc = schedule_doc(s)
    click.echo(title)
    busy = ", ".join(
        f"{k} {fmt_percent(s.utilisation[k])} avg / {fmt_percent(s.peak_utilisation[k])} peak"
        for k in s.core_kinds
    )
    click.echo(
        f"makespan {fmt_quantity(s.makespan_s, 's')}, energy {fmt_quantity(s.energy_j, 'J')}, "
        + busy
    )
    click.echo(
        f"solver {s.solver}, status {s.status} ({s.method}), gap {fmt_percent(s.gap)}, "
        f"{fmt_quantity(s.wall_s, 's')} (limit {fmt_quantity(s.time_limit_s, 's')})"
    )
    starts = fmt_column([o["start_s"] for o in doc["ops"]], "s")
    durations = fmt_column([o["duration_s"] for o in doc["ops"]], "s")
    rows = [
        (o["op"], starts[i], durations[i], o["mode"], o["cores"] or "-")
        for i, o in enumerate(doc["ops"])
    ]
    click.echo(table(rows, ("op", "start", "duration", "mode", "cores")))
    if gantt is not None:
        click.echo(f"gantt chart: {gantt}")
