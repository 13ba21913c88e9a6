"""Capacity planning: the fewest devices, and their serving layout, that serve requests
arriving at a rate within p99 latency limits (docs/serving.md, "Capacity planning").

:func:`plan_capacity` tries device counts upward (:func:`device_counts`: powers of two up to
a node, then whole nodes doubling). At each count the steady-state search
(:func:`phaze.model.serving_search.ranked`) gives the best few layouts by the objective that meet
the latency limits as mean limits and whose steady-state capacity reaches the rate (a
layout serving fewer requests per second than arrive cannot be stable, so a count none of
whose layouts reaches it is passed over without a simulation); each is simulated under the
arrivals (:func:`phaze.model.serving_load.simulate_load`) in that order, and the first whose run
is stable with at least the target share of requests meeting both p99 limits (TTFT and
TPOT each at most its limit) wins. At a given rate every stable layout completes the same
tokens per second, so its cost per token is its devices' hours: the fewest devices is also
the cheapest, and the objective orders the layouts within a count.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from arch_space import Accelerator
from phaze.model.serving import ServeContext, ServingPoint
from phaze.model.serving_arrivals import Arrivals
from phaze.model.serving_load import LoadResult, load_settings, simulate_load
from phaze.model.serving_search import check_strategy_model, ranked
from phaze_common.errors import ConfigError, Infeasible
from phaze_common.units import fmt_count, fmt_percent
from placement.serving_layout import ServingLayout
from workloads import Model

__all__ = ["CapacityTry", "CapacityPlan", "device_counts", "plan_capacity"]


@dataclass(frozen=True, slots=True)
class CapacityTry:
    """One device count tried: the layouts simulated there (their text) and why it failed,
    or ``"met"``."""

    devices: int
    simulated: tuple[str, ...]
    outcome: str


@dataclass(frozen=True, slots=True)
class CapacityPlan:
    """The answer: the fewest devices meeting the limits, their layout's steady state, its
    run under the arrivals and its $ per million output tokens at their rate (the devices'
    hourly cost, the steady state's, over the output tokens completed per hour; all None
    when no count up to the maximum does), and every count tried in order."""

    devices: int | None
    point: ServingPoint | None
    load: LoadResult | None
    usd_per_million_tokens: float | None
    trail: tuple[CapacityTry, ...]


def device_counts(max_devices: int, devices_per_node: int) -> tuple[int, ...]:
    """The counts tried: powers of two below a node, then one node and its doublings, up to
    ``max_devices``.

    Examples
    --------
    >>> device_counts(64, 8)
    (1, 2, 4, 8, 16, 32, 64)
    >>> device_counts(40, 6)
    (1, 2, 4, 6, 12, 24)
    """
    counts, n = [], 1
    while n < devices_per_node and n <= max_devices:
        counts.append(n)
        n *= 2
    n = devices_per_node
    while n <= max_devices:
        counts.append(n)
        n *= 2
    return tuple(counts)


def _meets(result: LoadResult, target: float) -> bool:
    return result.stable and result.slo_attainment is not None and result.slo_attainment >= target


def _why(result: LoadResult, layout: ServingLayout) -> str:
    if not result.stable:
        return f"{layout}: unstable (serves about {fmt_count(result.requests_per_s)} requests/s)"
    return f"{layout}: attainment {fmt_percent(result.slo_attainment or 0.0)}"


def _try_count(
    model: Model,
    acc: Accelerator,
    problem: tuple[str, ServingLayout, ServeContext],
    arrivals: Arrivals,
    p99_limits: tuple[float | None, float | None],
) -> tuple[CapacityTry, ServingPoint | None, LoadResult | None]:
    """The count of ``ctx``'s cluster: its best few layouts simulated in turn."""
    workload, layout, ctx = problem
    n, settings = ctx.cluster.devices, load_settings()
    try:
        points = ranked(
            workload,
            model,
            acc,
            layout,
            ctx,
            keep=settings.capacity_candidates,
            min_requests_per_s=arrivals.rate_per_s,
        )
    except (ConfigError, Infeasible) as e:
        return CapacityTry(n, (), str(e)), None, None
    if not points:
        return (
            CapacityTry(
                n,
                (),
                "no layout meeting the steady-state limits serves "
                f"{fmt_count(arrivals.rate_per_s)} requests/s",
            ),
            None,
            None,
        )
    simulated, reasons = [], []
    for point in points:
        try:
            result = simulate_load(
                model, point, ctx, arrivals, ttft_limit_s=p99_limits[0], tpot_limit_s=p99_limits[1]
            )
        except (ConfigError, Infeasible) as e:
            reasons.append(f"{point.layout}: {e}")
            continue
        simulated.append(str(point.layout))
        if _meets(result, settings.capacity_attainment):
            return CapacityTry(n, tuple(simulated), "met"), point, result
        reasons.append(_why(result, point.layout))
    return CapacityTry(n, tuple(simulated), "; ".join(reasons)), None, None


def plan_capacity(
    workload: str,
    model: Model,
    acc: Accelerator,
    layout: ServingLayout,
    ctx: ServeContext,
    arrivals: Arrivals,
    *,
    p99_limits: tuple[float | None, float | None],
    max_devices: int,
    on_count: Callable[[int, int], None] | None = None,
) -> CapacityPlan:
    """The fewest devices of ``acc`` (nodes and links as ``ctx.cluster``'s) that serve
    ``arrivals`` with the p99 TTFT and TPOT limits ``p99_limits`` (seconds; at least one
    given) met by the target share of requests (see the module docstring). ``ctx``'s mean
    limits, where None, are the p99 limits. ``on_count(i, total)`` is told each count
    as it is tried (progress).

    Raises
    ------
    ConfigError
        No p99 limit is given, or ``layout`` contradicts the model or ``ctx`` whatever the
        device count (:func:`phaze.model.serving_search.check_strategy_model`).
    """
    if all(x is None for x in p99_limits):
        raise ConfigError("serve --capacity: give a p99 TTFT or TPOT limit")
    ctx = dataclasses.replace(
        ctx,
        ttft_limit_s=ctx.ttft_limit_s if ctx.ttft_limit_s is not None else p99_limits[0],
        tpot_limit_s=ctx.tpot_limit_s if ctx.tpot_limit_s is not None else p99_limits[1],
    )
    check_strategy_model(model, layout, ctx)
    counts = device_counts(max_devices, ctx.cluster.devices_per_node)
    trail = []
    for i, n in enumerate(counts):
        if on_count is not None:
            on_count(i, len(counts))
        at_n = dataclasses.replace(ctx, cluster=dataclasses.replace(ctx.cluster, devices=n))
        tried, point, result = _try_count(
            model, acc, (workload, layout, at_n), arrivals, p99_limits
        )
        trail.append(tried)
        if point is not None and result is not None:
            tokens_per_s = result.requests_per_s * float(np.mean(arrivals.output_tokens))
            usd = point.score.usd_per_device_hour * n / 3600 / tokens_per_s * 1e6
            return CapacityPlan(n, point, result, usd, tuple(trail))
    return CapacityPlan(None, None, None, None, tuple(trail))
