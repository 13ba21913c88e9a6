"""``phaze serve``: one design serving a model, with the serving layout that meets a latency
target (docs/serving.md)."""

from __future__ import annotations

import dataclasses

import click

from arch_space import load_accelerator
from phaze.api import serve as api_serve
from phaze.api import serve_capacity
from phaze.cli import NoFeasiblePoint
from phaze.cli._options import cluster_of, design_options, scoring_of, scoring_options
from phaze.cli._render import echo_json, table
from phaze.cli._settings import setting_option
from phaze.cli.serve_capacity import (
    CAPACITY_KEYS,
    capacity_document,
    capacity_options,
    check_capacity,
    counting,
    print_capacity,
    refuse_capacity,
)
from phaze.cli.serve_config import config_options, serve_config_toml
from phaze.cli.serve_load import (
    LOAD_KEYS,
    load_arrivals,
    load_options,
    p99_limits,
    serve_under_load,
)
from phaze.executors.progress import ticking
from phaze.model.run import parse_tokens
from phaze.model.serving import ServingPoint
from phaze.model.serving_engines import engine_profile
from phaze.model.serving_load import load_settings
from phaze_common.units import fmt_column, fmt_noun, fmt_percent, fmt_quantity, fmt_time
from workloads.serving import serving_settings

__all__ = ["serve", "serving_document"]


@click.command("serve")
@design_options(
    "Accelerators serving (not with --capacity, which searches it).", devices_required=False
)
@setting_option("input_tokens", required=True, help="Prompt tokens (ISL).")
@setting_option(
    "output_tokens", required=True, help="Generated tokens per request (OSL), at least 2."
)
@setting_option(
    "batches",
    dest="batch",
    many=False,
    help="Sequences in flight per replica [default: searched, powers of two up to vLLM's "
    "max_num_seqs].",
)
@setting_option("ttft_limit_s", help="Mean TTFT limit, ms.")
@setting_option("tpot_limit_s", help="Mean TPOT limit, ms.")
@click.option(
    "--strategy",
    default="",
    help="Fixed keys, the rest searched: t=8,p=1,d=1,ep=1,batch=64,chunk=2048|off,"
    "batching=continuous|static; two pools: prefill:t=4,d=1;decode:t=4,d=1,batch=64.",
)
@setting_option("objective", declared_default=True)
@setting_option(
    "disaggregate",
    dest="disaggregate",
    flag_value=False,
    default=True,
    help="Search one pool only (no separate prefill and decode pools).",
)
@setting_option("kv_format", declared_default=True)
@setting_option("kv_admission")
@setting_option("engine")
@setting_option(
    "weight_formats",
    dest="weight_format",
    many=False,
    help="Number format of the blocks' weights: fp8 and nvfp4 run their GEMMs on fp8 / fp4 "
    "tensor cores; int8 and int4 (weight-only, group 32) are read narrow and multiplied in "
    "bf16 [default: the strategy's weights=, else bf16].",
)
@setting_option("tokens_to_serve")
@scoring_options(training=False)
@load_options
@capacity_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@config_options
def serve(
    workload,
    arch,
    input_tokens,
    output_tokens,
    batch,
    ttft_ms,
    tpot_ms,
    strategy,
    objective,
    disaggregate,
    kv_format,
    kv_admission,
    engine,
    weight_format,
    tokens_to_serve,
    as_json,
    show_config,
    **kw,
):
    """TTFT, TPOT, throughput, memory, energy, cost and carbon of serving a model on one
    design, with the serving layout that meets the latency limits.

    The search tries tensor, pipeline and expert parallelism within a replica, data-parallel
    replicas, batch sizes, chunked prefill and separate prefill and decode pools, and keeps
    the layout that meets --ttft-ms and --tpot-ms (the model's mean latencies in steady
    state) with the most output tokens per second per device (or the fewest $ per million).
    Exits 3 when no layout meets the limits, after printing the closest.

    With --rate or --trace, requests arrive and the chosen layout's engines are simulated
    step by step: TTFT, TPOT and end-to-end percentiles, SLO attainment and goodput at the
    limits (--p99-ttft-ms and --p99-tpot-ms when given, else the mean limits per request);
    exits 3 when the rate is above what the layout serves or the p99 limits are missed.
    With --capacity, the device count is searched instead: the fewest devices whose layout
    meets the p99 limits for 99 % of the requests (exits 3 when none up to --max-devices
    does).
    """
    if show_config:
        click.echo(serve_config_toml(click.get_current_context()), nl=False)
        return
    load = {k: kw.pop(k) for k in LOAD_KEYS}
    cap = {k: kw.pop(k) for k in CAPACITY_KEYS}
    check_capacity(cap, load, kw["devices"])
    arrivals = load_arrivals(load, input_tokens, output_tokens, workload)
    acc = load_accelerator(arch)
    kw["devices"] = kw["devices"] or 1  # --capacity: searched
    cluster = cluster_of(kw)
    scoring = scoring_of(kw, acc)
    options = {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "batch": batch,
        "ttft_limit_s": None if ttft_ms is None else ttft_ms / 1e3,
        "tpot_limit_s": None if tpot_ms is None else tpot_ms / 1e3,
        "strategy": strategy,
        "objective": objective,
        "disaggregate": disaggregate,
        "kv_format": kv_format,
        "kv_admission": kv_admission,
        "engine": engine,
        "weight_format": weight_format,
        "tokens_to_serve": None if tokens_to_serve is None else parse_tokens(tokens_to_serve),
        "scoring": scoring,
    }
    if cap["capacity"]:
        _capacity(workload, (acc, arch), cluster, arrivals, (load, cap), options, as_json)
        return
    point = ticking("phaze serve")(api_serve)(workload, acc, cluster, **options)
    doc = _document(workload, (acc, arch), cluster.devices, point, options)
    if arrivals is not None:
        serve_under_load(point, arrivals, (cluster, scoring), doc, load, as_json)
        return
    if as_json:
        echo_json(doc)
    else:
        _print(point, doc)
    if not point.meets_slo:
        raise NoFeasiblePoint(
            f"no serving layout meets the limits ({', '.join(point.slo)} missed); the closest "
            f"is printed: {point.layout}"
        )


