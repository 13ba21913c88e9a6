"""Search the best placement: every graph variant through the DP, the fastest wins.

For each :class:`StageGraph` (a tensor-parallel width, micro-batch size and recompute
mode) and each ZeRO stage the problem allows, the DP of :mod:`placement.dp` finds the
stages, devices per stage and data-parallel degree ``d`` (dividing ``m``) minimising

    time per batch = L * (m/d + p - 1) + dp_comm(d, first stage) + optimizer(first stage)

with ``L`` the largest stage load per micro-batch (including its boundary transfers), ``m``
the micro-batches per iteration and ``p`` the stages: the iteration model of
:mod:`placement.iteration` at ``v = 1``, which also prices the chosen placement. The optimizer
step follows the data-parallel collectives on every device (the first stage, which also holds the
embedding, is taken as the slowest). Both tail terms grow with the first stage's parameters,
which is what the DP's final round needs to stay exact. Chains take the fast path (intervals
and prefix sums); other DAGs enumerate downsets. Both give the same optimum.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from phaze_common.errors import ConfigError, Infeasible
from phaze_common.units import fmt_bytes, fmt_noun, fmt_pair
from placement import network as net
from placement.chunks import chunk_split
from placement.costs import (
    LayerArrays,
    MemoryLimit,
    StageFigures,
    phaze_costs,
    stage_layers,
)
from placement.dp import DpSolution, DpTask, SegmentCosts
from placement.dp_comm import embedding_allreduce_s, shard_unit, sharded_parameters, tail_fn
from placement.dp_order import solve_many
from placement.ep_cp import Variant, variants
from placement.iteration import assemble, stage_memory, zero_state
from placement.pipelining import in_flight, micro_batches_per_pipeline, pipeline_s
from placement.types import Placement, PlacementProblem, Stage, StageGraph

__all__ = ["Method", "place", "layer_arrays", "gib", "dp_tasks"]

logger = logging.getLogger(__name__)

Method = Literal["auto", "chain", "dag"]


def gib(nbytes: float) -> str:
    """Bytes for messages, by the one formatter: ``gib(100e9) == '93.1 GiB'``,
    ``gib(2**20) == '1 MiB'``, ``gib(380) == '380 B'``."""
    return fmt_bytes(nbytes)


def layer_arrays(graph: StageGraph | Variant) -> LayerArrays:
    """The per-layer figures of ``graph`` as read-only numpy arrays (params as counts)."""
    v = graph if isinstance(graph, Variant) else Variant.of(graph)
    c = v.columns

    def arr(values, dtype=np.float64) -> np.ndarray:
        a = np.array(values, dtype=dtype)
        a.setflags(write=False)
        return a

    return LayerArrays(
        fwd=arr(c["fwd_s"]),
        bwd=arr(c["bwd_s"]),
        rec=arr(c["recompute_s"]),
        params=arr(c["parameters"]),
        stash=arr(c["stash_bytes"]),
        workspace=arr(c["workspace_bytes"]),
        tp=arr(c["tensor_parallel"], bool),
        sharded_params=arr(
            sharded_parameters(c["parameters"], c["expert_parameters"], v.ep) / v.cp
        ),
        tied=arr(c["tied_parameters"]),
        sharded_tied=arr(c["tied_parameters"] / v.cp),
        src=arr([e[0] for e in v.edges], np.int64),
        dst=arr([e[1] for e in v.edges], np.int64),
        nbytes=arr([e[2] for e in v.edges]),
        is_chain=v.is_chain,
    )


def _max_stages(problem: PlacementProblem, graph: Variant, devices: int) -> int:
    """At most one stage per layer and per device (per t devices when every layer is TP)."""
    tp = graph.columns["tensor_parallel"]
    per_stage = graph.tp if tp.all() else 1
    cap = min(tp.size, devices // per_stage)
    if problem.max_stages is not None:
        cap = min(cap, problem.max_stages)
    return cap


def dp_tasks(
    problem: PlacementProblem, graph: StageGraph | Variant, method: Method, devices: int
) -> list[tuple[DpTask, Callable[[], StageFigures], int]]:
    """The DP tasks of one graph on at most ``devices`` devices (which set the p2p link),
    one per ZeRO stage the problem allows: (task, its stages' figures, stage). A
    context-parallel graph has ``devices / cp`` for its pipelines and data-parallel
    replicas.

    The candidate stages are worked out once for the graph, and only when a task needs them
    (:attr:`DpTask.build`): the lower bounds read the layers alone, so a graph they rule out
    costs no stage figures.
    """
    if not isinstance(graph, Variant):
        graph = Variant.of(graph)
    la = layer_arrays(graph)
    if method == "chain" and not la.is_chain:
        raise ConfigError(
            f"placement: method = 'chain' needs a chain layer graph (tp={graph.tp} is not "
            "one); use 'auto' or 'dag'"
        )
    chain = la.is_chain if method == "auto" else method == "chain"
    s_max = _max_stages(problem, graph, devices // graph.cp)

    @functools.cache
    def stages() -> tuple[SegmentCosts, StageFigures, tuple[MemoryLimit, ...]]:
        bw, lat = net.boundary_link(
            problem.cluster,
            devices,
            graph.tp,
            graph.sequence_parallel,
            problem.collectives,
            float(la.nbytes.max(initial=0.0)),
            problem.p2p_sends,
            problem.p2p_gathers,
        )
        return phaze_costs(
            la,
            chain=chain,
            p2p_bandwidth=bw,
            p2p_latency_s=lat,
            hbm_bytes=problem.hbm_bytes,
            state_bytes_per_parameter=problem.state_bytes_per_parameter,
            max_stages=s_max,
            zero_stages=problem.zero_stages,
            optimizer_bytes_per_parameter=problem.optimizer_bytes_per_parameter,
            weight_bytes_per_parameter=problem.weight_bytes_per_parameter,
            p2p_overlap=problem.overlaps_p2p(1),
            # the first and the last stage are as far apart as the stage boundaries
            tied_comm=lambda n: embedding_allreduce_s(
                problem, problem.cluster.spans_nodes(devices), n
            ),
        )

    m = problem.global_batch // graph.micro_batch
    # a first stage is a nonempty downset: it holds a source layer at least
    sources = np.setdiff1d(np.arange(la.n), la.dst)
    first = float(la.params[sources].min(initial=np.inf)) if sources.size else 0.0
    # what ZeRO shards over d (placement.iteration.stage_memory), over cp as well
    cols = graph.columns
    shards = float(
        sum(sharded_parameters(cols["parameters"], cols["expert_parameters"], graph.ep).tolist())
    )
    out = []
    for k, zero in enumerate(problem.zero_stages):
        unit = shard_unit(graph.base, graph.columns)
        tail = tail_fn(problem, graph.tp, zero, m, cp=graph.cp, unit=unit)
        inputs = _BoundInputs(problem, graph, la, shards, zero, s_max, devices // graph.cp, tail)
        stub = DpTask(
            None,
            t=graph.tp,
            max_stages=s_max,
            max_devices=devices // graph.cp,
            micro_batches=m,
            tail=tail,
            bound=_time_bound(inputs, first),
            d_multiple=graph.ep,
            sharper=_prefix_bound(inputs) if la.is_chain else None,
            sharded=zero_state(
                problem.state_bytes_per_parameter,
                zero,
                problem.optimizer_bytes_per_parameter,
                problem.weight_bytes_per_parameter,
            )[1]
            > 0,
        )
        out.append(
            (replace(stub, build=functools.cache(functools.partial(_built, stub, stages, k))), zero)
        )
    return [(task, lambda: stages()[1], zero) for task, zero in out]


def _built(
    stub: DpTask,
    stages: Callable[[], tuple[SegmentCosts, StageFigures, tuple[MemoryLimit, ...]]],
    k: int,
) -> DpTask:
    """``stub`` with the graph's stages and the memory limits of its ``k``-th ZeRO stage."""
    costs, _, limits = stages()
    limit = limits[k]
    if limit.max_s is not None:
        costs = replace(costs, max_s=limit.max_s)
    return replace(stub, costs=costs, max_s_at=limit.max_s_at)


@dataclass(frozen=True, slots=True)
class _BoundInputs:
    """What both lower bounds on a (graph, ZeRO stage) task read: ``shards`` counts the
    parameters whose state ZeRO shards over ``d * cp``; ``devices`` are those one cp group
    may use; ``tail`` is the iteration's tail at (d, first-stage parameters)."""

    problem: PlacementProblem
    graph: Variant
    la: LayerArrays
    shards: float
    zero: int
    s_max: int
    devices: int
    tail: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def _fields(b: _BoundInputs) -> tuple:
    return (b.problem, b.graph, b.la, b.shards, b.zero, b.s_max, b.devices, b.tail)


def _time_bound(b: _BoundInputs, first_params: float) -> Callable[[np.ndarray], np.ndarray]:
    """A lower bound on the time of any placement of ``graph`` at each degree of ``ds``.

    With ``s`` stages the bottleneck load is at least the layers' work over ``s`` and at
    least the largest layer; ``s`` is at most what ``devices / d`` allows (a stage without a
    tensor-parallel layer takes one device) and at least the stages whose memory holds
    every parameter's state; the tail is at least that of a first stage holding what the
    other ``s - 1`` stages cannot (each holds at most a device's memory of state), and at
    least ``first_params``, the fewest parameters a first stage can have. ``shards`` counts
    the parameters whose state ZeRO shards over ``d * cp``.
    """
    problem, graph, la, shards, zero, s_max, devices, tail = _fields(b)
    work = la.fwd + la.bwd + la.rec
    total, largest = float(work.sum()), float(work.max())
    t, m = graph.tp, problem.global_batch // graph.micro_batch
    n_one = int((~la.tp).sum()) if t > 1 else 0
    replicated, sharded, _ = zero_state(
        problem.state_bytes_per_parameter,
        zero,
        problem.optimizer_bytes_per_parameter,
        problem.weight_bytes_per_parameter,
    )
    params = float(la.params.sum())
    shards = shards / graph.cp  # what ZeRO shards over d

    stages = np.arange(1, s_max + 1)[None, :]
    load = np.maximum(total / stages, largest)

    def bound(ds: np.ndarray) -> np.ndarray:
        per = (devices // ds)[:, None]
        s_hi = np.minimum(s_max, np.where(per <= n_one, per, n_one + (per - n_one) // t))
        s_lo = np.ceil((params * replicated + shards * sharded / ds[:, None]) / problem.hbm_bytes)
        # each parameter takes at least this on a device (its shard spreads over d * cp at most)
        state = replicated + sharded / (ds[:, None] * graph.cp)
        ok = (stages >= s_lo) & (stages <= s_hi)
        # the other s - 1 stages hold at most what fits a device: the rest is the first's
        with np.errstate(divide="ignore"):
            first = np.maximum(first_params, params - (stages - 1) * problem.hbm_bytes / state)
        pipeline = pipeline_s(load, micro_batches_per_pipeline(m, ds)[:, None], stages)
        return np.where(ok, pipeline + tail(ds[:, None], first, load), np.inf)

    return bound


def _prefix_bound(b: _BoundInputs) -> Callable[..., np.ndarray]:
    """A sharper lower bound than :func:`_time_bound` for a chain, at more cost per cell.

    The first stage of a chain is a prefix ``[0, j)``; with ``s`` stages the bottleneck load
    is at least the prefix's work and at least the rest's work over ``s - 1``, while the
    tail grows with the prefix's parameters, so each prefix is priced with both. Each of the
    other ``s - 1`` stages holds a layer at least and at most a device's memory of state.
    Only the (degree, stage count) cells ``live`` marks are worked out (None: all); the
    others are -inf. Its figures are only computed when it is called (most tasks never need
    it).
    """
    problem, graph, la, shards, zero, s_max, devices, tail = _fields(b)

    def bound(ds: np.ndarray, live: np.ndarray | None = None) -> np.ndarray:
        work = np.cumsum(la.fwd + la.bwd + la.rec)
        total, largest = float(work[-1]), float((la.fwd + la.bwd + la.rec).max())
        held = np.cumsum(la.params)  # parameters of prefix [0, j) at index j - 1
        n, t, m = work.size, graph.tp, problem.global_batch // graph.micro_batch
        n_one = int((~la.tp).sum()) if t > 1 else 0
        replicated, sharded, _ = zero_state(
            problem.state_bytes_per_parameter,
            zero,
            problem.optimizer_bytes_per_parameter,
            problem.weight_bytes_per_parameter,
        )
        j = np.arange(1, n + 1)[None, :]
        per = (devices // ds)[:, None]
        s_hi = np.minimum(s_max, np.where(per <= n_one, per, n_one + (per - n_one) // t))
        state = replicated + sharded / (ds * graph.cp)  # the least bytes of a parameter
        whole = held[-1] * replicated + shards * sharded / (ds[:, None] * graph.cp)
        s_lo = np.maximum(1, np.ceil(whole / problem.hbm_bytes))
        stages = np.arange(1, s_max + 1)[None, :]
        inside = (stages >= s_lo) & (stages <= s_hi)  # what the devices and memory allow
        if live is None:
            out = np.full((ds.size, s_max), np.inf)
        else:
            out = np.where(live & ~inside, np.inf, -np.inf)
            inside &= live
        which, s0 = np.nonzero(inside)  # one row per (degree, stage count) cell
        if which.size == 0:
            return out
        s, d = (s0 + 1)[:, None], ds[which][:, None]
        # the bottleneck load depends on the stage count alone: once per count, not per row
        counts_s = np.arange(1, int(s.max()) + 1)[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            rest = np.where(counts_s > 1, (total - work[None, :]) / (counts_s - 1), np.inf)
            cap = problem.hbm_bytes / state[which][:, None]
        by_s = np.maximum(np.maximum(work[None, :], rest), largest)
        by_s = np.where(counts_s == 1, np.where(j == n, total, np.inf), by_s)
        # the other s - 1 stages need a layer each: a longer prefix takes an infinite load
        load = np.where(j <= n - (counts_s - 1), by_s, np.inf)[s0]
        fits = held[None, :] >= held[-1] - (s - 1) * cap
        if problem.sharded_prefetch:  # the tail falls as the load hides more collectives
            after = tail(d, held[None, :], load)
        else:  # the tail depends on the degree alone: price it once per degree
            after = tail(ds[:, None], held[None, :], 0.0)[which]
        time = pipeline_s(load, micro_batches_per_pipeline(m, d), s) + after
        out[which, s0] = np.where(fits, time, np.inf).min(axis=1)
        return out

    return bound


def place(
    problem: PlacementProblem, *, method: Method = "auto", limit_s: float = math.inf
) -> Placement:
    """The fastest placement over all graph variants of ``problem``; with ``limit_s``, only
    when it is not slower (else Infeasible, with no reason worked out: a search that only
    asks whether some placement beats a time).

    ``method`` forces the chain fast path or the general downset DP (for tests and the
    benchmark); "auto" takes the fast path for chains. Ties go to the smaller ``tp``, then
    ``d``, then ``p``, then the variant given first. Raises :class:`Infeasible` with the reason
    of the variant that came closest to fitting when none fits.

    Stage boundaries use inter-node links when the job spans nodes. A second, small DP keeps
    every job inside one node (intra-node links) for the variants whose one-node lower bound
    ``m * sum(layer times) / devices_per_node`` could beat the best so far, so adding devices
    never makes the answer worse. The DP prices 1F1B, so a ``dualpipe`` problem is searched
    (and its placement priced) as 1F1B: DualPipe is priced layout by layout
    (:func:`placement.fixed.evaluate_fixed`).
    """
    start = time.perf_counter()
    if problem.dualpipe:
        problem = replace(problem, dualpipe=False)
    cl = problem.cluster
    graphs = variants(problem)
    found, reasons = _run(problem, list(enumerate(graphs)), method, cl.devices, limit_s)
    if cl.devices > cl.devices_per_node and (found or limit_s < math.inf):
        best = min((f[0][0] for f in found), default=limit_s)
        todo = [(i, g) for i, g in enumerate(graphs) if _one_node_bound(problem, g) < best]
        found += _run(problem, todo, method, cl.devices_per_node, limit_s)[0]
    logger.debug(
        "placed %d variants in %.1f ms", len(problem.graphs), 1e3 * (time.perf_counter() - start)
    )
    found = [f for f in found if f[0][0] <= limit_s]
    if not found:
        raise Infeasible(min(reasons)[1] if reasons else f"no placement within {limit_s} s")
    _, graph, sol, costs, figures, zero = min(found, key=lambda f: f[0])
    return _placement(problem, graph.graph, sol, costs, figures, zero)


def _run(
    problem: PlacementProblem,
    todo: list[tuple[int, Variant]],
    method: Method,
    devices: int,
    limit_s: float = math.inf,
) -> tuple[list[tuple], list[tuple[float, str]]]:
    """Solve the variants ``todo`` on at most ``devices`` devices (skipping what cannot be
    faster than ``limit_s``).

    Returns the solutions as (key, graph, solution, costs, figures) and, when there is none
    (and no limit), why each variant does not fit: (bytes needed, reason).
    """
    reasons = [
        (math.inf, _too_wide(problem, g))
        for _, g in todo
        if _max_stages(problem, g, devices // g.cp) < 1
    ]
    todo = [(i, g) for i, g in todo if _max_stages(problem, g, devices // g.cp) >= 1]
    prepared = [(i, g, *task) for i, g in todo for task in dp_tasks(problem, g, method, devices)]
    sols = solve_many(tuple(task for _, _, task, _, _ in prepared), prune=True, cutoff_s=limit_s)
    found = []
    for (i, graph, task, figures, zero), sol in zip(prepared, sols, strict=True):
        if sol is not None:
            key = (sol.time_s, graph.tp, sol.d, sol.s, zero, i)
            found.append((key, graph, sol, task.build().costs, figures(), zero))
    if found or limit_s < math.inf:
        return found, []
    reasons += [
        _why(problem, graph.graph, task.build().costs, figures())
        for _, graph, task, figures, zero in prepared
        if zero == problem.zero_stages[0]
    ]
    return found, reasons


def _one_node_bound(problem: PlacementProblem, graph: Variant) -> float:
    """A lower bound on the time of any placement on one node: all work over its devices
    (each of a context-parallel graph's ``cp`` ranks does its layers' work)."""
    c = graph.columns
    work = graph.cp * sum((c["fwd_s"] + c["bwd_s"] + c["recompute_s"]).tolist())
    return problem.global_batch // graph.micro_batch * work / problem.cluster.devices_per_node


def _too_wide(problem: PlacementProblem, graph: Variant) -> str:
    return (
        f"tp={graph.tp} needs {fmt_noun(graph.tp, 'device')} per stage, the cluster has "
        f"{problem.cluster.devices}"
    )


def _why(
    problem: PlacementProblem, graph: StageGraph, costs: SegmentCosts, figures: StageFigures
) -> tuple[float, str]:
    """Why nothing fits: (a lower bound on the bytes any placement needs per device, text)."""
    s_max = _max_stages(problem, Variant.of(graph), problem.cluster.devices)
    # Every layer sits in some stage, whose memory is at least that layer's alone; the states
    # of all layers spread over at most s_max stages. Either bound is a valid lower bound.
    # Sharded state may shrink to nothing: count only what the most sharded stage replicates.
    state = problem.state_bytes_per_parameter
    opt = problem.optimizer_bytes_per_parameter
    weight = problem.weight_bytes_per_parameter
    unsharded = state - zero_state(state, max(problem.zero_stages), opt, weight)[1]
    n = len(graph.layers)
    one_layer = [
        figures.mem_base[q] - costs.params[q] * (state - unsharded)
        for q in (_single_layer_pair(costs, figures, v) for v in range(n))
    ]
    total_state = sum(x.parameters for x in graph.layers) * unsharded
    need = float(max(max(one_layer, default=0.0), total_state / s_max))
    what = (
        f"tp={graph.tp}, micro_batch={graph.micro_batch}, recompute={graph.recompute}, "
        f"at most {fmt_noun(s_max, 'stage')} on {fmt_noun(problem.cluster.devices, 'device')}"
    )
    if need > problem.hbm_bytes:
        needs, has = fmt_pair(need, problem.hbm_bytes, "B")
        return need, f"needs {needs} per device, has {has} ({what})"
    return need, (
        f"needs more than {gib(problem.hbm_bytes)} per device for every pipeline that fits "
        f"the devices ({what})"
    )


def _single_layer_pair(costs: SegmentCosts, figures: StageFigures, v: int) -> int:
    """A pair index whose stage is the single layer ``v``, when it is a valid stage."""
    if costs.dense:
        n = costs.n_states - 1
        k, kk = n - v, n - v - 1
        return k * costs.n_states + kk
    assert figures.in_stage is not None
    sizes = figures.in_stage.sum(axis=1)
    hits = np.flatnonzero((sizes == 1) & figures.in_stage[:, v])
    return int(hits[0]) if hits.size else 0


def _placement(
    problem: PlacementProblem,
    graph: StageGraph,
    sol: DpSolution,
    costs: SegmentCosts,
    figures: StageFigures,
    zero: int,
) -> Placement:
    t, p, d = graph.tp, sol.s, sol.d
    per_pipeline = micro_batches_per_pipeline(problem.global_batch // graph.micro_batch, d)
    stages = []
    for i, q in enumerate(sol.pairs):
        pos = p - i  # position from the end
        load = costs.load_last[q] if pos == 1 else costs.load_mid[q]
        layers = stage_layers(costs, figures, q)
        parts = {
            "parameters": float(costs.params[q]),
            "stash_bytes": float(figures.mem_stash[q]),
            "in_flight": float(in_flight(p, i)),
            "workspace_bytes": float(figures.workspace[q]),
            "largest_layer_parameters": float(figures.largest[q]),
            "expert_parameters": float(sum(graph.layers[j].expert_parameters for j in layers)),
        }
        stages.append(
            Stage(
                layers=layers,
                devices=1 if (costs.one[q] and t > 1) else t,
                load_s=float(load),
                compute_s=float(figures.compute[q]),
                p2p_s=float(figures.p2p[q]),
                memory_bytes=stage_memory(
                    problem, d=d, zero=zero, ep=graph.ep, cp=graph.cp, **parts
                ).total_bytes,
                device=i,
                recompute_s=float(figures.recompute[q]),
                tp_comm_s=sum(graph.layers[j].tp_comm_s for j in layers),
                ep_comm_s=sum(graph.layers[j].ep_comm_s for j in layers),
                cp_comm_s=sum(graph.layers[j].cp_comm_s for j in layers),
                tied_parameters=float(figures.tied[q]),
                **parts,
            )
        )
    layout = graph.layout.completed(
        p=p, d=d, v=1, zero=zero, split=chunk_split(graph, tuple(st.layers for st in stages))
    )
    return assemble(
        problem,
        graph,
        tuple(stages),
        layout=layout,
        micro_batches=per_pipeline,
        first_stage_params=float(costs.params[sol.pairs[0]]),
        first_stage_expert_params=stages[0].expert_parameters,
        embedding_comm_s=0.0 if costs.tied_s is None else float(costs.tied_s[sol.pairs[0]]),
    )
