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
half of that volume (Patarasuk & Yuan, JPDC 2009; Thakur et al., IJHPCA 2005). Inside a node,
a device with a measured collective curve (:class:`~arch_space.perf.device.CollectiveCurve`)
runs each collective and send at the bus bandwidth measured at its type and size, latency
included (:func:`measured_link`); across nodes the link's latency and bandwidth hold (a ring
collective with ``k`` members in each node drives ``k`` NICs at the measured share of their
line rate, :func:`arch_space.perf.multinode.nic_busbw_fraction`), but a transfer is never
faster than the same one inside a node. That link model lives in
:mod:`arch_space.perf.multinode` (re-exported here), where the tensor-parallel collectives
of the op cost model read it too.
"""

from __future__ import annotations

from typing import Literal

from arch_space.accelerator import Cluster
from arch_space.perf.device import CollectiveCurve
from arch_space.perf.multinode import (
    collective_link,
    measured_link,
    members_per_node,
    ring_latency_s,
)

__all__ = [
    "Link",
    "link",
    "group_link",
    "boundary_link",
    "measured_link",
    "collective_link",
    "members_per_node",
    "ring_latency_s",
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


def group_link(cluster: Cluster, span: int) -> Link:
    """Link of a group of ``span`` consecutive ranks (:class:`placement.layout.Groups`):
    across nodes when it spans them (:meth:`arch_space.Cluster.spans_nodes`)."""
    return link(cluster, inter_node=bool(cluster.spans_nodes(span)))


def boundary_link(
    cluster: Cluster,
    devices_used: int,
    t: int,
    sequence_parallel: bool,
    curve: CollectiveCurve | None = None,
    nbytes: float = 0.0,
    sends: float = 1.0,
    gathers: float = 1.0,
) -> Link:
    """The effective (bandwidth, latency) of one pipeline-boundary message of ``nbytes``.

    Without sequence parallelism the ``t`` devices of a stage hold the same activation;
    Megatron-LM sends ``1/t`` of it from each device and all-gathers it in the next stage
    (the scatter/gather optimisation, Narayanan et al. SC21 §4.1), so a message of ``B`` bytes
    takes ``alpha + B / (t bw) + all_gather(B, t)``: affine in ``B``, i.e. a link with
    ``1 / bw_eff = 1 / (t bw) + (t - 1) / (t bw_tp)``. With sequence parallelism the
    activation is already split and goes as it is. The send and the all-gather run at the
    rates :func:`measured_link` gives at the sizes of a message of ``nbytes`` (every boundary
    of a transformer chain carries the same activation).

    ``sends`` and ``gathers`` count the transfers of the boundary's tensor (or its ``1/t``
    slice) and its all-gathers that one stage runs in turn per boundary per micro-batch
    (:attr:`placement.types.PlacementProblem.p2p_sends`): the message costs their sum.
    """
    split = not (t <= 1 or sequence_parallel)
    send = nbytes / t if split else nbytes
    bw, lat = (
        float(x)
        for x in measured_link(cluster, curve, cluster.spans_nodes(devices_used), send, "p2p")
    )
    if not split:
        return bw / sends, lat * sends
    gather = measured_link(
        cluster, curve, cluster.spans_nodes(t), nbytes, "ring", 1.0, members_per_node(cluster, 1, t)
    )
    tp_bw, tp_lat = (float(x) for x in gather)
    inverse_bw = sends / (t * bw) + gathers * (t - 1) / (t * tp_bw)
    return 1.0 / inverse_bw, sends * lat + gathers * tp_lat


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
    ln = group_link(cluster, t)
    if kind == "all_reduce":
        return allreduce_s(nbytes, t, ln)
    if kind == "reduce_scatter":
        return reduce_scatter_s(nbytes, t, ln)
    return all_gather_s(nbytes, t, ln)
