"""The cluster network model: which link a transfer uses and how long a collective takes.

Devices are ranked as in Megatron-LM (tensor-parallel rank fastest, then data-parallel, then
pipeline: ``rank = tp_rank + t * (dp_rank + d * pp_rank)``), with ``devices_per_node``
consecutive ranks in a node. Hence:

* a tensor-parallel group of ``t`` devices stays inside a node when ``t <= devices_per_node``;
* the ``d`` replicas of a stage shard are ``t`` ranks apart and span nodes when
  ``t * d > devices_per_node``;
* the pipeline neighbour of a device is ``t * d`` ranks away; stage boundaries cross nodes
  whenever the job's devices span more than one node (then the bottleneck boundary does).

Collectives are ring algorithms; the formulas follow docs/models.md (one latency term per
collective): all-reduce ``alpha + 2 (n - 1) / n * bytes / bw``, reduce-scatter and all-gather
half of that volume (Patarasuk & Yuan, JPDC 2009; Thakur et al., IJHPCA 2005).
"""

from __future__ import annotations

from typing import Literal

from arch_space.accelerator import Cluster

__all__ = [
    "Link",
    "link",
    "tp_link",
    "dp_link",
    "p2p_link",
    "boundary_link",
    "p2p_s",
    "allreduce_s",
    "reduce_scatter_s",
    "all_gather_s",
    "tp_collective_s",
]

Link = tuple[float, float]  # (bandwidth bytes/s, latency s)


def link(cluster: Cluster, *, inter_node: bool) -> Link:
    """The (bandwidth, latency) of an intra-node or an inter-node link."""
    if inter_node:
        return cluster.inter_node_bandwidth_bytes_per_s, cluster.inter_node_latency_s
    return cluster.intra_node_bandwidth_bytes_per_s, cluster.intra_node_latency_s


def tp_link(cluster: Cluster, t: int) -> Link:
    """Link of a tensor-parallel group: inside a node when ``t <= devices_per_node``."""
    return link(cluster, inter_node=t > cluster.devices_per_node)


def dp_link(cluster: Cluster, t: int, d: int) -> Link:
    """Link of the data-parallel ring: across nodes when the replicas span nodes."""
    return link(cluster, inter_node=t * d > cluster.devices_per_node)


def p2p_link(cluster: Cluster, devices_used: int) -> Link:
    """Link between pipeline stages: across nodes whenever the job spans several nodes."""
    return link(cluster, inter_node=devices_used > cluster.devices_per_node)


def boundary_link(cluster: Cluster, devices_used: int, t: int, sequence_parallel: bool) -> Link:
    """The effective (bandwidth, latency) of one pipeline-boundary message.

    Without sequence parallelism the ``t`` devices of a stage hold the same activation;
    Megatron-LM sends ``1/t`` of it from each device and all-gathers it in the next stage
    (the scatter/gather optimisation, Narayanan et al. SC21 §4.1), so a message of ``B`` bytes
    takes ``alpha + B / (t bw) + all_gather(B, t)``: affine in ``B``, i.e. a link with
    ``1 / bw_eff = 1 / (t bw) + (t - 1) / (t bw_tp)``. With sequence parallelism the
    activation is already split and goes as it is.
    """
    bw, lat = p2p_link(cluster, devices_used)
    if t <= 1 or sequence_parallel:
        return bw, lat
    tp_bw, tp_lat = tp_link(cluster, t)
    return 1.0 / (1.0 / (t * bw) + (t - 1) / (t * tp_bw)), lat + tp_lat


def p2p_s(nbytes: float, ln: Link) -> float:
    """One point-to-point message: latency + bytes / bandwidth."""
    bw, lat = ln
    return lat + nbytes / bw


def allreduce_s(nbytes: float, n: int, ln: Link) -> float:
    """Ring all-reduce of ``nbytes`` over ``n`` devices (0 for a single device)."""
    if n <= 1:
        return 0.0
    bw, lat = ln
    return lat + 2.0 * (n - 1) / n * nbytes / bw


def reduce_scatter_s(nbytes: float, n: int, ln: Link) -> float:
    """Ring reduce-scatter of ``nbytes`` (the full tensor) over ``n`` devices."""
    if n <= 1:
        return 0.0
    bw, lat = ln
    return lat + (n - 1) / n * nbytes / bw


def all_gather_s(nbytes: float, n: int, ln: Link) -> float:
    """Ring all-gather producing ``nbytes`` (the full tensor) on each of ``n`` devices."""
    return reduce_scatter_s(nbytes, n, ln)


def tp_collective_s(
    kind: Literal["all_reduce", "reduce_scatter", "all_gather"],
    nbytes: float,
    t: int,
    cluster: Cluster,
) -> float:
    """Time of one tensor-parallel collective on a group of ``t`` devices.

    Megatron puts two all-reduces per block in the forward pass and two in the backward pass;
    with sequence parallelism each becomes a reduce-scatter plus an all-gather, which moves
    the same bytes (Korthikanti et al. 2022, §4.2.2).
    """
    ln = tp_link(cluster, t)
    if kind == "all_reduce":
        return allreduce_s(nbytes, t, ln)
    if kind == "reduce_scatter":
        return reduce_scatter_s(nbytes, t, ln)
    return all_gather_s(nbytes, t, ln)
