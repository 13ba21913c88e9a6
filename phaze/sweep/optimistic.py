"""Optimistic bounds of a design's metrics: never worse than any point it can reach.

The cheap bound (:func:`bounds`) puts every device at peak FLOP/s (in the tensor cores'
fastest format, at the least energy per MAC of any of them); the tight one
(:func:`tight_bound`) at the throughput of :func:`iteration_lower_bound_s`, from lower
bounds of layer passes (:mod:`phaze.model.lower_bounds`). Both charge the least energy any
placement could use; the sweep's rounds prune a design whose bound an evaluated point
dominates.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from arch_space import (
    Accelerator,
    embodied_kgco2e,
    static_power_w,
    tech_node,
)
from arch_space.area import format_mac_pj, with_uncore
from arch_space.tco import DeviceCapex, stack_capex
from phaze.model.lower_bounds import pass_bound_s
from phaze.model.pipeline import (
    Context,
    device_hbm,
    timing_design,
    training_setup,
    variant_keys,
    width_fits,
)
from phaze.model.scoring import score_point, system_capex
from placement import Layout
from placement.iteration import IterationEnergy
from workloads import Model, TrainingSetup, build_layer_graph, model_flops_per_sequence

__all__ = [
    "BOUNDED",
    "Bound",
    "bounds",
    "tight_bound",
    "bound_columns",
    "iteration_lower_bound_s",
]


@dataclass(frozen=True, slots=True)
class Bound:
    """Optimistic (never worse than reachable) metrics of one design for one workload."""

    tokens_per_s: float
    samples_per_s: float
    iteration_s: float
    time_to_train_s: float
    system_cost_usd: float
    embodied_kgco2e: float
    operational_kgco2e: float
    total_kgco2e: float
    tcdp: float
    tcdp_kgco2e_days: float
    electricity_usd: float
    tco_usd: float
    tokens_per_usd: float


# The objectives an optimistic bound exists for: the fields of :class:`Bound`.
BOUNDED: Final = frozenset(f.name for f in dataclasses.fields(Bound))


def bounds(acc: Accelerator, model: Model, ctx: Context) -> Bound:
    """The optimistic bound of every point of ``acc`` on ``model`` (see module docstring).

    Throughput: all devices at peak FLOP/s doing only model FLOPs (MFU = 1). Energy: only
    the MACs of the model FLOPs (with their control, operand delivery and uncore share) plus
    the static power of every device and the hosts of every node over the shortest possible
    time; no memory, network, vector or recompute energy.
    """
    return _bound_at(acc, fastest_flops(acc), model, ctx)


def fastest_flops(acc: Accelerator) -> float:
    """The tensor cores' peak FLOP/s in their fastest format (bf16's for bf16 alone)."""
    return acc.peak_flops * max(rate for _, rate in acc.formats)


def least_mac_energy_pj(acc: Accelerator) -> float:
    """The least energy (pJ, with its uncore share) a MAC costs in any of ``acc``'s formats."""
    tech = tech_node(acc.node_nm)
    return with_uncore(tech, min(format_mac_pj(acc, tech, f) for f in acc.format_names))


def tight_bound(acc: Accelerator, model: Model, knobs: Sequence[Layout], ctx: Context) -> Bound:
    """A tighter optimistic bound than :func:`bounds`, valid for every point of ``acc`` over
    ``knobs``: the throughput of the iteration-time lower bound of
    :func:`iteration_lower_bound_s` (layer passes at their schedule lower bounds spread
    over all devices), when that is below peak FLOP/s. It needs the design's op costs, so
    workers compute it, and only for designs :func:`bounds` does not prune."""
    flops_per_batch = ctx.global_batch * model_flops_per_sequence(model, ctx.seq_len)
    floor_s = iteration_lower_bound_s(model, acc, knobs, ctx)
    rate = fastest_flops(acc)
    if floor_s > 0:
        rate = min(rate, flops_per_batch / (ctx.cluster.devices * floor_s))
    return _bound_at(acc, rate, model, ctx)


def _bound_at(acc: Accelerator, flops_per_s: float, model: Model, ctx: Context) -> Bound:
    """The bound of ``acc`` when every device does model FLOPs at ``flops_per_s``."""
    ctx = dataclasses.replace(ctx, scoring=ctx.scoring.for_accelerator(acc.profile_name))
    fields = _bound_fields(
        flops_per_s,
        least_mac_energy_pj(acc),
        static_power_w(acc),
        embodied_kgco2e(acc),
        system_capex(acc, ctx.cluster.devices, ctx.scoring),
        model,
        ctx,
    )
    return Bound(**fields)


