"""The search for the serving layout that meets a latency target (docs/serving.md).

:func:`search` picks, among the layouts a partial one leaves open (tensor, pipeline and
expert parallelism, replicas, batch, chunked prefill, a disaggregated split), the one that
meets the TTFT and TPOT limits and maximises output tokens per second per device (or
minimises $ per million tokens), each candidate priced by
:func:`phaze.model.serving.evaluate_layout`. It skips, exactly, every candidate whose bound cannot
win: a decode step reads at least its weights and KV cache at the peak HBM bandwidth and
runs at least its FLOPs at peak (so TPOT is at least that, and throughput at most the batch
over it; both bounds grow with the batch), and costs at least its devices' hours at that
throughput. A partial layout that contradicts the model or the devices is refused first
(:func:`check_strategy`), as ``phaze evaluate`` refuses a training strategy.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import Final

from arch_space import Accelerator
from phaze.model.lower_bounds import beyond_all_hbm
from phaze.model.scoring import job_cost, system_capex
from phaze.model.serving import (
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
from phaze_common.units import fmt_count, fmt_noun
from placement.layout import Layout
from placement.serving_layout import ServingLayout, pool_layout
from workloads import Model
from workloads.build import tp_width_problems, valid_tp_widths
from workloads.serving import weight_recipe
from workloads.serving_costs import (
    pass_flops,
    pass_kv_read_bytes,
    pass_weight_read_bytes,
    stage_weight_bytes,
)

__all__ = ["candidates", "check_strategy", "check_strategy_model", "ranked", "search"]

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


def _pool_problems(model: Model, name: str, pool: Layout) -> list[str]:
    """What keeps the degrees ``pool`` fixes from suiting ``model`` (``name``: the pool's
    label in messages, '' for one pool)."""
    problems = []
    if pool.given("t") and (bad := tp_width_problems(model, pool.t)):
        widths = ", ".join(map(str, valid_tp_widths(model)))
        problems.append(
            f"{name}t = {pool.t} must divide {' and '.join(bad)} of {model.name} "
            f"(allowed: {widths})"
        )
    if pool.given("ep") and pool.ep > 1 and not model.is_moe:
        problems.append(
            f"{name}ep = {pool.ep} needs a mixture-of-experts model; {model.name} is dense "
            "(allowed: ep = 1)"
        )
    elif pool.given("ep") and model.experts % pool.ep:
        allowed = ", ".join(str(e) for e in _degrees(model.experts, model.experts))
        problems.append(
            f"{name}ep = {pool.ep} must divide the {model.experts} routed experts of "
            f"{model.name} (allowed: {allowed})"
        )
    if pool.given("p") and pool.p > model.layers:
        problems.append(f"{name}p = {pool.p} must be at most the {model.layers} blocks")
    return problems


def _fixed_devices(pool: Layout) -> tuple[str, int]:
    """(the degrees ``pool`` fixes spelled ``t x d``, the devices they need at least)."""
    given = [(f, getattr(pool, f)) for f in ("t", "p", "d") if pool.given(f)]
    return " x ".join(f"{f}={v}" for f, v in given), math.prod(v for _, v in given)


def _device_problems(layout: ServingLayout, n: int) -> list[str]:
    """What keeps the pools' fixed degrees from fitting the cluster's ``n`` devices."""
    if layout.prefill is None:
        spelled, need = _fixed_devices(layout.decode)
        if need > n:
            return [f"{spelled} needs {need} devices per pool; {n} given"]
        if all(layout.decode.given(f) for f in ("t", "p", "d")) and need != n:
            return [f"{spelled} uses {need} devices; one pool uses all {n} given"]
        if n % need:
            return [f"{spelled} needs a multiple of {need} devices (replicas use all); {n} given"]
        return []
    if n < 2:
        return [f"two pools (prefill and decode) need at least 2 devices; {n} given"]
    (pre, pre_need), (dec, dec_need) = map(_fixed_devices, (layout.prefill, layout.decode))
    if pre_need + dec_need > n:
        return [
            f"prefill {pre or 'pool'} and decode {dec or 'pool'} need {pre_need + dec_need} "
            f"devices; {n} given"
        ]
    return []


def _model_problems(model: Model, layout: ServingLayout, ctx: ServeContext) -> list[str]:
    """What in the partial ``layout`` contradicts ``model`` or ``ctx`` whatever the devices."""
    problems = []
    if not model.causal:
        problems.append(f"{model.name} is an encoder; serving generates tokens with a decoder")
    if layout.prefill is not None and not ctx.disaggregate:
        problems.append(
            f"the strategy {layout} gives a prefill pool and a decode pool, but disaggregate "
            "is off (--no-disaggregate: one pool); drop one or the other"
        )
    pools = [("", layout.decode)]
    if layout.prefill is not None:
        pools = [("prefill ", layout.prefill), ("decode ", layout.decode)]
    for name, pool in pools:
        problems += _pool_problems(model, name, pool)
    dec = layout.decode
    if layout.given("batching") and layout.batching == "static" and dec.given("p") and dec.p > 1:
        problems.append(f"static batching runs one pipeline stage (p = 1), not p = {dec.p}")
    if layout.given("batch") and dec.given("p") and layout.batch % dec.p:
        problems.append(
            f"batch = {layout.batch} must be a multiple of p = {dec.p} (one micro-batch per "
            "pipeline stage)"
        )
    return problems


def check_strategy_model(model: Model, layout: ServingLayout, ctx: ServeContext) -> None:
    """Raise one ConfigError naming every way the partial ``layout`` contradicts ``model``
    or ``ctx`` whatever the device count (a search over counts checks these once)."""
    problems = _model_problems(model, layout, ctx)
    if problems:
        raise ConfigError(f"serve {model.name}: " + "; ".join(problems))


def check_strategy(model: Model, layout: ServingLayout, ctx: ServeContext) -> None:
    """Raise one ConfigError naming every way the partial ``layout`` (a user's strategy)
    contradicts ``model``, the cluster or ``ctx`` (an encoder, a width that does not divide
    the heads, expert parallelism on a dense model, pools larger than the devices, two pools
    where ``ctx`` asks for one, a batch the pipeline cannot split, no complete layout left);
    what remains open is for the search."""
    n = ctx.cluster.devices
    problems = _model_problems(model, layout, ctx) + _device_problems(layout, n)
    if not problems and next(candidates(model, layout, ctx), None) is None:
        problems.append(
            f"no serving layout of {fmt_noun(n, 'device')} keeps {layout}: each pool's t x p x d must use "
            f"its devices, t one of {', '.join(map(str, valid_tp_widths(model)))}, p one of "
            f"1, 2, 4, {_MAX_STAGES}, ep dividing d"
        )
    if problems:
        raise ConfigError(f"serve {model.name} on {fmt_noun(n, 'device')}: " + "; ".join(problems))


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


def _found(
    model: Model, acc: Accelerator, layout: ServingLayout, ctx: ServeContext
) -> list[tuple[float, float, ServingLayout]]:
    """Every candidate that fits, with its (output-token rate upper bound, TPOT lower bound);
    ConfigError with the last refusal when none does."""
    found: list[tuple[float, float, ServingLayout]] = []
    refused = ""
    for cand in candidates(model, layout, ctx):
        try:
            check_layout(model, acc, cand, ctx)
        except ConfigError as e:
            refused = str(e)
            continue
        tpot_lb, rate_ub = _bounds(model, acc, cand, ctx)
        found.append((rate_ub, tpot_lb, cand))
    if not found:
        raise ConfigError(
            f"no serving layout of {fmt_noun(ctx.cluster.devices, 'device')} suits {model.name} "
            f"(given {layout or 'nothing'}){': ' + refused if refused else ''}"
        )
    return found


def _prepared(
    model: Model, acc: Accelerator, layout: ServingLayout, ctx: ServeContext
) -> tuple[ServeContext, list[tuple[float, float, ServingLayout]]]:
    """The checks :func:`search` and :func:`ranked` make first, and their candidates."""
    ctx = layout_context(layout, ctx)
    check_weight_format(acc, ctx)
    check_strategy(model, layout, ctx)
    _check_weights_fit(model, acc, ctx)
    return ctx, _found(model, acc, layout, ctx)


def _best(
    evaluate,
    found: list[tuple[float, float, ServingLayout]],
    ctx: ServeContext,
    keep: int,
    min_requests_per_s: float,
) -> list[ServingPoint]:
    """The ``keep`` best points meeting the limits and serving at least
    ``min_requests_per_s``, best first; candidates whose bound proves they cannot enter
    are skipped."""
    limit = ctx.tpot_limit_s
    top: list[ServingPoint] = []
    for rate_ub, tpot_lb, cand in sorted(found, key=lambda x: (-x[0], str(x[2]))):
        if limit is not None and tpot_lb > limit:
            continue  # its TPOT cannot meet the limit
        if rate_ub < min_requests_per_s * ctx.lengths.output_tokens:
            continue  # it cannot serve the requests as fast
        if len(top) == keep and _cannot_win(top[-1], cand, rate_ub, ctx):
            continue
        got = evaluate(cand)
        if got is None or not got.meets_slo or got.engine.requests_per_s < min_requests_per_s:
            continue
        top = sorted([*top, got], key=lambda p: _key(p, ctx.objective))[:keep]
    return top


def ranked(
    workload: str,
    model: Model,
    acc: Accelerator,
    layout: ServingLayout,
    ctx: ServeContext,
    *,
    keep: int,
    min_requests_per_s: float = 0.0,
) -> list[ServingPoint]:
    """The ``keep`` best complete layouts ``layout`` allows that meet the latency limits and
    serve at least ``min_requests_per_s`` requests per second in steady state, best by
    ``ctx.objective`` first (empty when none does); raises as :func:`search` does."""
    ctx, found = _prepared(model, acc, layout, ctx)

    def evaluate(cand: ServingLayout) -> ServingPoint | None:
        try:
            return evaluate_layout(workload, model, acc, cand, ctx)
        except Infeasible:
            return None

    return _best(evaluate, found, ctx, keep, min_requests_per_s)


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
    ConfigError
        ``layout`` contradicts the model, the cluster or ``ctx`` (:func:`check_strategy`).
    Infeasible
        The model's weights exceed all the devices' HBM together; or no candidate fits the
        devices' memory (the reason of the last refusal).
    """
    ctx, found = _prepared(model, acc, layout, ctx)
    done: dict[ServingLayout, ServingPoint | str] = {}

    def point(cand: ServingLayout) -> ServingPoint | None:
        if cand not in done:
            try:
                done[cand] = evaluate_layout(workload, model, acc, cand, ctx)
            except Infeasible as e:
                done[cand] = e.reason
        got = done[cand]
        return got if isinstance(got, ServingPoint) else None

    best = _best(point, found, ctx, 1, 0.0)
    if best:
        return best[0]
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


def _check_weights_fit(model: Model, acc: Accelerator, ctx: ServeContext) -> None:
    """Raise Infeasible, before any layout is tried, when the whole model's weights in the
    requests' weight format exceed the HBM of all the cluster's devices together."""
    r = ctx.requests
    weights = sum(stage_weight_bytes(model, 1, 1, 1, r.precision_bytes, r.weight_format))
    what = (
        f"the weights of {model.name} alone ({fmt_count(model.parameters)} parameters, "
        f"{r.weight_format})"
    )
    problem = beyond_all_hbm(what, weights, ctx.cluster.devices, acc.hbm_bytes)
    if problem:
        raise Infeasible(problem)


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
