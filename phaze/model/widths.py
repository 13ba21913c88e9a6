"""The tensor-parallel widths of one evaluation: each width's layer schedules as a placement
stage graph (:func:`width_variant`), whether any placement at a width fits the HBM (from
bytes alone: :func:`width_fits`), and the exact best-first search that schedules only the
widths whose lower bounds could beat the best placement so far (:func:`best_widths`)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from arch_space import Accelerator, Cluster
from arch_space.perf.device import DeviceProfile
from ilp import LayerTiming, PassTiming, layer_timing
from phaze.model.context import Context, SolverSettings
from phaze.model.lower_bounds import (
    bound_graph,
    recompute_workspace_bytes,
    stack_device,
    stage_knobs,
)
from phaze.model.problem import Hbm, placement_problem
from phaze_common.errors import Infeasible
from placement import Placement, PlacementProblem, StageGraph, place
from placement.adapt import TpCollectives, stage_graph, tp_collectives
from placement.interleave import best_interleaved, interleaved_floor
from workloads import Model, TrainingSetup, build_layer_graph

__all__ = [
    "Key",
    "Variant",
    "best_widths",
    "layer_passes",
    "memory_graph",
    "why_no_width_fits",
    "width_fits",
    "width_variant",
    "with_sp",
]

# Relative margin before a width's lower-bound placement time counts as slower than the best:
# the bound and a schedule that meets it can differ by rounding (a few ulps) in floating point.
_BOUND_SLACK: Final = 1e-9


@dataclass(frozen=True, slots=True)
class Variant:
    """One TP width's stage graph, its dynamic energy per micro-batch, all layers, the
    timings of its distinct layer passes and its tensor-parallel collectives per
    micro-batch (:func:`placement.adapt.tp_collectives`, for the iteration's ledger)."""

    graph: StageGraph
    compute_j: float
    memory_j: float
    network_j: float
    passes: tuple[PassTiming, ...]
    tp_collectives: TpCollectives = ()


@lru_cache(maxsize=4096)
def width_variant(
    model: Model,
    setup: TrainingSetup,
    tp: int,
    acc: Accelerator,
    cluster: Cluster,
    solver: SolverSettings,
    device: DeviceProfile | None = None,
) -> Variant:
    """Layer schedules of every distinct layer at width ``tp`` -> a placement stage graph.

    Cached by content: designs differing only in HBM capacity share it.
    """
    lg = build_layer_graph(model, setup, tp)
    timings = layer_timing(
        lg,
        acc,
        cluster,
        solver=solver.name,
        time_limit_s=solver.time_limit_s,
        mip_gap=solver.mip_gap,
        search_nodes=solver.search_nodes,
        device=stack_device(device, acc, setup),
    )
    times = {
        cid: (lt.forward.makespan_s, lt.backward.makespan_s, lt.recompute.makespan_s)
        for cid, lt in timings.items()
    }
    sg = stage_graph(
        lg,
        times,
        **stage_knobs(setup),
        tp_comm_s={
            cid: lt.forward.comm_exposed_s + lt.backward.comm_exposed_s
            for cid, lt in timings.items()
        },
        workspace_bytes=recompute_workspace_bytes(model, setup, lg),
    )
    parts = [0.0, 0.0, 0.0]
    for layer in lg.layers:
        devices = tp if layer.tensor_parallel else 1
        for p in (q for c in layer.classes for q in layer_passes(timings[c])):
            parts[0] += devices * p.compute_j
            parts[1] += devices * p.memory_j
            parts[2] += devices * p.network_j
    passes = tuple(p for lt in timings.values() for p in layer_passes(lt))
    return Variant(sg, *parts, passes, tp_collectives(lg))


def layer_passes(lt: LayerTiming) -> tuple[PassTiming, PassTiming, PassTiming]:
    return lt.forward, lt.backward, lt.recompute


@lru_cache(maxsize=1024)
def memory_graph(model: Model, setup: TrainingSetup, tp: int) -> StageGraph:
    """Width ``tp``'s stage graph with every layer time zero, for memory questions alone:
    its bytes are those of every design's graph at this width (no schedule needed)."""
    lg = build_layer_graph(model, setup, tp)
    return stage_graph(
        lg,
        dict.fromkeys(lg.op_graphs, (0.0, 0.0, 0.0)),
        micro_batch=setup.micro_batch,
        recompute=setup.recompute_mode,
        sequence_parallel=setup.sequence_parallel,
        precision=setup.precision,
        workspace_bytes=recompute_workspace_bytes(model, setup, lg),
    )


@lru_cache(maxsize=4096)
def width_fits(model: Model, setup: TrainingSetup, tp: int, hbm: Hbm, ctx: Context) -> bool:
    """Does some placement at width ``tp`` fit devices with ``hbm``?

    Whether a placement fits depends on bytes, never on layer times, so the zero-time graph
    of :func:`memory_graph` answers for every design with this HBM, without a schedule.
    """
    try:
        place(placement_problem((memory_graph(model, setup, tp),), hbm, ctx, setup))
    except Infeasible:
        return False
    return True


def with_sp(setup: TrainingSetup, sp: bool) -> TrainingSetup:
    return dataclasses.replace(setup, sequence_parallel=sp)


Key = tuple[int, bool]  # a stage graph's (tensor-parallel width, sequence parallelism)


@lru_cache(maxsize=1024)
def why_no_width_fits(
    model: Model, setup: TrainingSetup, keys: tuple[Key, ...], hbm: Hbm, ctx: Context
) -> str:
    """The reason :func:`placement.place` gives when no (width, sp) fits (its reasons are
    about bytes, so the zero-time graphs give the reason of every design's real graphs)."""
    graphs = tuple(memory_graph(model, with_sp(setup, sp), t) for t, sp in keys)
    try:
        place(placement_problem(graphs, hbm, ctx, setup))
    except Infeasible as e:
        return e.reason
    raise AssertionError("no width fits alone, yet one fits among them")


def best_widths(
    model: Model,
    setup: TrainingSetup,
    keys: tuple[Key, ...],
    hbm: Hbm,
    timing_acc: Accelerator,
    ctx: Context,
    beat_s: float = math.inf,
) -> tuple[dict[Key, Variant], Placement | None, bool]:
    """The variants that can hold the fastest placement over ``keys`` (width, sequence
    parallelism), that placement, Megatron's interleaved layouts included, and whether any
    key fits (None when no ``v = 1`` placement fits: an interleaved layout holds at least
    the activations of the ``v = 1`` one with the same degrees). With ``beat_s``, only a
    placement faster than it is asked for: None when there is none (the keys that fit then
    left unscheduled where their bounds show it).

    The keys that fit (:func:`width_fits`, widest first; a key with sequence parallelism off
    is dropped with its width's when it holds at least the same bytes) are scheduled best
    first on lower-bound graphs (no schedule, the real graphs' bytes:
    :func:`phaze.model.lower_bounds.bound_graph`): one search over those not yet scheduled names
    the key that could beat the best ``v = 1`` placement so far (and ``beat_s``), which is
    scheduled next, until that search is slower or finds nothing that fits. Then the
    interleaved layouts of the keys scheduled compete, and a key left out is scheduled when
    its cheapest interleaved layout that may fit (:func:`placement.interleave.interleaved_floor`)
    could beat the best. Placement time never falls when layer times rise, so a key whose
    bound is slower cannot win, and leaving it out changes no result.
    """

    def problem(graphs: tuple[StageGraph, ...]) -> PlacementProblem:
        return placement_problem(graphs, hbm, ctx, setup)

    def plain(graphs: tuple[StageGraph, ...]) -> Placement | None:
        try:
            return place(problem(graphs))
        except Infeasible:
            return None

    def schedule(key: Key) -> StageGraph:
        bounds.pop(key, None)
        t, sp = key
        variants[key] = width_variant(
            model, with_sp(setup, sp), t, timing_acc, ctx.cluster, ctx.solver, ctx.device
        )
        return variants[key].graph

    def limit(best: Placement | None) -> float:
        return min(math.inf if best is None else best.breakdown.iteration_s, beat_s)

    fits = _fitting_keys(model, setup, keys, hbm, ctx)
    if not fits:
        return {}, None, False
    bounds = {
        (t, sp): bound_graph(model, with_sp(setup, sp), t, timing_acc, ctx.cluster, ctx.device)
        for t, sp in fits
    }
    variants: dict[Key, Variant] = {}
    best: Placement | None = None
    while bounds:
        try:
            could = place(problem(tuple(bounds.values())), limit_s=limit(best) * (1 + _BOUND_SLACK))
        except Infeasible:
            break
        alone = plain((schedule((could.layout.t, could.layout.sp)),))
        if alone is not None and alone.breakdown.iteration_s < limit(best):
            best = alone
    if best is None and beat_s == math.inf:
        return variants, None, True
    if len(variants) > 1 and best is not None:
        best = place(problem(tuple(variants[k].graph for k in sorted(variants, key=_sp_first))))
    if variants:
        best = (
            best_interleaved(problem(tuple(v.graph for v in variants.values())), limit(best))
            or best
        )
    while bounds:
        graphs = tuple(bounds.values())
        floor = interleaved_floor(problem(graphs), limit(best) * (1 + _BOUND_SLACK))
        if floor is None:
            break
        graph = schedule((graphs[floor[1]].tp, graphs[floor[1]].sequence_parallel))
        best = best_interleaved(problem((graph,)), limit(best)) or best
    if best is not None and best.breakdown.iteration_s >= beat_s:
        best = None
    return variants, best, True


def _fitting_keys(
    model: Model, setup: TrainingSetup, keys: tuple[Key, ...], hbm: Hbm, ctx: Context
) -> tuple[Key, ...]:
    """The widest key that fits (asked of its bytes alone: cached) and the narrower ones,
    less those with sp off holding at least the bytes of a key that does not fit."""
    order = sorted(keys, reverse=True)
    while order:
        key = order.pop(0)
        if width_fits(model, with_sp(setup, key[1]), key[0], hbm, ctx):
            return (key, *order)
        off = (key[0], False)
        if off in order and _more_bytes(
            memory_graph(model, with_sp(setup, False), key[0]),
            memory_graph(model, with_sp(setup, key[1]), key[0]),
        ):
            order.remove(off)  # needs more bytes than a graph that does not fit
    return ()


def _sp_first(key: Key) -> tuple[int, bool]:
    """Graph order for :func:`placement.place`, whose ties go to the graph given first."""
    return key[0], not key[1]


def _more_bytes(a: StageGraph, b: StageGraph) -> bool:
    """Does every layer of ``a`` hold at least the bytes of ``b``'s (same layers)? Then no
    placement of ``a`` fits where none of ``b`` does (memory grows with each of them)."""
    return len(a.layers) == len(b.layers) and all(
        x.tensor_parallel == y.tensor_parallel
        and x.parameters == y.parameters
        and x.expert_parameters == y.expert_parameters
        and x.stash_bytes >= y.stash_bytes
        and x.workspace_bytes >= y.workspace_bytes
        for x, y in zip(a.layers, b.layers, strict=True)
    )
