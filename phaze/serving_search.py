"""The search for the serving layout that meets a latency target (docs/serving.md).

:func:`search` picks, among the layouts a partial one leaves open (tensor, pipeline and
expert parallelism, replicas, batch, chunked prefill, a disaggregated split), the one that
meets the TTFT and TPOT limits and maximises output tokens per second per device (or
minimises $ per million tokens), each candidate priced by
:func:`phaze.serving.evaluate_layout`. It skips, exactly, every candidate whose bound cannot
win: a decode step reads at least its weights and KV cache at the peak HBM bandwidth and
runs at least its FLOPs at peak (so TPOT is at least that, and throughput at most the batch
over it; both bounds grow with the batch), and costs at least its devices' hours at that
throughput.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import Final

from arch_space import Accelerator
from phaze.scoring import job_cost, system_capex
from phaze.serving import (
    OBJECTIVES,
    Objective,
    ServeContext,
    ServingPoint,
    check_layout,
    check_weight_format,
    decode_step,
    evaluate_layout,
    layout_context,
)
from phaze_common.errors import ConfigError, Infeasible
from phaze_common.units import fmt_noun
from placement.layout import Layout
from placement.serving_layout import ServingLayout, pool_layout
from workloads import Model
from workloads.build import valid_tp_widths
from workloads.serving import weight_recipe
from workloads.serving_costs import pass_flops, pass_kv_read_bytes, pass_weight_read_bytes

__all__ = ["candidates", "search"]

_MAX_STAGES: Final = 8  # pipeline depths searched: 1, 2, 4, 8 dividing the devices


def _degrees(n: int, cap: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, min(n, cap) + 1) if n % d == 0)


def _pools(model: Model, devices: int, given: Layout, ctx: ServeContext) -> Iterator[Layout]:
    """The complete pool layouts of ``devices`` devices that ``given`` allows: widths
    Megatron-style sharding accepts within a node, pipelines of 1, 2, 4 or 8 stages, replicas
    using every device, ``ep`` dividing the replicas and the routed experts."""
    cap = min(ctx.cluster.devices_per_node, devices)
    ts = (given.t,) if given.given("t") else valid_tp_widths(model, cap)
    for t in ts:
        if devices % t:
            continue
        depths = (
            (given.p,)
            if given.given("p")
            else tuple(p for p in (1, 2, 4, _MAX_STAGES) if (devices // t) % p == 0)
        )
        for p in depths:
            if p > model.layers or devices % (t * p):
                continue
            d = devices // (t * p)
            if given.given("d") and given.d != d:
                continue
            eps = (given.ep,) if given.given("ep") else _degrees(math.gcd(d, model.experts), d)
            for ep in eps:
                if model.experts % ep == 0 and d % ep == 0:
                    yield pool_layout(t, p, d, ep)


def candidates(model: Model, layout: ServingLayout, ctx: ServeContext) -> Iterator[ServingLayout]:
    """Every complete serving layout ``layout`` allows on the cluster's devices (its open
    fields searched: the batch sizes and chunk budgets of ``ctx``; disaggregated splits when
    the layout has a prefill pool, or when ``ctx.disaggregate`` and the layout leaves the
    engine open, with both pools on one pipeline stage unless it says otherwise)."""
    n = ctx.cluster.devices
    batches = (layout.batch,) if layout.given("batch") else ctx.batches
    chunks = (layout.chunk,) if layout.given("chunk") else ctx.chunks
    batching = layout.batching if layout.given("batching") else "continuous"
    if batching == "static":
        chunks = (None,)
    split = layout.prefill is not None
    colocated = any(layout.decode.given(f) for f in ("t", "p", "d", "ep"))
    if split or (
        ctx.disaggregate
        and batching == "continuous"
        and not layout.given("chunk")
        and not colocated
    ):
        pre_given = layout.prefill if split else Layout.searching(p=1, ep=1)
        dec_given = layout.decode if split else layout.decode
        if not dec_given.given("p"):
            dec_given = dec_given.completed(p=1)
        for n_pre in range(1, n):
            pres = tuple(_pools(model, n_pre, pre_given, ctx))
            decs = tuple(_pools(model, n - n_pre, dec_given, ctx))
            for pre, dec, b in itertools.product(pres, decs, batches):
                if b % dec.p == 0:
                    yield ServingLayout(dec, pre, b, None, "continuous", weights=layout.weights)
        if split:
            return
    for dec, b, c in itertools.product(_pools(model, n, layout.decode, ctx), batches, chunks):
        if b % dec.p == 0:
            yield ServingLayout(dec, None, b, c, batching, weights=layout.weights)


def _bounds(
    model: Model, acc: Accelerator, layout: ServingLayout, ctx: ServeContext
) -> tuple[float, float]:
    """(TPOT lower bound, output-token rate upper bound) of ``layout`` without a schedule:
    a decode step of a micro-batch reads its weights and KV cache at the peak HBM bandwidth
    and runs its FLOPs at peak, on every stage in turn."""
    dec = layout.decode
    p = decode_step(layout.batch // dec.p, ctx)
    read = pass_weight_read_bytes(model, dec.t, p, dec.ep) + pass_kv_read_bytes(model, dec.t, p)
    # the GEMMs at most at the weight format's tensor rate (fp8: twice bf16 on an H100)
    fmt = weight_recipe(p.weight_format).gemm_format
    peak = acc.peak_flops * max(1.0, acc.format_rate(fmt))
    step = max(read / acc.hbm_bandwidth_bytes_per_s, pass_flops(model, p) / (dec.t * peak))
    lengths = ctx.lengths
    rate = dec.d * layout.batch / lengths.steps / step * lengths.output_tokens
    return step, rate


def _key(point: ServingPoint, objective: Objective) -> tuple:
    """The order among layouts that meet the limits: the objective, then the lower TPOT,
    then the layout's text (a total order)."""
    sc = point.score
    value = -sc.tokens_per_s_per_device if objective == OBJECTIVES[0] else sc.usd_per_million_tokens
    return value, point.engine.tpot_s, str(point.layout)


