"""Evaluate a given parallel layout (a fixed strategy) with the same model.

This is how Phaze compares itself with published systems (Megatron-LM) and baselines, and
how a searched placement is given back. The chunks are the layout's ``split``
(Megatron-Core's ``--pipeline-model-parallel-layout``: any contiguous split the search can
return), or Megatron-LM's default: the transformer blocks split evenly into ``p * v`` model
chunks (at ``v >= 2`` they must divide evenly), the layers before the first block join chunk
0 and those after the last block join the last chunk; chunk ``c`` runs on pipeline rank
``c mod p`` (interleaved schedule,
Narayanan et al. SC21 §2.2). Per micro-batch a rank runs all its chunks, so its load is their
sum (including v times the boundary messages, priced by
:func:`placement.network.boundary_link`), and the iteration is priced by
:func:`placement.iteration.assemble`:

    time per batch = load * (m' + (p - 1) / v) + allreduce(d, rank 0's parameters)
                     + optimizer step(rank 0's parameters),

``m'`` the micro-batches per pipeline (the interleaved-1F1B bubble is ``(p - 1) / v`` of a
micro-batch's time, SC21 eq. 2). Memory on rank ``r`` holds its chunks' weights, gradients
and optimizer state, its backward workspace, and the activations of the micro-batches in
flight: ``p - r`` under 1F1B, and under interleaving
``min(2 (p - r - 1) + (v - 1) p + 1, m' v)`` chunk activations (Megatron-LM's warm-up count,
``megatron/core/pipeline_parallel/schedules.py``), each ``1/v`` of the rank's stash on average.
Under DualPipe (``problem.dualpipe``, ``p >= 2``) chunk ``c`` runs on rank ``c`` for the
micro-batches entering at the first rank and on rank ``p - 1 - c`` for those entering at the
last: each rank holds two stages (their parameters both), each with half the micro-batches
(its figures per micro-batch halved) and its own in-flight count
(:func:`placement.pipelining.dualpipe_in_flight`). Expert (``ep``) and context (``cp``) parallelism change the layers
(:func:`placement.ep_cp.ep_cp_graph`); the job uses ``t * p * d * cp`` devices.
"""

from __future__ import annotations

import numpy as np

from phaze_common.errors import ConfigError, Infeasible
from phaze_common.units import fmt_noun
from placement import network as net
from placement.chunks import layout_chunks
from placement.dp_comm import embedding_allreduce_s
from placement.ep_cp import ep_cp_graph
from placement.iteration import assemble, backward_workspace, stage_memory
from placement.layout import Layout, ep_fits
from placement.pipelining import dualpipe_in_flight, in_flight
from placement.search import gib
from placement.types import (
    VARIANT_FIELDS,
    Placement,
    PlacementProblem,
    Stage,
    StageGraph,
    StageLayer,
)

__all__ = ["evaluate_fixed"]


def _variant(problem: PlacementProblem, lay: Layout) -> StageGraph:
    for g in problem.graphs:
        if all(getattr(g.layout, k) == getattr(lay, k) for k in VARIANT_FIELDS):
            return _ep_cp(problem, g, lay)
    have = ", ".join(f"({_variant_text(g.layout)})" for g in problem.graphs)
    raise ConfigError(f"strategy: no graph for {_variant_text(lay)} (have {have})")


def _variant_text(lay: Layout) -> str:
    return lay.spelled(frozenset(VARIANT_FIELDS))


def _ep_cp(problem: PlacementProblem, g: StageGraph, lay: Layout) -> StageGraph:
    """``g`` at the layout's ``ep`` and ``cp``; ConfigError when ``ep`` does not fit."""
    if g.experts == 1 and lay.ep > 1:
        raise ConfigError(
            f"strategy: ep = {lay.ep} needs a mixture-of-experts model; this one is dense "
            "(allowed: ep = 1)"
        )
    if g.experts % lay.ep or not ep_fits(lay.ep, lay.t, lay.d, lay.cp):
        allowed = [
            e
            for e in range(1, g.experts + 1)
            if g.experts % e == 0 and ep_fits(e, lay.t, lay.d, lay.cp)
        ]
        raise ConfigError(
            f"strategy: ep = {lay.ep} must divide the {g.experts} experts and d = {lay.d}, "
            f"or at cp = 1 be t = {lay.t} times a divisor of d (expert-tensor parallelism) "
            f"(allowed: {', '.join(map(str, allowed))})"
        )
    if (g.ep, g.cp) != (1, 1):
        if (g.ep, g.cp) != (lay.ep_d, lay.cp) or lay.folds_experts:
            raise ConfigError(f"strategy: the graph is at ep={g.ep}, cp={g.cp}")
        return g
    return ep_cp_graph(
        g, lay.ep_d, lay.cp, problem.cluster, problem.a2a_overlap, fold=lay.folds_experts
    )


