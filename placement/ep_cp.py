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

**Folded over tensor x data ranks** (Megatron-Core's ``--expert-tensor-parallel-size 1``):
``ep = t e`` ranks holding whole experts, ``e`` dividing ``d``, at ``cp = 1``. The layer
figures are those of the graph at ``ep = e`` (the same expert parameters per rank, expert
data-parallel degree and group span); only the all-to-all runs over the ``t e`` consecutive
ranks, each sending its ``1/t`` of the tokens (:func:`fold_a2a`).

**Node-limited routing** (DeepSeek-V3 report, arXiv:2412.19437 §2.1.2 and §3.2.2; DeepEP's
internode kernels): with group-limited routing (the graph's ``expert_groups`` and
``routed_groups``, DeepSeek-V3's ``n_group = 8``, ``topk_group = 4``) a token's ``top_k``
copies reach at most ``c = min(top_k, routed_groups * ceil(N / expert_groups), N)`` of the
``N`` nodes the expert group spans. Each token crosses the network once per node it reaches
(``(N - 1) / N`` of those copies leave its own node) and is forwarded over NVLink inside the
node to the GPUs holding its experts (``(g - 1) / g`` of the ``top_k`` copies, ``g`` the
group's ranks per node); DeepEP runs the two at once, so an all-to-all takes
``alpha_net + max(net_bytes / bw_net, nvlink_bytes / bw_nvlink)`` (:func:`a2a_bytes`). A
graph without group-limited routing keeps the plain all-to-all above; a stack with DeepEP's or
HybridEP's kernels (a framework profile's ``moe_dispatcher = "flex"``) gives its graph one
group holding every expert, so its tokens reach at most ``min(top_k, N)`` nodes, once each
(:func:`workloads.build.build_layer_graph`).

**Overlapped all-to-alls** (DeepSeek's DualPipe, report §3.2.1; Megatron-Core's combined
1F1B, ``--overlap-moe-expert-parallel-comm``, docs "Combined 1F1B: Expert-Parallel
All-to-All Overlap"): the dispatch and combine of one micro-batch run beside the forward and
backward compute of another, so per MoE layer the four all-to-alls of a forward and a
backward overlap that layer's forward and backward compute, which runs on the SMs left to
it (a share ``s`` of them runs the communication kernels: 20 of 132 in DeepSeek-V3, §3.2.2).
The pair takes ``max(4 a2a, (fwd + bwd) / (1 - s))``; what exceeds ``fwd + bwd`` is the
layer's exposed ``ep_comm_s`` (``max(0, 4 a2a - (fwd + bwd))`` with ``s = 0``). A full
recompute's all-to-alls stay on the critical path.

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
from arch_space.perf.multinode import bytes_sent_per_byte
from phaze_common.errors import ConfigError
from placement import network as net
from placement.collectives import A2A_PER_MOE_BLOCK, KV_RING_PASSES
from placement.types import PlacementProblem, StageEdge, StageGraph
from workloads.recompute_modules import repeats_attention_core, repeats_dispatch

__all__ = [
    "COLUMNS",
    "Variant",
    "a2a_bytes",
    "all_to_all_s",
    "ep_cp_graph",
    "fold_a2a",
    "graph_variants",
    "layer_columns",
    "ring_s",
    "routed_bytes",
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
    return np.where(nbytes > 0, lat + bytes_sent_per_byte("all_to_all", n) * nbytes / bw, 0.0)


def a2a_bytes(nbytes, graph: StageGraph, ep: int, cp: int, cluster: Cluster, stride: int = 0):
    """(network, NVLink) bytes one device sends in a token all-to-all of ``nbytes`` dispatch
    bytes (``top_k`` copies of its tokens) over ``graph``'s expert group of ``ep`` ranks
    ``stride`` apart (0: ``t * cp``, the group along the data-parallel ranks; see the module
    docstring; :func:`routed_bytes` with the graph's routing).

    >>> from arch_space import Cluster
    >>> from placement.types import StageGraph, StageLayer
    >>> layer = StageLayer("b", 1.0, 2.0, parameters=1, stash_bytes=0.0)
    >>> g = StageGraph((layer,), (), experts=256, top_k=8, expert_groups=8, routed_groups=4)
    >>> net_b, nvl_b = a2a_bytes(8.0, g, 64, 1, Cluster(devices=64, devices_per_node=8))
    >>> float(net_b), float(nvl_b)  # 4 of 8 copies cross, 7/8 of them; 7/8 forwarded
    (3.5, 7.0)
    """
    routing = (graph.top_k, graph.expert_groups, graph.routed_groups)
    return routed_bytes(nbytes, ep, stride or graph.tp * cp, cluster, routing)


def routed_bytes(nbytes, ep: int, stride: int, cluster: Cluster, routing: tuple[int, int, int]):
    """(network, NVLink) bytes one device sends in a token all-to-all of ``nbytes`` over an
    expert group of ``ep`` ranks ``stride`` apart, with ``routing`` = (``top_k``,
    ``expert_groups``, ``routed_groups``). Without group-limited routing every copy that
    leaves the device rides the group's link: ``(ep - 1) / ep`` of ``nbytes``, all on the
    network when the group spans nodes. Arrays broadcast."""
    top_k, expert_groups, routed_groups = routing
    nbytes = np.asarray(nbytes, dtype=np.float64)
    if ep <= 1:
        return np.zeros_like(nbytes), np.zeros_like(nbytes)
    sent = (ep - 1) / ep * nbytes
    if not cluster.spans_nodes(stride * ep):
        return np.zeros_like(nbytes), sent
    if not routed_groups:
        return sent, np.zeros_like(nbytes)
    g = int(net.members_per_node(cluster, stride, ep))
    nodes = -(-ep // g)
    copies = min(top_k, routed_groups * -(-nodes // expert_groups), nodes)
    return nbytes / top_k * copies * (nodes - 1) / nodes, nbytes * (g - 1) / g


def _a2a_s(nbytes: np.ndarray, graph: StageGraph, ep: int, cp: int, cluster: Cluster, stride: int):
    """Time of each all-to-all of ``nbytes`` over ``ep`` ranks ``stride`` apart: network and
    NVLink parts at once, the network's latency when it is used (the group's link
    otherwise)."""
    inter, intra = a2a_bytes(nbytes, graph, ep, cp, cluster, stride)
    bw_net, lat_net = net.link(cluster, inter_node=True)
    bw_nvl, lat_nvl = net.link(cluster, inter_node=False)
    crosses = inter > 0
    lat = np.where(crosses, lat_net, lat_nvl)
    t = np.where(crosses, np.maximum(inter / bw_net, intra / bw_nvl), intra / bw_nvl)
    return np.where(nbytes > 0, lat + t, 0.0) if ep > 1 else np.zeros_like(nbytes)


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
    cols: dict[str, np.ndarray],
    graph: StageGraph,
    ep: int,
    cp: int,
    cluster: Cluster,
    overlap: float | None = None,
    fold: bool = False,
) -> dict[str, np.ndarray]:
    """The columns of ``graph``'s layers (at ``ep = cp = 1``) with ``ep`` expert- and ``cp``
    context-parallel ranks (see the module docstring). ``overlap``: the all-to-alls run
    beside another micro-batch's compute, which keeps ``1 - overlap`` of the SMs (None: on
    the critical path). ``fold``: the expert group folds over the tensor ranks too
    (:func:`fold_a2a`)."""
    ranks, stride, share = fold_a2a(graph.tp, ep, cp, graph.sequence_parallel, fold)
    sent = cols["dispatch_bytes"] / cp * share
    if graph.routed_groups:
        a2a = _a2a_s(sent, graph, ranks, cp, cluster, stride)
    else:
        a2a = _all_to_all(sent, ranks, net.group_link(cluster, stride * ranks))
    ring = _ring(cols["kv_bytes"] / cp, cp, net.group_link(cluster, graph.tp * cp))
    fwd, bwd, rec = cols["fwd_s"] / cp, cols["bwd_s"] / cp, cols["recompute_s"] / cp
    none = np.zeros_like(fwd)
    kv, runs = KV_RING_PASSES, A2A_PER_MOE_BLOCK  # per pass, as the ledger counts them
    cp_f = np.maximum(kv["forward"] * ring - fwd, 0.0)
    cp_b = np.maximum(kv["backward"] * ring - bwd, 0.0)
    repeat_kv = repeats_attention_core(graph.recompute)
    cp_r = np.maximum(kv["recompute"] * ring - rec, 0.0) if repeat_kv else none
    ep_r = runs["recompute"] * a2a if repeats_dispatch(graph.recompute) else none
    ep_f, ep_b = runs["forward"] * a2a, runs["backward"] * a2a
    if overlap is not None:  # the layer's forward and backward beside their all-to-alls
        hidden = fwd + bwd
        paired = np.maximum(ep_f + ep_b, hidden / (1.0 - overlap))
        ep_f = ep_b = np.where(a2a > 0, paired - hidden, 0.0) / 2.0
    expert = cols["expert_parameters"] / ep
    return {
        **cols,
        "fwd_s": fwd + ep_f + cp_f,
        "bwd_s": bwd + ep_b + cp_b,
        "recompute_s": rec + ep_r + cp_r,
        "parameters": cols["parameters"] - cols["expert_parameters"] + expert,
        "expert_parameters": expert,
        "stash_bytes": cols["stash_bytes"] / cp,
        "workspace_bytes": cols["workspace_bytes"] / cp,
        "dispatch_bytes": cols["dispatch_bytes"] / cp,
        "kv_bytes": cols["kv_bytes"] / cp,
        "tp_comm_s": cols["tp_comm_s"] / cp,
        "ep_comm_s": ep_f + ep_b,
        "cp_comm_s": cp_f + cp_b,
    }


def fold_a2a(t: int, ep: int, cp: int, sp: bool, fold: bool) -> tuple[int, int, float]:
    """(ranks, stride, share of a device's ``dispatch_bytes`` it sends) of the token
    all-to-all of an expert group split ``ep`` ways along the data-parallel ranks.

    Unfolded, ``ep`` ranks ``t * cp`` apart, each expert sharded over the ``t`` tensor
    ranks. Folded over tensor x data ranks (Megatron-Core's ``--expert-tensor-parallel-size
    1`` with ``--expert-model-parallel-size t * ep``; ``cp = 1``), the ``t * ep``
    consecutive ranks hold whole experts and each dispatches its ``1/t`` of the tokens (the
    sequence-parallel shard; without sequence parallelism the ``t`` ranks split their
    common tokens).

    >>> fold_a2a(2, 4, 1, True, False), fold_a2a(2, 4, 1, True, True)
    ((4, 2, 1.0), (8, 1, 1.0))
    >>> fold_a2a(2, 4, 1, False, True)
    (8, 1, 0.5)
    """
    if not fold:
        return ep, t * cp, 1.0
    return t * ep, 1, 1.0 if sp or t == 1 else 1.0 / t


def ep_cp_graph(
    graph: StageGraph,
    ep: int,
    cp: int,
    cluster: Cluster,
    overlap: float | None = None,
    fold: bool = False,
) -> StageGraph:
    """``graph`` (at ``ep = cp = 1``) with ``ep`` expert- and ``cp`` context-parallel ranks
    (see the module docstring; ``overlap`` and ``fold`` as in :func:`scaled_columns`);
    ``graph`` itself when both are 1 and nothing folds."""
    if ep == 1 and cp == 1 and not (fold and graph.tp > 1):
        return graph
    if (graph.ep, graph.cp) != (1, 1):
        raise ValueError(f"graph is already at ep={graph.ep}, cp={graph.cp}")
    cols = scaled_columns(layer_columns(graph), graph, ep, cp, cluster, overlap, fold)
    values = np.stack([cols[k] for k in _CHANGED], axis=1).tolist()
    return replace(
        graph,
        layers=tuple(
            replace(x, **dict(zip(_CHANGED, row, strict=True)))
            for x, row in zip(graph.layers, values, strict=True)
        ),
        edges=tuple(StageEdge(e.src, e.dst, e.bytes / cp) for e in graph.edges),
        layout=replace(graph.layout, ep=ep, cp=cp),
    )


@dataclass(frozen=True, eq=False)
class Variant:
    """A graph the search tries at (``ep``, ``cp``): what its bounds and DP read (the layer
    ``columns`` and the edges' ``(src, dst, bytes)`` at those degrees) at once, its
    :class:`StageGraph` only when asked (:attr:`graph`, from :func:`ep_cp_graph`), as a
    search builds few of them. ``cluster`` (None for a graph at its own degrees) sets the
    all-to-all and ring links; ``overlap`` whether the all-to-alls overlap compute
    (:func:`scaled_columns`).
    """

    base: StageGraph
    ep: int
    cp: int
    cluster: Cluster | None
    columns: dict[str, np.ndarray]
    edges: tuple[tuple[int, int, float], ...]
    overlap: float | None = None

    @classmethod
    def at(
        cls,
        base: StageGraph,
        ep: int,
        cp: int,
        cluster: Cluster | None,
        columns: dict[str, np.ndarray] | None = None,
        overlap: float | None = None,
    ) -> Variant:
        """``base`` at (``ep``, ``cp``); ``columns`` are ``base``'s if already read."""
        cols = layer_columns(base) if columns is None else columns
        at_base = (ep, cp) == (base.ep, base.cp)
        if not at_base:
            cols = scaled_columns(cols, base, ep, cp, cluster, overlap)
        split = 1 if at_base else cp  # a boundary message splits over the cp ranks
        edges = sorted(base.edges, key=lambda e: (e.src, e.dst))
        return cls(
            base,
            ep,
            cp,
            cluster,
            cols,
            tuple((e.src, e.dst, e.bytes / split) for e in edges),
            overlap,
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
        return ep_cp_graph(self.base, self.ep, self.cp, self.cluster, self.overlap)


def variants(problem: PlacementProblem) -> tuple[Variant, ...]:
    """:func:`graph_variants` as :class:`Variant` s, none built yet."""
    out = []
    for g in problem.graphs:
        cols = layer_columns(g)
        out += [
            Variant.at(g, ep, cp, problem.cluster, cols, problem.a2a_overlap)
            for ep, cp in _degrees(problem, g)
        ]
    _check(problem, out)
    return tuple(out)


def graph_variants(problem: PlacementProblem) -> tuple[StageGraph, ...]:
    """Every graph of ``problem`` at each of its ``ep`` degrees dividing the graph's experts
    and each of its ``cp`` degrees whose ranks fit the devices (graphs given at other
    degrees than 1 stay as they are; each graph stays at ``ep = cp = 1``, fitting or not,
    so the search can say why it does not)."""
    out = [
        ep_cp_graph(g, ep, cp, problem.cluster, problem.a2a_overlap)
        if (g.ep, g.cp) == (1, 1)
        else g
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
