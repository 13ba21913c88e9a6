"""``phaze serve --rate R`` / ``--trace FILE``: the chosen serving layout under arriving
requests (docs/serving.md, "Serving under load"): its options, the simulation and the output."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from arch_space import Cluster
from phaze.cli import NoFeasiblePoint
from phaze.cli._render import echo_json, table
from phaze.cli._settings import setting_option
from phaze.model.scoring import ScoringParams
from phaze.model.serving import ServeContext, ServingPoint
from phaze.model.serving_arrivals import Arrivals, generate, read_trace
from phaze.model.serving_lengths import FIXED, check_name, length_distributions, sample_lengths
from phaze.model.serving_load import LoadResult, load_settings, simulate_load
from phaze_common.errors import ConfigError
from phaze_common.units import fmt_count, fmt_noun, fmt_percent, fmt_quantity, fmt_time
from workloads.catalog import resolve_model
from workloads.serving import RequestBatch

__all__ = [
    "load_options",
    "LOAD_KEYS",
    "load_arrivals",
    "p99_limits",
    "serve_under_load",
    "load_document",
    "print_load",
]

#: The keyword arguments :func:`load_options` adds.
LOAD_KEYS = (
    "rate",
    "burstiness",
    "lengths",
    "trace",
    "requests",
    "seed",
    "p99_ttft_ms",
    "p99_tpot_ms",
)
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
    "engine",
)


def load_options(f: Callable) -> Callable:
    """``--rate``, ``--burstiness``, ``--lengths``, ``--trace``, ``--requests``, ``--seed``
    and the p99 latency limits."""
    options = [
        setting_option(
            "rate",
            help="Requests per second arriving (a Poisson process): simulate the chosen layout "
            "under load and give latency percentiles, not steady-state means.",
        ),
        setting_option("burstiness"),
        setting_option(
            "lengths",
            metavar="NAME",
            help=f"Request lengths at --rate: {FIXED} (--input-tokens and --output-tokens, the "
            "default) or a distribution from published statistics ("
            + ", ".join(length_distributions())
            + "); needs --rate.",
        ),
        setting_option("trace"),
        setting_option("requests", help="Requests simulated at --rate [default: 2000]."),
        setting_option("seed", help="Seed of the arrivals at --rate [default: 0]."),
        setting_option(
            "p99_ttft_limit_s",
            help="p99 TTFT limit under load, ms: SLO attainment counts the requests whose TTFT "
            "(and TPOT) is within the p99 limits; needs --rate or --trace.",
        ),
        setting_option(
            "p99_tpot_limit_s", help="p99 TPOT limit under load, ms (as --p99-ttft-ms)."
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def load_arrivals(
    load: dict[str, Any], input_tokens: int, output_tokens: int, workload: str
) -> Arrivals | None:
    """The requests the options give (None: no --rate nor --trace, the steady state); one
    ConfigError naming every conflict. Named ``--lengths`` are clipped to ``workload``'s
    context."""
    problems = []
    if load["trace"] is not None and load["rate"] is not None:
        problems.append("give --rate or --trace, not both")
    if load["rate"] is None:
        given = [k for k in ("burstiness", "lengths", "requests", "seed") if load[k] is not None]
        problems += [f"--{k} needs --rate" for k in given]
        if load["trace"] is None:
            given = [k for k in ("p99_ttft_ms", "p99_tpot_ms") if load[k] is not None]
            problems += [f"--{k.replace('_', '-')} needs --rate or --trace" for k in given]
    if problems:
        raise ConfigError("serve: " + "; ".join(problems))
    if load["lengths"] is not None:
        check_name(load["lengths"])
    if load["trace"] is None and load["rate"] is None:
        return None
    if load["trace"] is not None:
        return read_trace(load["trace"])
    requests, seed = load["requests"] or load_settings().requests, load["seed"] or 0
    arrivals = generate(
        load["rate"],
        requests,
        input_tokens,
        output_tokens,
        cv=load["burstiness"] or 1.0,
        seed=seed,
    )
    if load["lengths"] in (None, FIXED):
        return arrivals
    context = resolve_model(workload).max_positions
    isl, osl = sample_lengths(load["lengths"], requests, context, seed=seed)
    return Arrivals(arrivals.arrival_s, isl, osl)


def p99_limits(load: dict[str, Any]) -> tuple[float | None, float | None]:
    """The p99 TTFT and TPOT limits the options give, seconds (None: not given)."""
    return tuple(None if load[k] is None else load[k] / 1e3 for k in ("p99_ttft_ms", "p99_tpot_ms"))


def serve_under_load(
    point: ServingPoint,
    arrivals: Arrivals,
    context: tuple[Cluster, ScoringParams],
    steady: dict[str, Any],
    load: dict[str, Any],
    as_json: bool,
) -> None:
    """Simulate ``point``'s layout (on ``context``'s cluster, scored by its settings) under
    ``arrivals`` and print the figures; ``steady`` is the steady state's document. SLO
    attainment counts the requests within the p99 limits when given, else within the mean
    limits. Exits 3 when the rate is above what the layout serves, or the p99 limits are
    missed."""
    cluster, scoring = context
    header = {k: steady[k] for k in _HEAD}
    requests = RequestBatch(
        ((header["input_tokens"], header["output_tokens"], 1.0),),
        kv_format=header["kv_format"],
        weight_format=header["weight_format"],
    )
    ctx = ServeContext(
        cluster=cluster,
        requests=requests,
        kv_admission=header["kv_admission"],
        scoring=scoring,
        engine=header["engine"],
    )
    p99 = p99_limits(load)
    limits = (
        p99
        if any(x is not None for x in p99)
        else (
            header["ttft_limit_s"],
            header["tpot_limit_s"],
        )
    )
    result = simulate_load(
        resolve_model(header["workload"]),
        point,
        ctx,
        arrivals,
        ttft_limit_s=limits[0],
        tpot_limit_s=limits[1],
    )
    doc = load_document(result, point, steady, load)
    if as_json:
        echo_json(doc)
    else:
        print_load(result, doc)
    if not result.stable:
        raise NoFeasiblePoint(
            f"unstable at {fmt_count(result.rate_per_s)} requests/s: the queue grows without "
            f"bound (the layout serves about {fmt_count(result.requests_per_s)} requests/s)"
        )
    if doc["p99_limits_met"] is False:
        raise NoFeasiblePoint(
            f"the p99 limits are missed: {fmt_percent(result.slo_attainment or 0.0)} of the "
            f"requests meet them, {fmt_percent(load_settings().capacity_attainment)} needed"
        )


def load_document(
    result: LoadResult, point: ServingPoint, steady: dict[str, Any], load: dict[str, Any]
) -> dict[str, Any]:
    """``--json``'s document under load: the steady state's head, the arrivals, the p99
    limits and whether they are met (None: not given), the run's figures and the rest of the
    steady state under ``steady_state``."""
    p99 = p99_limits(load)
    given = any(x is not None for x in p99)
    met = result.stable and (result.slo_attainment or 0.0) >= load_settings().capacity_attainment
    return {
        **{k: steady[k] for k in _HEAD},
        "p99_ttft_limit_s": p99[0],
        "p99_tpot_limit_s": p99[1],
        "p99_limits_met": met if given else None,
        "arrivals": _kind(load),
        "burstiness": load["burstiness"] or 1.0,
        "lengths": "trace" if load["trace"] is not None else load["lengths"] or FIXED,
        "seed": load["seed"] or 0,
        "strategy": str(point.layout),
        **result.document(),
        "steady_state": {k: v for k, v in steady.items() if k not in _HEAD},
    }


def _kind(load: dict[str, Any]) -> str:
    if load["trace"] is not None:
        return "trace"
    return "poisson" if load["burstiness"] in (None, 1.0) else "gamma"


def _rate(x: float) -> str:
    return f"{fmt_count(x)} requests/s"


def print_load(r: LoadResult, doc: dict[str, Any]) -> None:
    """The run's figures as a table and the sentence on its stability."""
    q = fmt_quantity
    head = (
        f"{doc['workload']} on {doc['arch']}, {fmt_noun(doc['devices'], 'device')}, {r.requests} requests "
        f"at {_rate(r.rate_per_s)}"
    )
    lengths = f"{doc['lengths']}, mean ISL {r.input_tokens_mean:.0f} OSL {r.output_tokens_mean:.0f}"
    rows = [["layout", doc["strategy"]], ["arrivals", doc["arrivals"]], ["lengths", lengths]]
    if r.stable:
        rows += [
            ["TTFT p50 / p90 / p99", " / ".join(fmt_time(x) for x in r.ttft_s)],
            ["TPOT p50 / p90 / p99", " / ".join(fmt_time(x) for x in r.tpot_s)],
            ["end to end p50 / p99", " / ".join(fmt_time(x) for x in r.e2e_s)],
            ["requests in flight (mean)", f"{r.mean_in_flight:.1f}"],
            ["queue at arrival (p99)", f"{r.queue_p99:g}"],
        ]
        if r.slo_attainment is not None:
            limits = ", ".join(
                f"{name} <= {fmt_time(doc[key])}"
                for name, key in (("TTFT", "p99_ttft_limit_s"), ("TPOT", "p99_tpot_limit_s"))
                if doc[key] is not None
            )
            if limits:
                met = "met" if doc["p99_limits_met"] else "missed"
                rows.append(["p99 limits", f"{limits} ({met})"])
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
