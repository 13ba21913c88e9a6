"""Search the best placement: every graph variant through the DP, the fastest wins.

For each :class:`StageGraph` (a tensor-parallel width, micro-batch size and recompute
mode) the DP of :mod:`placement.dp` finds the stages, devices per stage and data-parallel
degree minimising

    time per batch = L * (m/d + p - 1) + allreduce(d, first stage) + optimizer(first stage)

with ``L`` the largest stage load per micro-batch (including its boundary transfers), ``m``
the micro-batches per iteration and ``p`` the stages (1F1B; Narayanan et al. SC21 §2.2). The
exposed all-reduce is the first stage's: in 1F1B it finishes its backward pass last, while the
other stages' all-reduces overlap with it. The optimizer step follows it on every device
(``optimizer_s_per_parameter`` x the shard's parameters; the first stage, which also holds
the embedding, is taken as the slowest). Both tail terms grow with the first stage's
parameters, which is what the DP's final round needs to stay exact. Chains take the fast
path (intervals and prefix sums); other DAGs enumerate downsets. Both give the same optimum.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import replace
from typing import Literal

import numpy as np

from phaze.errors import ConfigError, Infeasible
from placement import network as net
from placement.costs import LayerArrays, StageFigures, phaze_costs, stage_layers
from placement.dp import DpSolution, DpTask, SegmentCosts, solve_many
from placement.types import Placement, PlacementProblem, Stage, StageGraph

__all__ = ["Method", "place", "place_graph", "layer_arrays", "assemble", "gib"]

logger = logging.getLogger(__name__)

Method = Literal["auto", "chain", "dag"]
_GIB = float(1 << 30)


def gib(nbytes: float) -> str:
    """Bytes as GiB for messages: ``gib(100e9) == '93.1 GiB'``."""
    return f"{nbytes / _GIB:.1f} GiB"


def layer_arrays(graph: StageGraph) -> LayerArrays:
    """The per-layer figures of ``graph`` as read-only numpy arrays (params as counts)."""
    ls = graph.layers
    edges = sorted(graph.edges, key=lambda e: (e.src, e.dst))

    def arr(values, dtype=np.float64) -> np.ndarray:
        a = np.array(values, dtype=dtype)
        a.setflags(write=False)
        return a

    return LayerArrays(
        fwd=arr([x.fwd_s for x in ls]),
        bwd=arr([x.bwd_s for x in ls]),
        rec=arr([x.recompute_s for x in ls]),
        params=arr([x.parameters for x in ls]),
        stash=arr([x.stash_bytes for x in ls]),
        workspace=arr([x.workspace_bytes for x in ls]),
        tp=arr([x.tensor_parallel for x in ls], bool),
        src=arr([e.src for e in edges], np.int64),
        dst=arr([e.dst for e in edges], np.int64),
        nbytes=arr([e.bytes for e in edges]),
        is_chain=graph.is_chain,
    )


def _max_stages(problem: PlacementProblem, graph: StageGraph, devices: int) -> int:
    """At most one stage per layer and per device (per t devices when every layer is TP)."""
    per_stage = graph.tp if all(x.tensor_parallel for x in graph.layers) else 1
    cap = min(len(graph.layers), devices // per_stage)
    if problem.max_stages is not None:
        cap = min(cap, problem.max_stages)
    return cap


def _allreduce_fn(problem: PlacementProblem, t: int):
    netw = problem.network
    intra_bw, intra_lat = net.link(netw, inter_node=False)
    inter_bw, inter_lat = net.link(netw, inter_node=True)
    gbytes = problem.gradient_bytes_per_parameter

    def allreduce(d: np.ndarray, params: np.ndarray) -> np.ndarray:
        inter = t * d > netw.devices_per_node
        bw = np.where(inter, inter_bw, intra_bw)
        lat = np.where(inter, inter_lat, intra_lat)
        ring = lat + 2.0 * (d - 1) / d * (params * gbytes) / bw
        return np.where(d > 1, ring, 0.0)

    return allreduce


def _tail_fn(problem: PlacementProblem, t: int):
    """The time after the pipeline flush: the all-reduce, then the optimizer step."""
    allreduce = _allreduce_fn(problem, t)
    per_parameter = problem.optimizer_s_per_parameter

    def tail(d: np.ndarray, params: np.ndarray) -> np.ndarray:
        return allreduce(d, params) + params * per_parameter

    return tail


def _prepare(
    problem: PlacementProblem, graph: StageGraph, method: Method, devices: int
) -> tuple[DpTask, StageFigures]:
    """The DP task of one graph on at most ``devices`` devices (which set the p2p link)."""
    la = layer_arrays(graph)
    if method == "chain" and not la.is_chain:
        raise ConfigError(
            f"placement: method = 'chain' needs a chain layer graph (tp={graph.tp} is not "
            "one); use 'auto' or 'dag'"
        )
    chain = la.is_chain if method == "auto" else method == "chain"
    bw, lat = net.boundary_link(problem.network, devices, graph.tp, graph.sequence_parallel)
    s_max = _max_stages(problem, graph, devices)
    costs, figures = phaze_costs(
        la,
        chain=chain,
        p2p_bandwidth=bw,
        p2p_latency_s=lat,
        hbm_bytes=problem.hbm_bytes,
        state_bytes_per_parameter=problem.state_bytes_per_parameter,
        max_stages=s_max,
    )
    task = DpTask(
        costs,
        t=graph.tp,
        max_stages=s_max,
        max_devices=devices,
        micro_batches=problem.global_batch // graph.micro_batch,
        allreduce=_tail_fn(problem, graph.tp),
    )
    return task, figures


def place_graph(
    problem: PlacementProblem, graph: StageGraph, *, method: Method = "auto"
) -> Placement:
    """The best placement of one graph variant; raises Infeasible when nothing fits."""
    return place(replace(problem, graphs=(graph,)), method=method)


def place(problem: PlacementProblem, *, method: Method = "auto") -> Placement:
    """The fastest placement over all graph variants of ``problem``.

    ``method`` forces the chain fast path or the general downset DP (for tests and the
    benchmark); "auto" takes the fast path for chains. Ties go to the smaller ``tp``, then
    ``d``, then ``p``, then the variant given first. Raises :class:`Infeasible` with the reason
    of the variant that came closest to fitting when none fits.

    Stage boundaries use inter-node links when the job spans nodes. A second, small DP keeps
    every job inside one node (intra-node links) for the variants whose one-node lower bound
    ``m * sum(layer times) / devices_per_node`` could beat the best so far, so adding devices
    never makes the answer worse.
    """
    start = time.perf_counter()
    netw = problem.network
    found, reasons = _run(problem, list(enumerate(problem.graphs)), method, netw.devices)
    if netw.devices > netw.devices_per_node and found:
        best = min(f[0][0] for f in found)
        fits = {f[0][-1] for f in found}  # variants that fit some pipeline at all
        todo = [
            (i, g)
            for i, g in enumerate(problem.graphs)
            if i in fits and _one_node_bound(problem, g) < best
        ]
        found += _run(problem, todo, method, netw.devices_per_node)[0]
    logger.debug(
        "placed %d variants in %.1f ms", len(problem.graphs), 1e3 * (time.perf_counter() - start)
    )
    if not found:
        raise Infeasible(min(reasons)[1])
    _, graph, sol, costs, figures = min(found, key=lambda f: f[0])
    return _placement(problem, graph, sol, costs, figures)


def _run(
    problem: PlacementProblem, todo: list[tuple[int, StageGraph]], method: Method, devices: int
) -> tuple[list[tuple], list[tuple[float, str]]]:
    """Solve the variants ``todo`` on at most ``devices`` devices.

    Returns the solutions as (key, graph, solution, costs, figures) and, for variants with
    none, (bytes needed, reason).
    """
    reasons = [
        (math.inf, _too_wide(problem, g)) for _, g in todo if _max_stages(problem, g, devices) < 1
    ]
    todo = [(i, g) for i, g in todo if _max_stages(problem, g, devices) >= 1]
    prepared = [_prepare(problem, g, method, devices) for _, g in todo]
    sols = solve_many(tuple(task for task, _ in prepared))
    found = []
    for (i, graph), (task, figures), sol in zip(todo, prepared, sols, strict=True):
        if sol is None:
            reasons.append(_why(problem, graph, task.costs, figures))
            continue
        found.append(((sol.time_s, graph.tp, sol.d, sol.s, i), graph, sol, task.costs, figures))
    return found, reasons


def _one_node_bound(problem: PlacementProblem, graph: StageGraph) -> float:
    """A lower bound on the time of any placement on one node: all work over its devices."""
    work = sum(x.fwd_s + x.bwd_s + x.recompute_s for x in graph.layers)
    return problem.global_batch // graph.micro_batch * work / problem.network.devices_per_node


def _too_wide(problem: PlacementProblem, graph: StageGraph) -> str:
    return (
        f"tp={graph.tp} needs {graph.tp} devices per stage, the cluster has "
        f"{problem.network.devices}"
    )


def _why(
    problem: PlacementProblem, graph: StageGraph, costs: SegmentCosts, figures: StageFigures
) -> tuple[float, str]:
    """Why nothing fits: (a lower bound on the bytes any placement needs per device, text)."""
    s_max = _max_stages(problem, graph, problem.network.devices)
    # Every layer sits in some stage, whose memory is at least that layer's alone; the states
    # of all layers spread over at most s_max stages. Either bound is a valid lower bound.
    n = len(graph.layers)
    one_layer = [figures.mem_base[_single_layer_pair(costs, figures, v)] for v in range(n)]
    total_state = sum(x.parameters for x in graph.layers) * problem.state_bytes_per_parameter
    need = float(max(max(one_layer, default=0.0), total_state / s_max))
    what = (
        f"tp={graph.tp}, micro_batch={graph.micro_batch}, recompute={graph.recompute}, "
        f"at most {s_max} stages on {problem.network.devices} devices"
    )
    if need > problem.hbm_bytes:
        return need, f"needs {gib(need)} per device, has {gib(problem.hbm_bytes)} ({what})"
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
) -> Placement:
    t, p, d = graph.tp, sol.s, sol.d
    m = problem.global_batch // graph.micro_batch
    per_pipeline = -(-m // d)
    stages = []
    for i, q in enumerate(sol.pairs):
        pos = p - i  # position from the end
        load = costs.load_last[q] if pos == 1 else costs.load_mid[q]
        stages.append(
            Stage(
                layers=stage_layers(costs, figures, q),
                devices=1 if (costs.one[q] and t > 1) else t,
                load_s=float(load),
                compute_s=float(figures.compute[q]),
                p2p_s=float(figures.p2p[q]),
                memory_bytes=float(figures.mem_base[q] + (pos - 1) * figures.mem_stash[q]),
                device=i,
            )
        )
    return assemble(
        problem,
        graph,
        tuple(stages),
        d=d,
        v=1,
        micro_batches=per_pipeline,
        first_stage_params=float(costs.params[sol.pairs[0]]),
    )


def assemble(
    problem: PlacementProblem,
    graph: StageGraph,
    stages: tuple[Stage, ...],
    *,
    d: int,
    v: int,
    micro_batches: int,
    first_stage_params: float,
) -> Placement:
    """A Placement from its stages: the pipeline time model shared with fixed strategies.

    Device ``r`` runs the stages with ``device == r``; its load and memory are their sums.
    """
    p = 1 + max(st.device for st in stages)
    per_device = np.zeros(p)
    comp = np.zeros(p)
    comm = np.zeros(p)
    memory = np.zeros(p)
    for st in stages:
        per_device[st.device] += st.load_s
        comp[st.device] += st.compute_s
        comm[st.device] += st.p2p_s
        memory[st.device] += st.memory_bytes
    r = int(np.argmax(per_device))
    load = float(per_device[r])
    steps = micro_batches + (p - 1) / v
    allreduce = float(
        _allreduce_fn(problem, graph.tp)(np.array([d]), np.array([first_stage_params]))[0]
    )
    optimizer = first_stage_params * problem.optimizer_s_per_parameter
    devices_used = d * sum(st.devices for st in stages) // v
    pipeline = load * steps
    # split the pipeline time by the bottleneck device's compute and receive shares
    share = comp[r] / (comp[r] + comm[r]) if comp[r] + comm[r] > 0 else 1.0
    return Placement(
        tp=graph.tp,
        pp=p,
        dp=d,
        micro_batch=graph.micro_batch,
        micro_batches=micro_batches,
        recompute=graph.recompute,
        sequence_parallel=graph.sequence_parallel,
        virtual_stages=v,
        stages=stages,
        devices_used=devices_used,
        load_s=load,
        time_per_batch_s=pipeline + allreduce + optimizer,
        pipeline_s=pipeline,
        compute_s=pipeline * share,
        p2p_s=pipeline * (1.0 - share),
        allreduce_s=allreduce,
        memory_per_device_bytes=float(memory.max()),
        bubble_fraction=(p - 1) / (v * micro_batches),
        optimizer_s=optimizer,
    )