def _bound_fields(
    peak_flops: Any,
    mac_energy_pj: Any,
    static_w: Any,
    embodied_kgco2e_per_device: Any,
    capex: DeviceCapex,
    model: Model,
    ctx: Context,
) -> dict[str, Any]:
    """The fields of :class:`Bound` from the device's figures: floats, or numpy arrays of
    many designs' (the same operations in the same order, so the same values), all in the
    host server of ``ctx.scoring`` (:meth:`~phaze.model.scoring.ScoringParams.for_accelerator`).

    The optimistic inputs go through the pipeline's own scoring
    (:func:`phaze.model.scoring.score_point`): every device does model FLOPs at ``peak_flops``
    (the shortest iteration), and the iteration's energy terms
    (:class:`placement.iteration.IterationEnergy`) are only the MACs of those FLOPs, the
    devices' static power and the hosts' power over that iteration (the least energy), so
    a bound is optimistic exactly when its inputs are (the time lost to restarts is the
    goodput's share of that shortest time, at the devices' static and the hosts' power).
    """
    n = ctx.cluster.devices
    flops_per_batch = ctx.global_batch * model_flops_per_sequence(model, ctx.seq_len)
    iteration_s = flops_per_batch / (n * peak_flops)
    energy = IterationEnergy(
        compute_j=flops_per_batch / 2 * mac_energy_pj * 1e-12,
        memory_j=0.0,
        static_j=n * static_w * iteration_s,
        network_j=0.0,
        idle_j=0.0,
        host_j=ctx.cluster.host_share * ctx.scoring.host_w_per_node * iteration_s,
    )
    setup = TrainingSetup(
        seq_len=ctx.seq_len, global_batch=ctx.global_batch, tokens_to_train=ctx.tokens_to_train
    )
    score = score_point(
        iteration_s=iteration_s,
        global_batch=ctx.global_batch,
        seq_len=ctx.seq_len,
        model_flops_per_batch=flops_per_batch,
        tokens_to_train=float(setup.training_tokens(model.tokens_to_train)),
        devices=n,
        peak_flops_per_device=peak_flops,
        energy=energy,
        capex=capex,
        idle_w_per_device=static_w,
        embodied_kgco2e_per_device=embodied_kgco2e_per_device,
        params=ctx.scoring,
    )
    return {name: getattr(score, name) for name in BOUNDED}


def bound_columns(
    designs: Sequence[Accelerator],
    capex: Sequence[DeviceCapex],
    model: Model,
    ctx: Context,
    signs: Sequence[tuple[str, float]],
) -> list[tuple[np.ndarray, float]]:
    """(values over ``designs``, sign) of each bounded objective, vectorised over the designs
    that share a host server; ``capex`` are the designs' capital costs per device (already
    known to the caller)."""
    hosts = [ctx.scoring.for_accelerator(a.profile_name) for a in designs]
    columns = {n: np.empty(len(designs)) for n, _ in signs}
    for scoring in dict.fromkeys(hosts):
        idx = [i for i, h in enumerate(hosts) if h == scoring]
        group = [designs[i] for i in idx]
        fields = _bound_fields(
            np.array([fastest_flops(a) for a in group], dtype=float),
            np.array([least_mac_energy_pj(a) for a in group], dtype=float),
            np.array([static_power_w(a) for a in group], dtype=float),
            np.array([embodied_kgco2e(a) for a in group], dtype=float),
            stack_capex([capex[i] for i in idx]),
            model,
            dataclasses.replace(ctx, scoring=scoring),
        )
        for n, _ in signs:
            columns[n][idx] = fields[n]
    return [(columns[n], s) for n, s in signs]


def iteration_lower_bound_s(
    model: Model, acc: Accelerator, knobs: Sequence[Layout], ctx: Context
) -> float:
    """A lower bound on the iteration time of every point of ``acc`` over ``knobs`` (0 when
    no knob setting fits the HBM at any width), from op costs alone: no schedule, no
    placement.

    Every tensor-parallel layer (every layer at ``t = 1``) holds its ``t`` devices for at
    least the lower bounds of its forward and backward passes
    (:func:`phaze.model.lower_bounds.pass_bound_s`) per micro-batch, and a pipeline of ``p``
    stages with such layers, replicated ``d`` times, uses ``d p t <= N`` devices; so the
    largest stage load is at least W / p (W: the summed bounds of those layers, of which
    only the most numerous kind is counted, to save op costs) and the iteration, at least
    ``L m / d``, is at least ``W m t / N`` with ``m`` micro-batches.
    Recomputation, boundary transfers, bubbles and all-reduces only add to it. Sequence
    parallelism searched, both settings of each width count (the least bound wins).
    """
    timing_acc = timing_design(acc)
    hbm = device_hbm(acc, ctx)
    best = math.inf
    for k in knobs:
        micro_batches = ctx.global_batch // k.mbs
        for t, sp in variant_keys(model, ctx):
            setup = training_setup(model, ctx, k, sp)
            lg = build_layer_graph(model, setup, t)
            # at t = 1 every stage holds one device, so every layer counts; only the most
            # numerous class (the blocks) is costed: leaving layers out keeps a lower bound
            counts = Counter(x.class_id for x in lg.layers if x.tensor_parallel or t == 1)
            if not counts:
                continue
            cid, n = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
            passes = lg.op_graphs[cid]
            work = n * (
                pass_bound_s(passes.forward, timing_acc, ctx.cluster, ctx.device)
                + pass_bound_s(passes.backward, timing_acc, ctx.cluster, ctx.device)
            )
            floor = work * micro_batches * t / ctx.cluster.devices
            # whether it fits is asked last (a placement search), when it would lower the bound
            if floor < best and width_fits(model, setup, t, hbm, ctx):
                best = floor
    return 0.0 if math.isinf(best) else best
