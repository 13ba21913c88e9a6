"""Expert and context parallelism: the stage graph of a model at degrees ``ep`` and ``cp``.

Ranks follow Megatron-LM's order ``tp-cp-ep-dp-pp`` (megatron/core/parallel_state.py): a
context-parallel group is ``cp`` ranks ``t`` apart, an expert-parallel group ``ep`` ranks
``t * cp`` apart, a sub-group of the data-parallel replicas, so ``ep`` divides ``d``
(megatron/core/transformer/moe/README.md: "The EP group in MoE is a sub-group of DP in
Attention"). A job uses ``t * p * d * cp`` devices.

**Expert parallelism** (Lepikhin et al., GShard, ICLR 2021; Megatron-Core MoE): each of the
``ep`` ranks holds ``1/ep`` of the experts, so a block's expert parameters on a device
divide by ``ep``; the tokens each expert processes are those of ``ep`` ranks, so the work per
device is unchanged (balanced routing). Every MoE block sends its tokens to their ``top_k``
experts and back: a dispatch and a combine all-to-all in the forward pass and both again in
the backward pass (and in a full recompute), each moving ``(ep - 1) / ep`` of the
``dispatch_bytes`` (``top_k * tokens * hidden * 2`` per device) over the expert group's link:
``alpha + (ep - 1) / ep * bytes / bw``. Megatron-LM's ``alltoall`` dispatcher runs them on
the critical path, so they count exposed (``ep_comm_s``).

**Context parallelism** (Liu et al., Ring Attention, arXiv:2310.01889; Megatron-LM
docs/api-guide/context_parallel.md): the sequence is split into ``cp`` chunks (load-balanced
for causal masks), so every layer's work, activations and boundary tensors divide by ``cp``;
the weights do not. Attention needs the keys and values of every chunk: a ring of ``cp - 1``
point-to-point steps, each passing one chunk's K/V (``kv_bytes / cp``), in the forward pass;
in the backward pass the K/V again and their gradients (twice the bytes); and again in a
recompute. Each step's transfer runs beside the attention on the chunk in hand
(TransformerEngine's ``AttnFuncWithCPAndKVP2P``), so only what exceeds the pass's compute is
exposed (``cp_comm_s``).
"""

from __future__ import annotations

from dataclasses import replace

from arch_space.accelerator import Cluster
from phaze.errors import ConfigError
from placement import network as net
from placement.types import PlacementProblem, StageEdge, StageGraph, StageLayer

__all__ = ["ep_link", "cp_link", "all_to_all_s", "ring_s", "ep_cp_graph", "graph_variants"]


def ep_link(cluster: Cluster, t: int, cp: int, ep: int) -> net.Link:
    """Link of an expert-parallel group: it spans ``t * cp * ep`` consecutive ranks."""
    return net.link(cluster, inter_node=t * cp * ep > cluster.devices_per_node)


def cp_link(cluster: Cluster, t: int, cp: int) -> net.Link:
    """Link of a context-parallel ring: it spans ``t * cp`` consecutive ranks."""
    return net.link(cluster, inter_node=t * cp > cluster.devices_per_node)


def all_to_all_s(nbytes: float, n: int, ln: net.Link) -> float:
    """An all-to-all in which each of ``n`` devices sends ``nbytes``, ``1/n`` of it to itself:
    ``alpha + (n - 1) / n * bytes / bw`` (0 for one device)."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    bw, lat = ln
    return lat + (n - 1) / n * nbytes / bw


def ring_s(chunk_bytes: float, n: int, ln: net.Link) -> float:
    """A ring pass over ``n`` devices: ``n - 1`` point-to-point steps of ``chunk_bytes``."""
    if n <= 1 or chunk_bytes <= 0:
        return 0.0
    return (n - 1) * net.p2p_s(chunk_bytes, ln)


def _layer(x: StageLayer, g: StageGraph, ep: int, cp: int, cluster: Cluster) -> StageLayer:
    a2a = all_to_all_s(x.dispatch_bytes / cp, ep, ep_link(cluster, g.tp, cp, ep))
    ring = ring_s(x.kv_bytes / cp, cp, cp_link(cluster, g.tp, cp))
    fwd, bwd, rec = x.fwd_s / cp, x.bwd_s / cp, x.recompute_s / cp
    cp_f = max(ring - fwd, 0.0)
    cp_b = max(2.0 * ring - bwd, 0.0)
    cp_r = max(ring - rec, 0.0) if g.recompute != "none" else 0.0
    ep_r = 2.0 * a2a if g.recompute == "full" else 0.0
    expert = x.expert_parameters / ep
    return replace(
        x,
        fwd_s=fwd + 2.0 * a2a + cp_f,
        bwd_s=bwd + 2.0 * a2a + cp_b,
        recompute_s=rec + ep_r + cp_r,
        parameters=x.parameters - x.expert_parameters + expert,
        expert_parameters=expert,
        stash_bytes=x.stash_bytes / cp,
        workspace_bytes=x.workspace_bytes / cp,
        dispatch_bytes=x.dispatch_bytes / cp,
        kv_bytes=x.kv_bytes / cp,
        tp_comm_s=x.tp_comm_s / cp,
        ep_comm_s=4.0 * a2a,
        cp_comm_s=cp_f + cp_b,
    )


def ep_cp_graph(graph: StageGraph, ep: int, cp: int, cluster: Cluster) -> StageGraph:
    """``graph`` (at ``ep = cp = 1``) with ``ep`` expert- and ``cp`` context-parallel ranks
    (see the module docstring); ``graph`` itself when both are 1."""
    if ep == 1 and cp == 1:
        return graph
    if (graph.ep, graph.cp) != (1, 1):
        raise ValueError(f"graph is already at ep={graph.ep}, cp={graph.cp}")
    return replace(
        graph,
        layers=tuple(_layer(x, graph, ep, cp, cluster) for x in graph.layers),
        edges=tuple(StageEdge(e.src, e.dst, e.bytes / cp) for e in graph.edges),
        ep=ep,
        cp=cp,
    )


def graph_variants(problem: PlacementProblem) -> tuple[StageGraph, ...]:
    """Every graph of ``problem`` at each of its ``ep`` degrees dividing the graph's experts
    and each of its ``cp`` degrees whose ranks fit the devices (graphs given at other
    degrees than 1 stay as they are; each graph stays at ``ep = cp = 1``, fitting or not,
    so the search can say why it does not)."""
    devices = problem.cluster.devices
    out = []
    for g in problem.graphs:
        if (g.ep, g.cp) != (1, 1):
            out.append(g)
            continue
        out += [
            ep_cp_graph(g, ep, cp, problem.cluster)
            for cp in problem.cp_degrees
            for ep in problem.ep_degrees
            if g.experts % ep == 0 and (g.tp * cp * ep <= devices or ep * cp == 1)
        ]
    if not out:
        experts = sorted({g.experts for g in problem.graphs})
        raise ConfigError(
            f"placement problem: ep_degrees = {problem.ep_degrees} has no degree dividing the "
            f"experts per block ({', '.join(map(str, experts))}); 1 is always allowed"
        )
    return tuple(out)
