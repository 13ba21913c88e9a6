"""Optimistic bounds of a design's metrics: never worse than any point it can reach.

The cheap bound (:func:`bounds`) puts every device at peak FLOP/s; the tight one
(:func:`tight_bound`) at the throughput of :func:`iteration_lower_bound_s`, from lower
bounds of layer passes (:mod:`phaze.lower_bounds`). Both charge the least energy any
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
    device_cost_usd,
    embodied_kgco2e,
    static_power_w,
    tech_node,
)
from arch_space.area import mac_pj
from phaze.lower_bounds import pass_bound_s
from phaze.pipeline import Context, Knobs, _fits, _setup, timing_design, tp_widths
from phaze.scoring import electricity_usd, job_carbon, system_cost_usd, tco_usd, training_time_s
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
    return _bound_at(acc, acc.peak_flops, model, ctx)


def tight_bound(acc: Accelerator, model: Model, knobs: Sequence[Knobs], ctx: Context) -> Bound:
    """A tighter optimistic bound than :func:`bounds`, valid for every point of ``acc`` over
    ``knobs``: the throughput of the iteration-time lower bound of
    :func:`iteration_lower_bound_s` (layer passes at their schedule lower bounds spread
    over all devices), when that is below peak FLOP/s. It needs the design's op costs, so
    workers compute it, and only for designs :func:`bounds` does not prune."""
    flops_per_batch = ctx.global_batch * model_flops_per_sequence(model, ctx.seq_len)
    floor_s = iteration_lower_bound_s(model, acc, knobs, ctx)
    rate = acc.peak_flops
    if floor_s > 0:
        rate = min(rate, flops_per_batch / (ctx.cluster.devices * floor_s))
    return _bound_at(acc, rate, model, ctx)


def _bound_at(acc: Accelerator, flops_per_s: float, model: Model, ctx: Context) -> Bound:
    """The bound of ``acc`` when every device does model FLOPs at ``flops_per_s``."""
    fields = _bound_fields(
        flops_per_s,
        _mac_energy_pj(acc),
        static_power_w(acc),
        embodied_kgco2e(acc),
        device_cost_usd(acc),
        model,
        ctx,
    )
    return Bound(**fields)


def _mac_energy_pj(acc: Accelerator) -> float:
    """Energy (pJ) the op model charges every MAC of ``acc``: arithmetic, control, operand
    delivery, and the uncore share of on-die energy."""
    tech = tech_node(acc.node_nm)
    return mac_pj(acc, tech) * (1.0 + tech.overhead_fraction)


def _bound_fields(
    peak_flops: Any,
    mac_energy_pj: Any,
    static_w: Any,
    embodied_kgco2e_per_device: Any,
    device_cost: Any,
    model: Model,
    ctx: Context,
) -> dict[str, Any]:
    """The fields of :class:`Bound` from the device's figures: floats, or numpy arrays of
    many designs' (the same operations in the same order, so the same values).

    Every device does model FLOPs at ``peak_flops`` (the shortest time), and the job's
    energy is only the MACs of those FLOPs plus static power of the devices and the hosts'
    power over that time (the least energy); carbon, tCDP, cost, electricity and cost to
    train are then scoring's own (:func:`phaze.scoring.job_carbon`,
    :func:`phaze.scoring.system_cost_usd`, :func:`phaze.scoring.electricity_usd`,
    :func:`phaze.scoring.tco_usd`), so a bound is optimistic exactly when its inputs are.
    """
    n = ctx.cluster.devices
    flops_per_seq = model_flops_per_sequence(model, ctx.seq_len)
    samples = n * peak_flops / flops_per_seq
    tokens = samples * ctx.seq_len
    setup = TrainingSetup(
        seq_len=ctx.seq_len, global_batch=ctx.global_batch, tokens_to_train=ctx.tokens_to_train
    )
    budget = setup.training_tokens(model.tokens_to_train)
    d = training_time_s(budget, tokens)
    mac_j = budget / ctx.seq_len * flops_per_seq / 2 * mac_energy_pj * 1e-12
    nodes = -(-n // ctx.cluster.devices_per_node)
    job_energy_j = mac_j + (n * static_w + nodes * ctx.scoring.host_w_per_node) * d
    cost = system_cost_usd(n, device_cost, ctx.scoring)
    electricity = electricity_usd(job_energy_j, ctx.scoring)
    tco = tco_usd(
        time_to_train_s=d, electricity_usd=electricity, system_cost_usd=cost, params=ctx.scoring
    )
    carbon = job_carbon(
        time_to_train_s=d,
        job_energy_j=job_energy_j,
        devices=n,
        embodied_kgco2e_per_device=embodied_kgco2e_per_device,
        params=ctx.scoring,
    )
    return {
        "tokens_per_s": tokens,
        "samples_per_s": samples,
        "iteration_s": ctx.global_batch / samples,
        "time_to_train_s": d,
        "system_cost_usd": cost,
        "embodied_kgco2e": carbon.embodied_kgco2e,
        "operational_kgco2e": carbon.operational_kgco2e,
        "total_kgco2e": carbon.total_kgco2e,
        "tcdp": carbon.tcdp,
        "tcdp_kgco2e_days": carbon.tcdp_kgco2e_days,
        "electricity_usd": electricity,
        "tco_usd": tco,
        "tokens_per_usd": budget / tco,
    }


def bound_columns(
    designs: Sequence[Accelerator],
    costs_usd: np.ndarray,
    model: Model,
    ctx: Context,
    signs: Sequence[tuple[str, float]],
) -> list[tuple[np.ndarray, float]]:
    """(values over ``designs``, sign) of each bounded objective, vectorised over designs;
    ``costs_usd`` are the designs' device costs (already known to the caller)."""
    fields = _bound_fields(
        np.array([a.peak_flops for a in designs], dtype=float),
        np.array([_mac_energy_pj(a) for a in designs], dtype=float),
        np.array([static_power_w(a) for a in designs], dtype=float),
        np.array([embodied_kgco2e(a) for a in designs], dtype=float),
        costs_usd,
        model,
        ctx,
    )
    return [(np.broadcast_to(fields[n], (len(designs),)), s) for n, s in signs]


def iteration_lower_bound_s(
    model: Model, acc: Accelerator, knobs: Sequence[Knobs], ctx: Context
) -> float:
    """A lower bound on the iteration time of every point of ``acc`` over ``knobs`` (0 when
    no knob setting fits the HBM at any width), from op costs alone: no schedule, no
    placement.

    Every tensor-parallel layer (every layer at ``t = 1``) holds its ``t`` devices for at
    least the lower bounds of its forward and backward passes
    (:func:`phaze.lower_bounds.pass_bound_s`) per micro-batch, and a pipeline of ``p``
    stages with such layers, replicated ``d`` times, uses ``d p t <= N`` devices; so the
    largest stage load is at least W / p (W: the summed bounds of those layers, of which
    only the most numerous kind is counted, to save op costs) and the iteration, at least
    ``L m / d``, is at least ``W m t / N`` with ``m`` micro-batches.
    Recomputation, boundary transfers, bubbles and all-reduces only add to it.
    """
    timing_acc = timing_design(acc)
    hbm = (acc.hbm_bytes, acc.hbm_bandwidth_bytes_per_s)
    best = math.inf
    for k in knobs:
        setup = _setup(model, ctx, k)
        micro_batches = ctx.global_batch // k.micro_batch
        for t in tp_widths(model, ctx):
            if not _fits(model, setup, t, hbm, ctx):
                continue
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
            best = min(best, work * micro_batches * t / ctx.cluster.devices)
    return 0.0 if math.isinf(best) else best
