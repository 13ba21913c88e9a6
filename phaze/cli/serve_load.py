"""``phaze serve --rate R`` / ``--trace FILE``: the chosen serving layout under arriving
requests (docs/serving.md, "Serving under load"): its options, the simulation and the output."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from arch_space import Cluster
from phaze.cli import NoFeasiblePoint
from phaze.cli._options import FiniteFloat
from phaze.cli._render import echo_json, table
from phaze.scoring import ScoringParams
from phaze.serving import ServeContext, ServingPoint
from phaze.serving_arrivals import Arrivals, generate, read_trace
from phaze.serving_load import LoadResult, load_settings, simulate_load
from phaze_common.errors import ConfigError
from phaze_common.units import fmt_count, fmt_percent, fmt_quantity, fmt_time
from workloads.catalog import resolve_model
from workloads.serving import RequestBatch

__all__ = ["load_options", "LOAD_KEYS", "load_arrivals", "serve_under_load"]

#: The keyword arguments :func:`load_options` adds.
LOAD_KEYS = ("rate", "burstiness", "trace", "requests", "seed")
#: The steady-state document's keys that head the document under load; the others go under
#: its ``steady_state`` key.
_HEAD = (
    "workload",
    "arch",
    "devices",
    "input_tokens",
    "output_tokens",
    "ttft_limit_s",
    "tpot_limit_s",
    "objective",
    "weight_format",
    "kv_format",
    "kv_admission",
)


def load_options(f: Callable) -> Callable:
    """``--rate``, ``--burstiness``, ``--trace``, ``--requests`` and ``--seed``."""
    options = [
        click.option(
            "--rate",
            type=FiniteFloat(0, 1e9, lo_open=True),
            help="Requests per second arriving (a Poisson process): simulate the chosen layout "
            "under load and give latency percentiles, not steady-state means.",
        ),
        click.option(
            "--burstiness",
            type=FiniteFloat(0, 100, lo_open=True),
            help="Coefficient of variation of the gaps between arrivals (gamma distributed; "
            "1 is Poisson) [default: 1]; needs --rate.",
        ),
        click.option(
            "--trace",
            type=click.Path(path_type=Path),
            help="CSV of requests (arrival_s,input_tokens,output_tokens) to simulate instead "
            "of --rate.",
        ),
        click.option(
            "--requests",
            type=click.IntRange(2, 1_000_000),
            help="Requests simulated at --rate [default: 2000].",
        ),
        click.option(
            "--seed",
            type=click.IntRange(0, 2**63 - 1),
            help="Seed of the arrivals at --rate [default: 0].",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def load_arrivals(load: dict[str, Any], input_tokens: int, output_tokens: int) -> Arrivals | None:
    """The requests the options give (None: no --rate nor --trace, the steady state); one
    ConfigError naming every conflict."""
    problems = []
    if load["trace"] is not None and load["rate"] is not None:
        problems.append("give --rate or --trace, not both")
    if load["rate"] is None:
        given = [k for k in ("burstiness", "requests", "seed") if load[k] is not None]
        problems += [f"--{k} needs --rate" for k in given]
    if problems:
        raise ConfigError("serve: " + "; ".join(problems))
    if load["trace"] is None and load["rate"] is None:
        return None
    if load["trace"] is not None:
        return read_trace(load["trace"])
    return generate(
        load["rate"],
        load["requests"] or load_settings().requests,
        input_tokens,
        output_tokens,
        cv=load["burstiness"] or 1.0,
        seed=load["seed"] or 0,
    )


def serve_under_load(
    point: ServingPoint,
    arrivals: Arrivals,
    context: tuple[Cluster, ScoringParams],
    steady: dict[str, Any],
    load: dict[str, Any],
    as_json: bool,
) -> None:
    """Simulate ``point``'s layout (on ``context``'s cluster, scored by its settings) under
    ``arrivals`` and print the figures; ``steady`` is the steady state's document.
    Exits 3 when the rate is above what the layout serves."""
    cluster, scoring = context
    header = {k: steady[k] for k in _HEAD}
    requests = RequestBatch(
        ((header["input_tokens"], header["output_tokens"], 1.0),),
        kv_format=header["kv_format"],
        weight_format=header["weight_format"],
    )
    ctx = ServeContext(
        cluster=cluster, requests=requests, kv_admission=header["kv_admission"], scoring=scoring
    )
    result = simulate_load(
        resolve_model(header["workload"]),
        point,
        ctx,
        arrivals,
        ttft_limit_s=header["ttft_limit_s"],
        tpot_limit_s=header["tpot_limit_s"],
    )
    doc = {
        **header,
        "arrivals": _kind(load),
        "burstiness": load["burstiness"] or 1.0,
        "seed": load["seed"] or 0,
        "strategy": str(point.layout),
        **result.document(),
        "steady_state": {k: v for k, v in steady.items() if k not in _HEAD},
    }
    if as_json:
        echo_json(doc)
    else:
        _print(result, doc)
    if not result.stable:
        raise NoFeasiblePoint(
            f"unstable at {fmt_count(result.rate_per_s)} requests/s: the queue grows without "
            f"bound (the layout serves about {fmt_count(result.requests_per_s)} requests/s)"
        )


def _kind(load: dict[str, Any]) -> str:
    if load["trace"] is not None:
        return "trace"
    return "poisson" if load["burstiness"] in (None, 1.0) else "gamma"


def _rate(x: float) -> str:
    return f"{fmt_count(x)} requests/s"


def _print(r: LoadResult, doc: dict[str, Any]) -> None:
    q = fmt_quantity
    head = (
        f"{doc['workload']} on {doc['arch']}, {doc['devices']} devices, {r.requests} requests "
        f"at {_rate(r.rate_per_s)}"
    )
    rows = [["layout", doc["strategy"]], ["arrivals", doc["arrivals"]]]
    if r.stable:
        rows += [
            ["TTFT p50 / p90 / p99", " / ".join(fmt_time(x) for x in r.ttft_s)],
            ["TPOT p50 / p90 / p99", " / ".join(fmt_time(x) for x in r.tpot_s)],
            ["end to end p50 / p99", " / ".join(fmt_time(x) for x in r.e2e_s)],
            ["requests in flight (mean)", f"{r.mean_in_flight:.1f}"],
            ["queue at arrival (p99)", f"{r.queue_p99:g}"],
        ]
        if r.slo_attainment is not None:
            rows += [
                ["SLO attainment", fmt_percent(r.slo_attainment)],
                ["goodput", _rate(r.goodput_requests_per_s)],
            ]
    rows += [
        ["completed", _rate(r.requests_per_s)],
        ["steady-state capacity", _rate(r.capacity_requests_per_s)],
        ["KV cache in use (mean)", fmt_percent(r.kv_use_mean)],
        ["preemptions", str(r.preemptions)],
        ["energy per output token", q(r.energy_per_token_j, "J")],
    ]
    click.echo(table(rows, ["serving under load", head]))
    click.echo(r.explanation)
