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
from phaze.cli._collectives import collectives_doc, collectives_table
from phaze.cli._options import (
    DEFAULT_SEQ_LEN,
    cluster_of,
    context_extension_option,
    default_seq_len,
    design_options,
    optimizer_state_option,
    scoring_of,
    scoring_options,
)
from phaze.cli._render import echo_json, table
from phaze.cli._settings import setting_option
from phaze.cli._stages import pipeline_stages, stage_table
from phaze.executors.progress import ticking
from phaze.model.run import RunAnswers, parse_tokens, run_answers
from phaze.model.scoring import Score, ScoringParams
from phaze.sweep import placement_summary, schedule_exactness
from phaze_common.units import fmt_column, fmt_noun, fmt_pair, fmt_percent, fmt_quantity, fmt_time
from placement import Layout, Placement, parse_strategy
from results.display import area_headroom_text, power_headroom_text
from workloads import Model, resolve_model
from workloads.framework import (
    framework_names,
    framework_profile,
    search_exclusions,
)
from workloads.precision import recipe
from workloads.setup import TrainingSetup

__all__ = ["evaluate"]

_J_PER_KWH = 3.6e6


@click.command("evaluate")
@design_options("Accelerators in the cluster.")
@setting_option("global_batch", required=True)
@setting_option(
    "seq_len", help="Tokens per sequence [default: 2048, or the model's context if shorter]."
)
@context_extension_option
@setting_option(
    "micro_batches",
    dest="micro_batch",
    many=False,
    help="With --strategy search [default: searched, 1, 2 or 4 dividing the batch].",
)
@setting_option(
    "recompute",
    many=False,
    help="With --strategy search: none, selective, full or modules:<groups joined by +> "
    "(core_attn, layernorm, mla_up_proj, mlp, moe, moe_act, shared_experts) "
    "[default: searched, none, selective or full].",
)
@setting_option(
    "precision",
    many=False,
    help="Precision recipe: the blocks' GEMM format and the training state "
    "[default: bf16, or the strategy's precision=].",
)
@setting_option(
    "sequence_parallel",
    help="Sequence parallelism [default: searched, on or off at each width t > 1].",
)
@setting_option(
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
@setting_option("state_bytes_per_parameter", dest="state_bytes")
@optimizer_state_option
@setting_option(
    "framework",
    type=None,  # a profile's name, or NAME:key=value,... changing its keys
    declared_default=True,
    help=f"Overlap profile of the training framework ({', '.join(framework_names())}); "
    "NAME:key=value,... changes its keys (megatron-core-2024:ep_overlap=true).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def evaluate(
    workload,
    arch,
    global_batch,
    seq_len,
    allow_context_extension,
    micro_batch,
    recompute,
    precision,
    sequence_parallel,
    tokens_to_train,
    strategy,
    framework,
    state_bytes,
    optimizer_state,
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
    tokens, source = _tokens_to_train(tokens_to_train, model, global_batch * seq_len)
    layout = None
    if strategy != "search":
        layout = _fixed_layout(strategy, micro_batch, recompute, sequence_parallel, precision)
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
        optimizer_state=optimizer_state,
        precision=precision if layout is None else None,
        allow_context_extension=allow_context_extension,
    )
    if not ev.feasible:
        raise NoFeasiblePoint(f"infeasible: {ev.reason}")
    run = run_answers(
        ev.score,
        acc=acc,
        cluster=cluster,
        tokens_to_train=float(tokens),
        tokens_source=source,
        params=scoring,
    )
    doc = _document(
        ev,
        acc,
        run,
        scoring,
        workload=workload,
        arch=acc.name or arch,
        devices=devices,
        framework=framework,
        seq_len=seq_len,
        tflops_per_device=ev.model_flops_per_s_per_device / 1e12,
        precision=_precision_doc(ev, state_bytes, optimizer_state),
        searched=layout is None,
    )
    if as_json:
        echo_json(doc)
        return
    _echo_text(ev, doc, run, scoring)


def _tokens_to_train(given: str | None, model: Model, iteration_tokens: int) -> tuple[int, str]:
    """The run's token budget and where it comes from: ``--tokens``, else the model's
    published budget, else one iteration's tokens."""
    if given is not None:
        return parse_tokens(given), "--tokens"
    if model.tokens_to_train:
        return model.tokens_to_train, "the model's published budget"
    return iteration_tokens, "one iteration (no published budget; --tokens N)"


def _fixed_layout(
    strategy: str,
    micro_batch: int | None,
    recompute: str | None,
    sequence_parallel: bool | None,
    precision: str | None,
) -> Layout:
    """The layout ``--strategy`` fixes, the options filling what it leaves open; an option
    that gives a key the strategy also gives differently is an error naming both."""
    sp_flag = "--sp" if sequence_parallel else "--no-sp"
    return parse_strategy(
        strategy,
        {
            "mbs": ("--micro-batch", micro_batch),
            "recompute": ("--recompute", recompute),
            "sp": (sp_flag, sequence_parallel),
            "precision": ("--precision", precision),
        },
    )


def _document(
    ev,
    acc,
    run: RunAnswers,
    scoring: ScoringParams,
    *,
    workload: str,
    arch: str,
    devices: int,
    framework: str,
    seq_len: int,
    tflops_per_device: float,
    precision: dict[str, object],
    searched: bool,
) -> dict[str, object]:
    """The evaluation's JSON document, which the text output renders too: the metrics, the
    time, memory and energy breakdowns, the whole run's answers, the placement and its
    stages, and the accelerator's headroom (``searched``: the placement was searched, so
    the search's exclusions apply)."""
    pl, sc = ev.placement, ev.score
    return {
        "workload": workload,
        "arch": arch,
        "devices": devices,
        "framework": framework,
        "seq_len": seq_len,
        "precision": precision,
        "iteration_s": pl.breakdown.iteration_s,
        "samples_per_s": sc.samples_per_s,
        "tokens_per_s": sc.tokens_per_s,
        "tflops_per_device": tflops_per_device,
        "mfu": sc.mfu,
        "mfu_fp8_peak": _mfu_fp8_peak(acc, sc.mfu),
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
        "collectives": collectives_doc(ev.priced_collectives()),
        **dataclasses.asdict(run),
        "placement": json.loads(placement_summary(pl)),
        "pipeline_stages": pipeline_stages(pl),
        "strategy_defaults": ev.defaults,
        "search_exclusions": _exclusions(framework) if searched or ev.defaults else [],
        "headroom": headroom(acc).figures(),
    }


def _echo_text(ev, doc: dict[str, object], run: RunAnswers, scoring: ScoringParams) -> None:
    """Print the evaluation for a person: the metrics, the strategy defaults used and the
    layouts the search skipped, then the time and memory breakdown, the pipeline stages,
    the energy and the whole run's answers, and the cost."""
    pl = ev.placement
    click.echo(_metrics_table(ev, doc))
    if ev.defaults:
        click.echo(f"strategy defaults used (not given): {ev.defaults}")
    if doc["search_exclusions"]:
        rules = "; ".join(f"{x['rule']} ({x['reason']})" for x in doc["search_exclusions"])
        click.echo(f"layouts the search skipped, by {doc['framework']}'s rules: {rules}")
    click.echo("")
    click.echo(_breakdown_table(pl))
    click.echo("")
    click.echo(table(*stage_table(pl)))
    click.echo("")
    if ev.collectives:
        click.echo(collectives_table(ev.priced_collectives()))
        click.echo("")
    click.echo(_run_table(ev.score, run, scoring))
    click.echo("")
    click.echo(_cost_table(run))


def _metrics_table(ev, doc: dict[str, object]) -> str:
    """The headline metrics: time, throughput, MFU, memory, bubble, communication, the layer
    schedules' exactness, headroom, precision and placement."""
    pl, sc = ev.placement, ev.score
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
        ["model FLOP/s per device", fmt_quantity(doc["tflops_per_device"] * 1e12, "FLOP/s")],
        ["MFU", _mfu_text(doc)],
        [
            "memory per device",
            "{} of {}".format(*fmt_pair(pl.memory_breakdown.total_bytes, doc["hbm_bytes"], "B")),
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
    title = f"{doc['workload']} on {doc['arch']}, {fmt_noun(doc['devices'], 'device')}"
    return table(rows, ["metric", title])


def _exclusions(framework: str) -> list[dict[str, str]]:
    """The rules by which a search under ``framework`` skipped layouts the stack cannot run
    (:func:`workloads.framework.search_exclusions`): each rule's name and why."""
    out = []
    for text in search_exclusions(framework_profile(framework)):
        rule, _, reason = text.partition(": ")
        out.append({"rule": rule, "reason": reason})
    return out


def _precision_doc(ev, state_bytes: int | None, optimizer_state: str | None) -> dict[str, object]:
    """The point's precision recipe: its GEMM format and rate on the accelerator, the
    training state per parameter it ran with, part by part (the recipe's, as
    ``--optimizer-state`` or ``--state-bytes`` change it), and its stashed Linear inputs'
    bytes."""
    r = recipe(ev.knobs.precision)
    parts = TrainingSetup(
        1,
        1,
        precision=r.name,
        state_bytes_per_parameter=state_bytes,
        optimizer_state=optimizer_state,
    ).state_parts
    return {
        "recipe": r.name,
        "gemm_format": r.gemm_format,
        "gemm_rate_vs_bf16": ev.design.format_rate(r.gemm_format),
        "tensor_core_formats": list(ev.design.format_names),
        "state_bytes_per_parameter": parts.state_bytes_per_parameter,
        "optimizer_state": {
            "weights_bytes": parts.weight_bytes,
            "grads": parts.grads,
            "master": parts.master,
            "moments": parts.moments,
            "bytes": parts.parts_bytes(),
            "step_bytes_per_parameter": parts.step_bytes_per_parameter,
        },
        "saved_linear_input_bytes": r.saved_linear_input_bytes,
    }


def _mfu_fp8_peak(acc, mfu: float) -> float | None:
    """The MFU against the tensor cores' fp8 peak (``mfu`` is against the bf16 peak), None
    for a design without fp8."""
    return mfu / acc.format_rate("fp8") if "fp8" in acc.format_names else None


def _mfu_text(doc: dict[str, object]) -> str:
    """The MFU against the 16-bit peak (bf16, or fp16 on a part without bf16), and against
    the fp8 peak when the blocks' GEMMs ran in fp8 (an fp8 recipe's model FLOP/s can pass
    the bf16 peak)."""
    base = doc["precision"]["tensor_core_formats"][0]
    text = f"{fmt_percent(doc['mfu'])} of the {base} peak"
    if doc["precision"]["gemm_format"] == "fp8" and doc["mfu_fp8_peak"] is not None:
        text += f", {fmt_percent(doc['mfu_fp8_peak'])} of the fp8 peak"
    return text


def _precision_text(p: dict[str, object]) -> str:
    o = p["optimizer_state"]
    b = o["bytes"]
    return (
        f"{p['recipe']}: block GEMMs in {p['gemm_format']} ({p['gemm_rate_vs_bf16']:.3g}x the "
        f"{p['tensor_core_formats'][0]} rate), {p['state_bytes_per_parameter']} B/parameter "
        f"of state (weights "
        f"{b['weights']} B, grads {o['grads']} {b['grads']} B, master {o['master']} "
        f"{b['master']} B, moments {o['moments']} {b['moments']} B), Linear inputs "
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