def _check(problem: PlacementProblem, lay: Layout, graph: StageGraph) -> int:
    """Micro-batches per pipeline of a complete layout; ConfigError when it does not match
    the problem."""
    if lay.open:
        raise ConfigError(f"strategy: {lay} leaves {', '.join(sorted(lay.open))} open")
    if lay.devices > problem.cluster.devices:
        raise ConfigError(
            f"strategy: t*p*d*cp = {lay.t}*{lay.p}*{lay.d}*{lay.cp} = "
            f"{fmt_noun(lay.devices, 'device')}, "
            f"the cluster has {problem.cluster.devices}"
        )
    if lay.v > 1 and lay.p < 2:
        raise ConfigError(
            f"strategy: v = {lay.v} interleaved chunks need p >= 2 pipeline stages (got p = {lay.p})"
        )
    m = problem.global_batch // lay.mbs
    if m % lay.d:
        raise ConfigError(
            f"strategy: d * mbs = {lay.d} * {lay.mbs} must divide the global batch of "
            f"{fmt_noun(problem.global_batch, 'sequence')} (every replica runs whole micro-batches)"
        )
    per_pipeline = m // lay.d
    if _dualpipe(problem, lay) and (lay.v > 1 or lay.p % 2):
        # dualpipe.py DualPipe.step: num_ranks % 2 == 0 (two model chunks per rank)
        raise ConfigError(
            f"strategy: DualPipe needs v = 1 and an even p (got v = {lay.v}, p = {lay.p})"
        )
    if _dualpipe(problem, lay) and (per_pipeline % 2 or per_pipeline < 2 * lay.p):
        # DualPipe.step: num_chunks % 2 == 0 and num_chunks >= num_ranks * 2; a run whose
        # micro-batch size leaves fewer cannot run (a search over micro-batch sizes skips it)
        raise Infeasible(
            f"DualPipe needs each pipeline's micro-batches even and at least 2 p = {2 * lay.p} "
            f"(got {per_pipeline} at mbs = {lay.mbs}; {lay})"
        )
    if lay.v > 1 and per_pipeline % lay.p:
        # Megatron-LM's interleaved 1F1B schedule refuses this (schedules.py,
        # forward_backward_pipelining_with_interleaving)
        raise ConfigError(
            f"strategy: with v = {lay.v} interleaved chunks each pipeline's "
            f"{fmt_noun(per_pipeline, 'micro-batch', 'micro-batches')} must be a multiple of "
            f"p = {lay.p} (Megatron-LM's interleaved schedule)"
        )
    return per_pipeline


def _dualpipe(problem: PlacementProblem, lay: Layout) -> bool:
    """Does ``lay`` run DualPipe (the problem's schedule, with a pipeline to run it on)?"""
    return problem.dualpipe and lay.p >= 2


def _rank_chunks(
    problem: PlacementProblem, lay: Layout, per_pipeline: int
) -> list[list[tuple[int, float, float]]]:
    """Per pipeline rank, its chunks as (chunk, micro-batches in flight, share of the
    micro-batches it runs)."""
    p, v = lay.p, lay.v
    if _dualpipe(problem, lay):
        out = []
        for r in range(p):
            own, mirror = dualpipe_in_flight(p, r)
            out.append([(r, float(own), 0.5), (p - 1 - r, float(mirror), 0.5)])
        return out
    return [
        [(c, float(in_flight(p, r, v, per_pipeline)), 1.0) for c in range(p * v) if c % p == r]
        for r in range(p)
    ]


def evaluate_fixed(
    problem: PlacementProblem, layout: Layout, *, check_memory: bool = True
) -> Placement:
    """Time per batch, memory and the rest of a complete layout (a fixed strategy).

    The chunks are the layout's ``split``, else Megatron-LM's (:func:`placement.chunks.layout_chunks`). Raises
    ConfigError when the layout does not match the problem and Infeasible when it does not
    fit the memory (unless ``check_memory`` is False).
    """
    lay = layout
    graph = _variant(problem, lay)
    per_pipeline = _check(problem, lay, graph)
    parts = layout_chunks(graph, lay)
    d, cp = lay.d, lay.cp
    used = (
        d * cp * sum(lay.t if any(graph.layers[i].tensor_parallel for i in c) else 1 for c in parts)
    )
    used //= lay.v
    inter = lay.links(problem.cluster, used).pp
    link = net.boundary_link(
        problem.cluster,
        used,
        lay.t,
        graph.sequence_parallel,
        problem.collectives,
        max((e.bytes for e in graph.edges), default=0.0),
        problem.p2p_sends,
        problem.p2p_gathers,
    )
    stages = _stages(problem, graph, lay, parts, link, per_pipeline)
    firsts = [graph.layers[i] for c, _, _ in _rank_chunks(problem, lay, 1)[0] for i in parts[c]]
    placement = assemble(
        problem,
        graph,
        stages,
        layout=lay,
        micro_batches=per_pipeline,
        first_stage_params=float(sum(x.parameters for x in firsts)),
        first_stage_expert_params=float(sum(x.expert_parameters for x in firsts)),
        embedding_comm_s=float(
            embedding_allreduce_s(problem, inter, sum(st.tied_parameters for st in stages))
        ),
    )
    need = placement.memory_breakdown.total_bytes
    if check_memory and need > problem.hbm_bytes:
        raise Infeasible(f"needs {gib(need)} per device, has {gib(problem.hbm_bytes)} ({lay})")
    return placement


