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

import functools
import operator
from dataclasses import dataclass, replace
from typing import Final

import numpy as np

from arch_space.accelerator import Cluster
from phaze_common.errors import ConfigError
from placement import network as net
from placement.layout import Layout
from placement.types import PlacementProblem, StageEdge, StageGraph
from workloads.recompute_modules import repeats_attention_core, repeats_dispatch

__all__ = [
    "COLUMNS",
    "Variant",
    "all_to_all_s",
    "ep_cp_graph",
    "graph_variants",
    "layer_columns",
    "ring_s",
    "scaled_columns",
    "variants",
]


def all_to_all_s(nbytes: float, n: int, ln: net.Link) -> float:
    """An all-to-all in which each of ``n`` devices sends ``nbytes``, ``1/n`` of it to itself:
    ``alpha + (n - 1) / n * bytes / bw`` (0 for one device)."""
    return float(_all_to_all(np.asarray(nbytes, dtype=np.float64), n, ln))


def ring_s(chunk_bytes: float, n: int, ln: net.Link) -> float:
    """A ring pass over ``n`` devices: ``n - 1`` point-to-point steps of ``chunk_bytes``."""
    return float(_ring(np.asarray(chunk_bytes, dtype=np.float64), n, ln))


def _all_to_all(nbytes: np.ndarray, n: int, ln: net.Link) -> np.ndarray:
    bw, lat = ln
    if n <= 1:
        return np.zeros_like(nbytes)
    return np.where(nbytes > 0, lat + (n - 1) / n * nbytes / bw, 0.0)


def _ring(chunk: np.ndarray, n: int, ln: net.Link) -> np.ndarray:
    bw, lat = ln
    if n <= 1:
        return np.zeros_like(chunk)
    return np.where(chunk > 0, (n - 1) * (lat + chunk / bw), 0.0)  # net.p2p_s per step


# the per-layer figures the variants read and change, as columns (tensor_parallel as 0/1)
COLUMNS: Final = (
    "fwd_s",
    "bwd_s",
    "recompute_s",
    "parameters",
    "expert_parameters",
    "stash_bytes",
    "workspace_bytes",
    "dispatch_bytes",
    "kv_bytes",
    "tp_comm_s",
    "ep_comm_s",
    "cp_comm_s",
    "tied_parameters",
    "tensor_parallel",
)
_CHANGED: Final = COLUMNS[:-2]  # what expert and context parallelism change
_read = operator.attrgetter(*COLUMNS)


def layer_columns(graph: StageGraph) -> dict[str, np.ndarray]:
    """The :data:`COLUMNS` of ``graph``'s layers as float64 arrays, in one pass."""
    rows = np.array([_read(x) for x in graph.layers], dtype=np.float64)
    return dict(zip(COLUMNS, rows.reshape(-1, len(COLUMNS)).T, strict=True))


def scaled_columns(
    cols: dict[str, np.ndarray], graph: StageGraph, ep: int, cp: int, cluster: Cluster
) -> dict[str, np.ndarray]:
    """The columns of ``graph``'s layers (at ``ep = cp = 1``) with ``ep`` expert- and ``cp``
    context-parallel ranks (see the module docstring)."""
    groups = Layout(t=graph.tp, ep=ep, cp=cp).groups  # the expert and context groups' spans
    a2a = _all_to_all(cols["dispatch_bytes"] / cp, ep, net.group_link(cluster, groups.ep))
    ring = _ring(cols["kv_bytes"] / cp, cp, net.group_link(cluster, groups.cp))
    fwd, bwd, rec = cols["fwd_s"] / cp, cols["bwd_s"] / cp, cols["recompute_s"] / cp
    none = np.zeros_like(fwd)
    cp_f = np.maximum(ring - fwd, 0.0)
    cp_b = np.maximum(2.0 * ring - bwd, 0.0)
    cp_r = np.maximum(ring - rec, 0.0) if repeats_attention_core(graph.recompute) else none
    ep_r = 2.0 * a2a if repeats_dispatch(graph.recompute) else none
    expert = cols["expert_parameters"] / ep
    return {
        **cols,
        "fwd_s": fwd + 2.0 * a2a + cp_f,
        "bwd_s": bwd + 2.0 * a2a + cp_b,
        "recompute_s": rec + ep_r + cp_r,
        "parameters": cols["parameters"] - cols["expert_parameters"] + expert,
        "expert_parameters": expert,
        "stash_bytes": cols["stash_bytes"] / cp,
        "workspace_bytes": cols["workspace_bytes"] / cp,
        "dispatch_bytes": cols["dispatch_bytes"] / cp,
        "kv_bytes": cols["kv_bytes"] / cp,
        "tp_comm_s": cols["tp_comm_s"] / cp,
        "ep_comm_s": 4.0 * a2a,
        "cp_comm_s": cp_f + cp_b,
    }