def _document(
    workload: str, design: tuple, devices: int, point: ServingPoint, options: dict
) -> dict[str, object]:
    """The steady state's ``--json`` document, headed by what was asked."""
    acc, arch = design
    return {
        "workload": workload,
        "arch": acc.name or arch,
        "devices": devices,
        "input_tokens": options["input_tokens"],
        "output_tokens": options["output_tokens"],
        "ttft_limit_s": options["ttft_limit_s"],
        "tpot_limit_s": options["tpot_limit_s"],
        "objective": options["objective"],
        "weight_format": point.layout.weights or "bf16",
        "kv_format": options["kv_format"],
        "kv_admission": options["kv_admission"]
        or (
            serving_settings().kv_admission
            if options["engine"] is None
            else engine_profile(options["engine"]).kv_admission
        ),
        "engine": options["engine"],
        **serving_document(point),
    }


def _capacity(workload, design, cluster, arrivals, given, options, as_json) -> None:
    """``--capacity``: plan, then print the count found, its run and the trail; exits 3
    when no count up to the maximum meets the limits."""
    load, cap = given
    p99 = p99_limits(load)
    max_devices = cap["max_devices"] or load_settings().capacity_max_devices
    on_count, close = counting()
    try:
        plan = serve_capacity(
            workload,
            design[0],
            cluster,
            arrivals,
            p99_ttft_limit_s=p99[0],
            p99_tpot_limit_s=p99[1],
            max_devices=max_devices,
            on_count=on_count,
            **options,
        )
    finally:
        close()
    if plan.point is None:
        refuse_capacity(plan, max_devices, as_json)
    steady = _document(workload, design, plan.devices, plan.point, options)
    doc = capacity_document(plan, steady, load)
    if as_json:
        echo_json(doc)
    else:
        print_capacity(plan, doc)


def serving_document(point: ServingPoint) -> dict[str, object]:
    """The figures of a serving point, SI units, as ``--json`` prints them."""
    e, sc, lay = point.engine, point.score, point.layout
    pools = {"decode": lay.decode, **({"prefill": lay.prefill} if lay.prefill else {})}
    return {
        "ttft_s": e.ttft_s,
        "tpot_s": e.tpot_s,
        "output_tokens_per_s": e.output_tokens_per_s,
        "tokens_per_s_per_device": sc.tokens_per_s_per_device,
        "tokens_per_s_per_replica": point.tokens_per_s_per_replica,
        "requests_per_s": e.requests_per_s,
        "kv_cache_bytes_per_device": point.kv_cache_bytes_per_device,
        "memory_per_device_bytes": point.memory_per_device_bytes,
        "hbm_bytes": point.design.hbm_bytes,
        "memory_breakdown": {
            name: dataclasses.asdict(m) for name, m in zip(pools, point.memory, strict=True)
        },
        "energy_per_token_j": sc.energy_per_token_j,
        "energy_breakdown": sc.energy.terms(),
        "avg_power_w": sc.avg_power_w,
        "usd_per_million_tokens": sc.usd_per_million_tokens,
        "usd_per_device_hour": sc.usd_per_device_hour,
        "kgco2e_per_million_tokens": sc.kgco2e_per_million_tokens,
        "tokens_to_serve": sc.tokens_to_serve,
        "serve_time_s": sc.serve_time_s,
        "embodied_kgco2e": sc.embodied_kgco2e,
        "operational_kgco2e": sc.operational_kgco2e,
        "total_kgco2e": sc.total_kgco2e,
        "tcdp_kgco2e_s": sc.tcdp,
        "system_cost_usd": sc.system_cost_usd,
        "meets_slo": point.meets_slo,
        "slo_missed": list(point.slo),
        "bound": e.bound,
        "kv_transfer_s": e.transfer_s,
        "strategy": str(lay),
        "layout": {
            **{
                name: {f: getattr(pool, f) for f in ("t", "p", "d", "ep")}
                for name, pool in pools.items()
            },
            "batch": lay.batch,
            "chunk": lay.chunk,
            "batching": lay.batching,
            "disaggregated": lay.disaggregated,
        },
        "pools": [
            {"name": p.name, "replicas": p.replicas, "devices": p.devices, "busy": p.busy}
            for p in e.pools
        ],
    }


