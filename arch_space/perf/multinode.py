"""The one link model of collectives and sends: which rate and latency a transfer gets.

Every collective of an iteration, the tensor-parallel ones of :mod:`arch_space.perf.ring` and
the data-, pipeline-, expert- and context-parallel ones of :mod:`placement`, is priced on
:func:`measured_link` (and, for a ring across nodes, :func:`ring_latency_s`).

NCCL runs one ring per NIC, so a collective whose group has ``k`` members in each node drives
``k`` of the node's NICs at once; its bus bandwidth across nodes is ``k`` NIC shares times
the fraction of the NICs' line rate measured rings reach at large messages
(``arch_space/data/measured_nccl_multinode.toml``: DGX A100 192 of 200 GB/s, DGX H100 380 of
400 GB/s, 248 H200 nodes 350 of 400 GB/s).
"""

from __future__ import annotations

import math
from functools import cache
from typing import Final, Literal

import numpy as np

from arch_space._data import shipped_toml
from arch_space.accelerator import Cluster
from arch_space.perf.device import CollectiveCurve
from phaze_common.errors import ConfigError

__all__ = [
    "bytes_sent_per_byte",
    "collective_link",
    "measured_link",
    "members_per_node",
    "nccl_ring_latency",
    "nic_busbw_fraction",
    "ring_latency_s",
]

_DATA_FILE: Final = "measured_nccl_multinode.toml"


@cache
def nic_busbw_fraction() -> float:
    """Mean ``busbw / NIC line rate`` of the measured multi-node all-reduce plateaus that give
    the nodes' NIC rate, in-network reductions (SHARP) left out.

    >>> 0.85 < nic_busbw_fraction() < 1.0
    True
    """
    points = [
        p
        for p in shipped_toml(_DATA_FILE).get("point", ())
        if "nic_bytes_per_s_per_node" in p and not p.get("in_network_reduction", False)
    ]
    shares = [p["busbw_bytes_per_s"] / p["nic_bytes_per_s_per_node"] for p in points]
    if not shares or not all(0 < s <= 1 for s in shares):
        raise ConfigError(
            f"{_DATA_FILE}: the [[point]]s with nic_bytes_per_s_per_node must give at least one "
            f"bus bandwidth in (0, 1] of the NICs' rate (got {shares})"
        )
    return math.fsum(shares) / len(shares)


_RING_LATENCY_KEYS: Final = ("base_s", "nvlink_hop_s", "net_hop_s")


@cache
def nccl_ring_latency() -> tuple[float, float, float]:
    """(base, NVLink hop, network hop) seconds of NCCL's ring latency model
    (``[ring_latency]``): a ring collective of ``n`` steps, ``k`` of them across nodes, takes
    ``base + (n - k) nvlink_hop + k net_hop`` before its bytes.

    >>> base, nvlink, net = nccl_ring_latency()
    >>> 0 < nvlink < net
    True
    """
    table = shipped_toml(_DATA_FILE).get("ring_latency", {})
    values = [table.get(k) for k in _RING_LATENCY_KEYS]
    ok = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    if not ok or not all(0 <= v < 1e-3 for v in values):
        raise ConfigError(
            f"{_DATA_FILE} [ring_latency]: {', '.join(_RING_LATENCY_KEYS)} must be seconds in "
            f"[0, 1e-3) (got {values})"
        )
    return tuple(float(v) for v in values)


def bytes_sent_per_byte(kind: str, members):
    """Bytes each of ``members`` ranks sends per byte of a collective's message, by the ring
    and pairwise algorithms (Patarasuk & Yuan, JPDC 2009; Thakur et al., IJHPCA 2005): an
    all-reduce ``2 (n - 1) / n`` of the tensor, a reduce-scatter, all-gather or all-to-all
    ``(n - 1) / n``, a ring pass ``n - 1`` chunks, a send its message. Arrays broadcast.

    >>> bytes_sent_per_byte("all_reduce", 4), bytes_sent_per_byte("all_to_all", 4)
    (1.5, 0.75)
    """
    n = np.maximum(members, 1) if isinstance(members, np.ndarray) else max(members, 1)
    if kind == "all_reduce":
        return 2.0 * (n - 1) / n
    if kind in ("reduce_scatter", "all_gather", "all_to_all"):
        return (n - 1) / n
    if kind == "ring_pass":
        return n - 1.0
    if kind == "send":
        return n * 0 + 1.0
    raise ValueError(f"collective kind {kind!r} has no closed form")


def _link(cluster: Cluster, inter_node: bool) -> tuple[float, float]:
    if inter_node:
        return cluster.inter_node_bandwidth_bytes_per_s, cluster.inter_node_latency_s
    return cluster.intra_node_bandwidth_bytes_per_s, cluster.intra_node_latency_s