def ep_cp_graph(graph: StageGraph, ep: int, cp: int, cluster: Cluster) -> StageGraph:
    """``graph`` (at ``ep = cp = 1``) with ``ep`` expert- and ``cp`` context-parallel ranks
    (see the module docstring); ``graph`` itself when both are 1."""
    if ep == 1 and cp == 1:
        return graph
    if (graph.ep, graph.cp) != (1, 1):
        raise ValueError(f"graph is already at ep={graph.ep}, cp={graph.cp}")
    cols = scaled_columns(layer_columns(graph), graph, ep, cp, cluster)
    values = np.stack([cols[k] for k in _CHANGED], axis=1).tolist()
    return replace(
        graph,
        layers=tuple(
            replace(x, **dict(zip(_CHANGED, row, strict=True)))
            for x, row in zip(graph.layers, values, strict=True)
        ),
        edges=tuple(StageEdge(e.src, e.dst, e.bytes / cp) for e in graph.edges),
        ep=ep,
        cp=cp,
    )


@dataclass(frozen=True, eq=False)
class Variant:
    """A graph the search tries at (``ep``, ``cp``): what its bounds and DP read (the layer
    ``columns`` and the edges' ``(src, dst, bytes)`` at those degrees) at once, its
    :class:`StageGraph` only when asked (:attr:`graph`, from :func:`ep_cp_graph`), as a
    search builds few of them. ``cluster`` (None for a graph at its own degrees) sets the
    all-to-all and ring links.
    """

    base: StageGraph
    ep: int
    cp: int
    cluster: Cluster | None
    columns: dict[str, np.ndarray]
    edges: tuple[tuple[int, int, float], ...]

    @classmethod
    def at(
        cls,
        base: StageGraph,
        ep: int,
        cp: int,
        cluster: Cluster | None,
        columns: dict[str, np.ndarray] | None = None,
    ) -> Variant:
        """``base`` at (``ep``, ``cp``); ``columns`` are ``base``'s if already read."""
        cols = layer_columns(base) if columns is None else columns
        at_base = (ep, cp) == (base.ep, base.cp)
        if not at_base:
            cols = scaled_columns(cols, base, ep, cp, cluster)
        split = 1 if at_base else cp  # a boundary message splits over the cp ranks
        edges = sorted(base.edges, key=lambda e: (e.src, e.dst))
        return cls(
            base, ep, cp, cluster, cols, tuple((e.src, e.dst, e.bytes / split) for e in edges)
        )

    @classmethod
    def of(cls, graph: StageGraph) -> Variant:
        """``graph`` as it is (no cluster needed: nothing is scaled)."""
        return cls.at(graph, graph.ep, graph.cp, None)

    @property
    def tp(self) -> int:
        return self.base.tp

    @property
    def micro_batch(self) -> int:
        return self.base.micro_batch

    @property
    def recompute(self) -> str:
        return self.base.recompute

    @property
    def sequence_parallel(self) -> bool:
        return self.base.sequence_parallel

    @property
    def is_chain(self) -> bool:
        return self.base.is_chain

    @functools.cached_property
    def graph(self) -> StageGraph:
        """The variant's stage graph, built on first use."""
        if (self.ep, self.cp) == (self.base.ep, self.base.cp):
            return self.base
        return ep_cp_graph(self.base, self.ep, self.cp, self.cluster)


def variants(problem: PlacementProblem) -> tuple[Variant, ...]:
    """:func:`graph_variants` as :class:`Variant` s, none built yet."""
    out = []
    for g in problem.graphs:
        cols = layer_columns(g)
        out += [Variant.at(g, ep, cp, problem.cluster, cols) for ep, cp in _degrees(problem, g)]
    _check(problem, out)
    return tuple(out)


def graph_variants(problem: PlacementProblem) -> tuple[StageGraph, ...]:
    """Every graph of ``problem`` at each of its ``ep`` degrees dividing the graph's experts
    and each of its ``cp`` degrees whose ranks fit the devices (graphs given at other
    degrees than 1 stay as they are; each graph stays at ``ep = cp = 1``, fitting or not,
    so the search can say why it does not)."""
    out = [
        ep_cp_graph(g, ep, cp, problem.cluster) if (g.ep, g.cp) == (1, 1) else g
        for g in problem.graphs
        for ep, cp in _degrees(problem, g)
    ]
    _check(problem, out)
    return tuple(out)


def _degrees(problem: PlacementProblem, g: StageGraph) -> list[tuple[int, int]]:
    """The (ep, cp) degrees :func:`graph_variants` tries for ``g``."""
    if (g.ep, g.cp) != (1, 1):
        return [(g.ep, g.cp)]
    devices = problem.cluster.devices
    return [
        (ep, cp)
        for cp in problem.cp_degrees
        for ep in problem.ep_degrees
        if g.experts % ep == 0 and (g.tp * cp * ep <= devices or ep * cp == 1)
    ]


def _check(problem: PlacementProblem, out: list) -> None:
    if not out:
        experts = sorted({g.experts for g in problem.graphs})
        raise ConfigError(
            f"placement problem: ep_degrees = {problem.ep_degrees} has no degree dividing the "
            f"experts per block ({', '.join(map(str, experts))}); 1 is always allowed"
        )
