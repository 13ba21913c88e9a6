"""Prefill-decode design pairs of a serving sweep at a rate (``[sweep] pairs``, Splitwise).

A pair serves each request's prompt on one design's prefill pool and its decodes on another
design's decode pool, the prompt's KV cache sent between their machines. Each design's
pools are those of its best disaggregated layout at each batch of the sweep
(:func:`phaze.model.serving_search.search` with a prefill pool required, under the sweep's mean
limits), so both pools are sized as the design itself would size them on the cluster.

Every pool is simulated once, alone, under the sweep's arrivals (:func:`pool_runs`, in the
workers; :func:`phaze.model.serving_load.pool_times`): a prefill pool gives each request's first
token, a decode pool each request's last token with its KV cache there on arrival. A pair's
requests then take (:func:`pair_record`) their first token from the prefill pool, the
transfer across nodes (:func:`phaze.model.serving_policies.pair_transfer_s`), and the decode pool's time
from its admission to its last token. The decode pool is simulated on the arrivals rather
than on the prefill pool's completions: a pair's decode pool sees its requests shifted by
the prefill latency, so the figures leave out how the prefill pool's queueing bunches them
(exact when the prefill pool does not queue). This makes pairing cost one simulation per
pool, not one per pair. A pair is stable when both of its pools are; it meets the SLO
when also ``capacity_attainment`` of its requests meet the limits; its cost per million
output tokens at the rate is both pools' device-hours over the tokens it serves.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from arch_space import Accelerator, design_id
from phaze.executors import Progress, Runner
from phaze.model.serving import ServeContext, ServingPoint
from phaze.model.serving_arrivals import Arrivals, generate
from phaze.model.serving_load import load_settings, pool_times
from phaze.model.serving_policies import pair_transfer_s
from phaze.model.serving_search import search
from phaze.sweep.planning import Shared, serve_formats
from phaze.sweep.serve_tasks import AtRate
from phaze_common.errors import ConfigError, Infeasible
from placement import Layout, parse_serving
from results.store import Store
from workloads import Model
from workloads.serving import serving_settings

__all__ = [
    "PoolRun",
    "arrivals_at",
    "pool_runs",
    "split_point",
    "pair_record",
    "pair_records",
    "run_pairs",
]


@dataclass(frozen=True, slots=True)
class PoolRun:
    """One pool of a design's disaggregated layout, run alone at the sweep's rate: its
    role (``prefill`` or ``decode``), layout section, devices and their hourly cost, each
    request's time out of it, whether it kept up, and (a prefill pool) the KV transfer to
    another machine."""

    workload: str
    weights: str
    design_id: str
    design_name: str
    role: str
    batch: int
    strategy: str
    devices: int
    usd_per_device_hour: float
    done_s: np.ndarray
    stable: bool
    transfer_s: float = 0.0


def arrivals_at(at_rate: AtRate, ctx: ServeContext) -> Arrivals:
    """The sweep's arrivals at its rate (as :func:`phaze.sweep.serve_tasks.at_rate_columns`
    draws them)."""
    r = ctx.requests
    return generate(
        at_rate.rate_per_s,
        at_rate.requests,
        round(r.mean_input_tokens),
        round(r.mean_output_tokens),
        seed=at_rate.seed,
    )


def split_point(
    workload: str, model: Model, acc: Accelerator, batch: int, weights: str, ctx: ServeContext
) -> ServingPoint | None:
    """``acc``'s best layout at ``batch`` with separate prefill and decode pools (None when
    none fits)."""
    layout = dataclasses.replace(
        parse_serving(""),
        batch=batch,
        open=frozenset({"chunk", "batching"}),
        prefill=Layout.searching(p=1, ep=1),
        weights=None if weights == "bf16" else weights,
    )
    try:
        return search(workload, model, acc, layout, ctx)
    except Infeasible:
        return None


def pool_runs(shared: Shared, acc: Accelerator) -> tuple[PoolRun, ...]:
    """Every pool ``acc`` brings to pairing (runs in a worker): for each workload, weight
    format and batch, its disaggregated layout's decode pool, and its prefill pool once
    per distinct prefill layout, each simulated alone at the sweep's rate."""
    ctx, at_rate = shared.serve, shared.at_rate
    assert ctx is not None and at_rate is not None, "pairing needs a serving sweep at a rate"
    arrivals = arrivals_at(at_rate, ctx)
    did, runs = design_id(acc), []
    for name, model in shared.workloads:
        for fmt in serve_formats(shared, acc):
            seen: set[str] = set()
            for b in shared.batches:
                point = split_point(name, model, acc, b, fmt, ctx)
                if point is None:
                    continue
                pre, dec = str(point.layout).split(";")
                roles = [("decode", dec)] + ([] if pre in seen else [("prefill", pre)])
                seen.add(pre)
                for role, text in roles:
                    try:
                        times = pool_times(model, point, ctx, arrivals, role)
                    except (ConfigError, Infeasible):
                        continue  # a request larger than a replica's KV cache
                    pool = point.layout.prefill if role == "prefill" else point.layout.decode
                    runs.append(
                        PoolRun(
                            name,
                            fmt,
                            did,
                            acc.name or "",
                            role,
                            b,
                            text,
                            pool.devices,
                            point.score.usd_per_device_hour,
                            times.done_s,
                            times.stable,
                            pair_transfer_s(model, point, ctx) if role == "prefill" else 0.0,
                        )
                    )
    return tuple(runs)