def search(
    workload: str,
    model: Model,
    acc: Accelerator,
    layout: ServingLayout,
    ctx: ServeContext,
) -> ServingPoint:
    """The best complete layout ``layout`` allows (see the module docstring): meeting the
    latency limits and best by ``ctx.objective``; when none meets them, the one with the
    lowest TPOT (its ``slo`` names what it misses).

    Candidates are tried best bound first; one is skipped when its bound proves it cannot
    win (:func:`_bounds`), so the result is that of evaluating every candidate.

    Raises
    ------
    Infeasible
        No candidate fits the devices' memory (the reason of the last refusal).
    """
    ctx = layout_context(layout, ctx)
    check_weight_format(acc, ctx)
    found: list[tuple[float, float, ServingLayout]] = []
    for cand in candidates(model, layout, ctx):
        try:
            check_layout(model, acc, cand, ctx)
        except ConfigError:
            continue
        tpot_lb, rate_ub = _bounds(model, acc, cand, ctx)
        found.append((rate_ub, tpot_lb, cand))
    if not found:
        raise Infeasible(
            f"no serving layout of {fmt_noun(ctx.cluster.devices, 'device')} suits {model.name} "
            f"(given {layout or 'nothing'})"
        )
    done: dict[ServingLayout, ServingPoint | str] = {}

    def point(cand: ServingLayout) -> ServingPoint | None:
        if cand not in done:
            try:
                done[cand] = evaluate_layout(workload, model, acc, cand, ctx)
            except Infeasible as e:
                done[cand] = e.reason
        got = done[cand]
        return got if isinstance(got, ServingPoint) else None

    limit = ctx.tpot_limit_s
    best: ServingPoint | None = None
    for rate_ub, tpot_lb, cand in sorted(found, key=lambda x: (-x[0], str(x[2]))):
        if limit is not None and tpot_lb > limit:
            continue  # its TPOT cannot meet the limit
        if best is not None and _cannot_win(best, cand, rate_ub, ctx):
            continue
        got = point(cand)
        if (
            got is not None
            and got.meets_slo
            and (best is None or _key(got, ctx.objective) < _key(best, ctx.objective))
        ):
            best = got
    if best is not None:
        return best
    # nothing meets the limits: the lowest TPOT, candidates by their TPOT bound
    closest: ServingPoint | None = None
    for _, tpot_lb, cand in sorted(found, key=lambda x: (x[1], str(x[2]))):
        if closest is not None and tpot_lb >= closest.engine.tpot_s:
            break
        got = point(cand)
        if got is not None and (
            closest is None
            or (got.engine.tpot_s, str(got.layout)) < (closest.engine.tpot_s, str(closest.layout))
        ):
            closest = got
    if closest is None:
        reasons = [r for r in done.values() if isinstance(r, str)]
        raise Infeasible(reasons[-1] if reasons else "nothing fits")
    return closest


def _cannot_win(best: ServingPoint, cand: ServingLayout, rate_ub: float, ctx: ServeContext) -> bool:
    """Does the bound prove that ``cand`` cannot beat ``best`` (which meets the limits)?
    Its throughput per device is at most ``rate_ub`` over its devices; its cost per million
    tokens at least its devices' hours at that rate (no electricity)."""
    if ctx.objective == "tokens_per_s_per_device":
        return rate_ub / cand.devices <= best.score.tokens_per_s_per_device
    cost = job_cost(
        time_to_train_s=1e6 / rate_ub,
        job_energy_j=0.0,
        devices=cand.devices,
        capex=system_capex(best.design, cand.devices, ctx.scoring),
        params=ctx.scoring,
    )
    return cost.tco_usd >= best.score.usd_per_million_tokens