def measured_link(
    cluster: Cluster,
    curve: CollectiveCurve | None,
    inter_node: np.ndarray | bool,
    nbytes: np.ndarray | float,
    kind: Literal["all_reduce", "ring", "p2p"],
    volume: np.ndarray | float = 1.0,
    per_node: np.ndarray | int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """(bandwidth, latency) arrays of a transfer of ``nbytes`` (a collective's full tensor,
    or one send) of ``kind``: an all-reduce, another ring collective (reduce-scatter,
    all-gather) or a point-to-point send (:func:`collective_link` for a mix of kinds).

    Inside a node with a measured ``curve`` the bandwidth is the line rate times the measured
    efficiency at that type and size and the latency is in it (zero); otherwise the link's.
    Across nodes the bandwidth is lowered, where needed, so that the transfer takes at least
    as long as inside the node (the measured small-message floor is the collective library's,
    on any link); ``volume`` is the bytes each device sends per byte of ``nbytes``
    (``2 (n - 1) / n`` for an all-reduce over ``n``), which that comparison needs. A ring
    collective across nodes with ``per_node`` members in each node runs one ring per member's
    NIC: ``per_node`` NIC shares at the measured fraction of their line rate
    (:func:`nic_busbw_fraction`), at most the intra-node link.
    """
    if kind == "p2p":
        return _priced(cluster, curve, inter_node, nbytes, None, volume, per_node)
    size = np.asarray(nbytes, dtype=np.float64)
    flags = np.full(size.shape, kind == "all_reduce")
    return _priced(cluster, curve, inter_node, size, flags, volume, per_node)


def collective_link(
    cluster: Cluster,
    curve: CollectiveCurve | None,
    inter_node: np.ndarray | bool,
    nbytes: np.ndarray | float,
    all_reduce: np.ndarray | bool,
    members: np.ndarray | int,
    per_node: np.ndarray | int,
) -> tuple[np.ndarray, np.ndarray]:
    """(bandwidth, latency) of ring collectives of ``nbytes`` over ``members`` ranks,
    ``per_node`` of them in each node, all-reduces where ``all_reduce`` (two passes) and
    reduce-scatters or all-gathers elsewhere: :func:`measured_link`, and across nodes a
    reduce-scatter's or all-gather's latency is NCCL's ring model (:func:`ring_latency_s`).
    Arrays broadcast."""
    size = np.asarray(nbytes, dtype=np.float64)
    flags = np.broadcast_to(np.asarray(all_reduce, dtype=bool), size.shape)
    n = np.maximum(np.asarray(members, dtype=np.float64), 1.0)
    volume = np.where(
        flags, bytes_sent_per_byte("all_reduce", n), bytes_sent_per_byte("all_gather", n)
    )
    bw, lat = _priced(cluster, curve, inter_node, size, flags, volume, per_node)
    inter = np.asarray(inter_node, dtype=bool)
    if np.any(inter & ~flags):
        lat = np.where(inter & ~flags, ring_latency_s(n, per_node), lat)
    return bw, lat


def _priced(cluster, curve, inter_node, nbytes, all_reduce, volume, per_node):
    """:func:`measured_link` for sends (``all_reduce`` None) or ring collectives
    (``all_reduce`` marking the all-reduces)."""
    inter = np.asarray(inter_node, dtype=bool)
    size = np.asarray(nbytes, dtype=np.float64)
    intra_bw, intra_lat = _link(cluster, False)
    inter_bw, inter_lat = _link(cluster, True)
    if all_reduce is not None:
        inter_bw = np.minimum(inter_bw * np.asarray(per_node) * nic_busbw_fraction(), intra_bw)
    if curve is None:
        return np.where(inter, inter_bw, intra_bw), np.where(inter, inter_lat, intra_lat)
    if all_reduce is None:
        eff = curve.p2p_efficiency(size)
    else:
        eff = curve.efficiency(size, all_reduce)
    sent = np.asarray(volume) * size
    # the inter-node bandwidth with which latency + sent / bandwidth >= the intra-node time
    gap = np.maximum(sent / (intra_bw * eff) - inter_lat, 0.0)
    floor_bw = np.where(gap > 0, sent / np.where(gap > 0, gap, 1.0), np.inf)
    bw = np.where(inter, np.minimum(inter_bw, floor_bw), intra_bw * eff)
    return bw, np.where(inter, inter_lat, 0.0)


def ring_latency_s(members, per_node):
    """Latency of one ring reduce-scatter or all-gather over ``members`` ranks with
    ``per_node`` of them in each node: NCCL's own model of its Simple-protocol ring,
    a base latency plus one hop latency per ring step, ``members - 1`` steps of which
    ``nodes - 1`` cross the network (``ring_latency`` of
    ``arch_space/data/measured_nccl_multinode.toml``). Arrays broadcast."""
    base_s, nvlink_hop_s, net_hop_s = nccl_ring_latency()
    members = np.asarray(members, dtype=np.float64)
    nodes = np.ceil(members / np.maximum(per_node, 1))
    steps = np.maximum(members - 1, 0)
    net_steps = np.maximum(nodes - 1, 0)
    return base_s + (steps - net_steps) * nvlink_hop_s + net_steps * net_hop_s


def members_per_node(cluster: Cluster, stride, members):
    """Members of a group of ``members`` ranks ``stride`` apart that share a node (at least
    1): the NICs a ring over them drives in each node. Arrays broadcast.

    >>> from arch_space import Cluster
    >>> int(members_per_node(Cluster(devices=64, devices_per_node=8), 2, 32))
    4
    """
    return np.clip(cluster.devices_per_node // np.maximum(stride, 1), 1, np.maximum(members, 1))