def pair_key(pre: PoolRun, dec: PoolRun, at_rate: AtRate) -> str:
    """The content key of a pair: workload, both designs and pool layouts, weights, load."""
    key = f"{pre.workload}|pair|{pre.design_id}|{pre.strategy}|{dec.design_id}|{dec.strategy}"
    key = key if pre.weights == "bf16" else f"{key}|weights={pre.weights}"
    return key + at_rate.key()


def pair_record(
    pre: PoolRun,
    dec: PoolRun,
    arrivals: Arrivals,
    limits: tuple[float | None, float | None],
    at_rate: AtRate,
) -> dict[str, Any]:
    """The store record of ``pre``'s prefill pool paired with ``dec``'s decode pool (see
    the module docstring); latencies None when a pool is unstable, the cost at the rate
    None unless the pair meets the SLO."""
    a, osl = arrivals.arrival_s, arrivals.output_tokens
    ttft = pre.done_s - a
    decode_s = pre.transfer_s + (dec.done_s - a)
    tpot = decode_s / (osl - 1)
    finished = pre.done_s + decode_s
    stable = pre.stable and dec.stable
    meets = np.ones(len(a), bool)
    for limit, x in zip(limits, (ttft, tpot), strict=True):
        if limit is not None:
            meets &= x <= limit
    given = any(x is not None for x in limits)
    span = float(np.max(finished) - a[0])
    attainment = float(np.mean(meets)) if given else None
    feasible = stable and (attainment is None or attainment >= load_settings().capacity_attainment)
    usd_per_s = (
        pre.devices * pre.usd_per_device_hour + dec.devices * dec.usd_per_device_hour
    ) / 3600
    tokens_per_s = float(np.sum(osl)) / span

    def v(x: float | None) -> float | None:
        return x if stable else None

    return {
        "key": pair_key(pre, dec, at_rate),
        "workload": pre.workload,
        "prefill_design_id": pre.design_id,
        "prefill_design_name": pre.design_name or None,
        "decode_design_id": dec.design_id,
        "decode_design_name": dec.design_name or None,
        "precision": serving_settings().weight_recipes[pre.weights],
        "batch": dec.batch,
        "prefill_strategy": pre.strategy,
        "decode_strategy": dec.strategy,
        "prefill_devices": pre.devices,
        "decode_devices": dec.devices,
        "devices": pre.devices + dec.devices,
        "kv_transfer_s": pre.transfer_s,
        "ttft_p99_s": v(float(np.percentile(ttft, 99))),
        "tpot_p99_s": v(float(np.percentile(tpot, 99))),
        "ttft_p50_s": v(float(np.percentile(ttft, 50))),
        "tpot_p50_s": v(float(np.percentile(tpot, 50))),
        "stable": int(stable),
        "slo_attainment": v(attainment),
        "goodput_requests_per_s": v(float(np.sum(meets)) / span) if given else None,
        "usd_per_million_tokens_at_rate": usd_per_s / tokens_per_s * 1e6 if feasible else None,
        "feasible_at_rate": int(feasible),
    }


def pair_records(
    runs: tuple[PoolRun, ...], arrivals: Arrivals, ctx: ServeContext, at_rate: AtRate
) -> list[dict[str, Any]]:
    """Every pair of a prefill pool and a decode pool among ``runs`` of the same workload
    and weight format (a design with itself too: its own disaggregated layout's pools), in
    a fixed order."""
    limits = at_rate.limits(ctx)
    pres = sorted((r for r in runs if r.role == "prefill"), key=lambda r: (r.design_id, r.strategy))
    decs = sorted((r for r in runs if r.role == "decode"), key=lambda r: (r.design_id, r.batch))
    return [
        pair_record(p, d, arrivals, limits, at_rate)
        for p in pres
        for d in decs
        if (p.workload, p.weights) == (d.workload, d.weights)
    ]


def run_pairs(
    store: Store,
    shared: Shared,
    designs: tuple[Accelerator, ...],
    runner: Runner,
    progress: Progress | None = None,
) -> int:
    """Pair the pools of ``designs`` (their runs spread over ``runner``'s workers, advancing
    ``progress``) and
    store every pair in one transaction; a store that holds pairs already is left as it is
    (a resumed sweep does not pair again). Returns the pairs stored."""
    if store.pairs():
        return 0
    assert shared.serve is not None and shared.at_rate is not None
    got: dict[int, tuple[PoolRun, ...]] = {}
    runner.run(
        functools.partial(_indexed_pool_runs, shared),
        list(enumerate(designs)),
        on_result=lambda task, runs: got.__setitem__(task[0], runs),
        progress=progress,
    )
    runs = tuple(r for i in sorted(got) for r in got[i])
    records = pair_records(
        runs, arrivals_at(shared.at_rate, shared.serve), shared.serve, shared.at_rate
    )
    store.put_pairs(records)
    return len(records)


def _indexed_pool_runs(shared: Shared, task: tuple[int, Accelerator]) -> tuple[PoolRun, ...]:
    return pool_runs(shared, task[1])
