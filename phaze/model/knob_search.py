"""The training knobs a user left open, searched: micro-batch size and recompute mode.

:func:`phaze.model.pipeline.evaluate` finds the best placement (t, p, d, ZeRO stage, v, and
sequence parallelism when the context leaves it open) at one micro-batch size and recompute
mode, scheduling layers for it (the costly step). Here each
open (micro-batch, recompute) pair first gets a lower bound on its time with no schedule
(:func:`time_lower_bound_s`); pairs are evaluated in the order of their
bounds, and those whose bound cannot beat the best so far are skipped, which changes no
result; a pair evaluated after the first is asked only for a placement faster than the best
so far, so its widths whose bounds are slower are not scheduled either. Micro-batch sizes
divide the global batch, so ``d * mbs`` always does too. Under a strategy that fixes a
layout field (not just the precision) and leaves the micro-batch or recompute mode open,
every pair is evaluated in full (the bound covers the search's layouts, not every layout a
strategy may name), and the micro-batch sizes are those that ``d * mbs`` divides the batch
with for the strategy's ``d``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from arch_space import Accelerator
from arch_space.formats import check_precision
from phaze.model.context import MICRO_BATCHES
from phaze.model.lower_bounds import bound_graph
from phaze.model.pipeline import (
    Context,
    Evaluation,
    device_hbm,
    evaluate,
    placement_problem,
    timing_design,
    training_setup,
    variant_keys,
)
from phaze_common.errors import ConfigError, Infeasible
from placement import place
from placement.interleave import best_interleaved
from placement.layout import Layout
from workloads import Model
from workloads.recompute_modules import RECOMPUTE_WORDS

__all__ = ["RECOMPUTES", "evaluate_best_knobs", "time_lower_bound_s"]

RECOMPUTES = RECOMPUTE_WORDS


def evaluate_best_knobs(
    workload: str,
    model: Model,
    acc: Accelerator,
    ctx: Context,
    *,
    micro_batches: Sequence[int] = MICRO_BATCHES,
    recomputes: Sequence[str] = RECOMPUTES,
    strategy: Layout | None = None,
) -> Evaluation:
    """The fastest evaluation over ``micro_batches`` (those dividing the global batch) x
    ``recomputes``, keeping what ``strategy`` fixes (its micro-batch and recompute mode
    open); when none fits, the evaluation of the pair with the lowest bound (its
    reason says why). Ties go to the pair with the lower bound, then the one listed first.
    Raises ConfigError when no micro-batch size divides the global batch."""
    d = 1 if strategy is None or not strategy.given("d") else strategy.d
    # a fixed interleaved layout runs each pipeline's micro-batches in groups of p
    # (Megatron-LM's interleaved schedule), so only the sizes giving such counts are tried
    group = (
        strategy.p
        if strategy is not None
        and strategy.v > 1
        and all(strategy.given(k) for k in ("p", "d", "v"))
        else 1
    )
    asked = strategy or Layout.searching()

    def knobs(mb: int, rc: str) -> Layout:
        return asked.completed(mbs=mb, recompute=rc)

    grid = [
        knobs(mb, rc)
        for mb in micro_batches
        if ctx.global_batch % (mb * d) == 0 and (ctx.global_batch // (mb * d)) % group == 0
        for rc in recomputes
    ]
    if not grid and strategy is None:
        raise ConfigError(
            f"micro_batches = {list(micro_batches)}: none divides global_batch = {ctx.global_batch}"
        )
    if not grid:  # the strategy's own check names d and mbs
        grid = [knobs(micro_batches[0], rc) for rc in recomputes]
    bounds = sorted((time_lower_bound_s(model, acc, k, ctx), i, k) for i, k in enumerate(grid))
    # a strategy fixing no layout field (a precision at most) asks for the search itself
    searched = asked.open == Layout.searching().open and asked.split is None
    best: Evaluation | None = None
    first: Evaluation | None = None
    for bound, _, point in bounds:
        beat_s = math.inf if best is None else best.placement.breakdown.iteration_s
        if searched and best is not None and bound >= beat_s:
            break
        ev = evaluate(workload, model, acc, point, ctx, beat_s if searched else math.inf)
        first = first or ev
        if ev.feasible and (
            best is None
            or ev.placement.breakdown.iteration_s < best.placement.breakdown.iteration_s
        ):
            best = ev
    assert first is not None, "the pair with the lowest bound is always evaluated"
    return best or first


def time_lower_bound_s(model: Model, acc: Accelerator, knobs: Layout, ctx: Context) -> float:
    """A lower bound on the time per batch :func:`phaze.model.pipeline.evaluate` finds at ``knobs`` (inf when
    nothing can fit), with no layer schedule: the search, interleaving included, over the
    lower-bound graphs of every width (:func:`phaze.model.lower_bounds.bound_graph`) and every ZeRO
    stage ``ctx`` allows. Placement time never falls when layer times rise."""
    setup = training_setup(model, ctx, knobs, acc=acc)
    check_precision(acc, knobs.precision)
    if ctx.global_batch % knobs.mbs:
        return float("inf")
    timing_acc = timing_design(acc)
    graphs = tuple(
        bound_graph(
            model,
            dataclasses.replace(setup, sequence_parallel=sp),
            t,
            timing_acc,
            ctx.cluster,
            ctx.device,
        )
        for t, sp in variant_keys(model, ctx)
    )
    if not graphs:
        return float("inf")
    every = dataclasses.replace(ctx, zero_stages=ctx.zero_stages + ctx.zero_fallback)
    hbm = device_hbm(acc, ctx)
    problem = placement_problem(graphs, hbm, every, setup)
    try:
        best = place(problem).breakdown.iteration_s
    except Infeasible:
        return float("inf")
    interleaved = best_interleaved(problem, best)
    return best if interleaved is None else interleaved.breakdown.iteration_s