def _stages(
    problem: PlacementProblem,
    graph: StageGraph,
    lay: Layout,
    parts: tuple[tuple[int, ...], ...],
    link: net.Link,
    per_pipeline: int,
) -> tuple[Stage, ...]:
    """The stages of the chunks ``parts``, chunk ``c`` on rank ``c mod p`` (under DualPipe
    also on rank ``p - 1 - c``), in layer order.

    A rank's chunks share its in-flight count (DualPipe: each its own); its largest
    workspace (:func:`_workspace`) and (ZeRO-3) its largest gathered layer count once, on one of its chunks; a
    chunk on a rank without the first chunk keeps a copy of the tied weights of its layers
    (DualPipe puts the embedding and the head on one rank, which shares them physically:
    dsv3-report Sec. 3.2.1).
    """
    v = lay.v
    pos = {i: c for c, layers in enumerate(parts) for i in layers}
    crossing = [e for e in graph.edges if pos[e.src] != pos[e.dst]]
    stages = []
    for r, held in enumerate(_rank_chunks(problem, lay, per_pipeline)):
        mine = [c for c, _, _ in held]
        ws = [_workspace([graph.layers[i] for i in sorted(parts[c])]) for c in mine]
        top = int(np.argmax(ws))
        big = [
            max(
                (graph.layers[i].parameters + graph.layers[i].tied_parameters for i in parts[c]),
                default=0,
            )
            for c in mine
        ]
        widest = int(np.argmax(big))
        for j, (c, flight, share) in enumerate(held):
            layers = [graph.layers[i] for i in parts[c]]
            compute = sum(x.fwd_s + x.bwd_s + x.recompute_s for x in layers)
            p2p = sum(net.p2p_s(e.bytes, link) for e in crossing if c in (pos[e.src], pos[e.dst]))
            if problem.overlaps_p2p(v):
                p2p = max(p2p - compute, 0.0)  # the exposed part
            # a rank holding the first chunk too (DualPipe's rank 0) shares its tied weights
            tied = float(sum(x.tied_parameters for x in layers)) if 0 not in mine else 0.0
            memory = {
                "parameters": float(sum(x.parameters for x in layers)) + tied,
                "stash_bytes": float(sum(x.stash_bytes for x in layers)),
                "in_flight": flight,
                "workspace_bytes": float(ws[j] if j == top else 0.0),
                "largest_layer_parameters": float(big[j] if j == widest else 0.0),
                "expert_parameters": float(sum(x.expert_parameters for x in layers)),
            }
            stages.append(
                Stage(
                    layers=parts[c],
                    devices=lay.t if any(x.tensor_parallel for x in layers) else 1,
                    load_s=share * (compute + p2p),
                    compute_s=share * compute,
                    p2p_s=share * p2p,
                    memory_bytes=stage_memory(
                        problem, d=lay.d, zero=lay.zero, ep=lay.ep_d, cp=lay.cp, **memory
                    ).total_bytes,
                    device=r,
                    recompute_s=share * sum(x.recompute_s for x in layers),
                    tp_comm_s=share * sum(x.tp_comm_s for x in layers),
                    ep_comm_s=share * sum(x.ep_comm_s for x in layers),
                    cp_comm_s=share * sum(x.cp_comm_s for x in layers),
                    tied_parameters=tied,
                    bwd_s=share * sum(x.bwd_s for x in layers),
                    **memory,
                )
            )
    stages.sort(key=lambda st: min(st.layers) if st.layers else 0)
    return tuple(stages)


def _workspace(layers: list[StageLayer]) -> float:
    """A chunk's backward workspace above its stash, its layers in index (forward) order: a
    layer's is live only after the later layers' stashes are freed
    (:func:`placement.iteration.backward_workspace`)."""
    return backward_workspace([x.workspace_bytes for x in layers], [x.stash_bytes for x in layers])