def _engine_label(name: str) -> str:
    profile = engine_profile(name)
    return f"{name} ({profile.label} {profile.version})"


def _print(point: ServingPoint, doc: dict) -> None:
    e, sc, q = point.engine, point.score, fmt_quantity
    lay = point.layout
    limits = ", ".join(
        f"{name} <= {fmt_time(doc[key])}"
        for name, key in (("TTFT", "ttft_limit_s"), ("TPOT", "tpot_limit_s"))
        if doc[key] is not None
    )
    engine = doc["engine"]
    rows = [
        ["layout", str(lay)],
        ["engine", "generic (serving.toml)" if engine is None else _engine_label(engine)],
        ["latency limits", f"{limits or 'none'} ({'met' if point.meets_slo else 'missed'})"],
        ["TTFT (mean)", fmt_time(e.ttft_s)],
        ["TPOT (mean)", fmt_time(e.tpot_s)],
        ["output tokens/s", q(e.output_tokens_per_s, "tokens/s")],
        ["  per device", q(sc.tokens_per_s_per_device, "tokens/s")],
        ["  per replica", q(point.tokens_per_s_per_replica, "tokens/s")],
        ["requests/s", q(e.requests_per_s, "/s")],
        ["rate bound by", e.bound],
        [
            "memory per device",
            f"{q(point.memory_per_device_bytes, 'B')} of {q(point.design.hbm_bytes, 'B')}",
        ],
        ["KV cache per device", q(point.kv_cache_bytes_per_device, "B")],
        ["energy per output token", q(sc.energy_per_token_j, "J")],
        ["average power", q(sc.avg_power_w, "W")],
        ["$ per million output tokens", q(sc.usd_per_million_tokens, "USD")],
        ["cost per device-hour", q(sc.usd_per_device_hour, "USD")],
        ["carbon per million output tokens", q(sc.kgco2e_per_million_tokens, "kgCO2e")],
        [
            f"serving {q(sc.tokens_to_serve, 'tokens')}",
            f"{fmt_time(sc.serve_time_s)}, {q(sc.total_kgco2e, 'kgCO2e')}, "
            f"tCDP {q(sc.tcdp, 'kgCO2e·s')}",
        ],
    ]
    head = f"{doc['workload']} on {doc['arch']}, {fmt_noun(doc['devices'], 'device')}, ISL {doc['input_tokens']} OSL {doc['output_tokens']}"
    click.echo(table(rows, ["serving", head]))
    click.echo("")
    terms = sc.energy.terms()
    joules = fmt_column([*terms.values(), sc.energy_per_token_j], "J")
    energy = [
        [k.removesuffix("_j"), joules[i], fmt_percent(v / sc.energy_per_token_j)]
        for i, (k, v) in enumerate(terms.items())
    ]
    energy.append(["total (IT)", joules[-1], fmt_percent(1.0)])
    click.echo(table(energy, ["energy term", "per output token", "share"]))
    click.echo("")
    names = ["decode" if lay.prefill else "replica", *(["prefill"] if lay.prefill else [])]
    mem_rows = []
    for name, m, pool in zip(
        names, point.memory, e.pools[::-1] if lay.prefill else e.pools, strict=True
    ):
        sizes = fmt_column(
            [m.weights_bytes, m.workspace_bytes, m.kv_cache_bytes, m.kv_capacity_bytes], "B"
        )
        mem_rows.append([name, pool.devices, fmt_percent(pool.busy), *sizes])
    click.echo(
        table(
            mem_rows,
            ["pool", "devices", "busy", "weights", "workspace", "KV cache", "KV capacity"],
        )
    )
    settings = serving_settings()
    click.echo(
        f"steady state at the batch (docs/serving.md); KV pages of {settings.page_tokens} tokens "
        f"in {fmt_percent(settings.memory_fraction)} of device memory"
    )
