"""Time, traffic and link energy of the collective ops of an op graph (docs/models.md).

Collectives on the tensor-parallel group of ``t`` devices run ring algorithms (Patarasuk &
Yuan, JPDC 2009; Thakur, Rabenseifner & Gropp, IJHPCA 2005) with one latency term per
collective, as in ``placement.network``: all-reduce ``alpha + 2(t-1)/t * bytes/bw``;
reduce-scatter and all-gather ``alpha + (t-1)/t * bytes/bw``. The rates are the one link
model of every collective (:func:`arch_space.perf.multinode.collective_link`): intra-node
when the group of ``t`` consecutive ranks fits in a node, where a preset with a measured
collective curve (:mod:`arch_space.perf.device`) runs at the bus bandwidth measured at the
collective's size (latency included); across nodes the ``t`` ranks' ring drives the NICs of
the members in each node, never faster than inside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from arch_space.accelerator import Cluster
from arch_space.perf.device import DeviceProfile
from arch_space.perf.multinode import bytes_sent_per_byte, collective_link, members_per_node
from arch_space.perf.settings import PerfSettings

__all__ = ["RingTerms", "ring_terms"]

_BITS_PER_BYTE: Final = 8


@dataclass(frozen=True, slots=True)
class RingTerms:
    """Per-op arrays of the collectives (zero for every other op)."""

    sent_bytes: np.ndarray  # bytes each device sends (none for a compute share)
    network_s: np.ndarray
    network_pj: np.ndarray


def ring_terms(
    collective_bytes: np.ndarray,
    group: np.ndarray,
    all_reduce: np.ndarray,
    is_coll: np.ndarray,
    is_share: np.ndarray,
    cluster: Cluster,
    settings: PerfSettings,
    device: DeviceProfile,
) -> RingTerms:
    """Ring time, bytes sent and link energy of the ``is_coll`` ops of ``collective_bytes``
    over ``group`` devices (the slowest link of each distinct group); ``all_reduce`` marks
    the all-reduces (two passes) and ``is_share`` the compute shares of collectives (timed
    like their collective but sending nothing)."""
    t = np.maximum(group, 1.0)
    inter = cluster.spans_nodes(t)
    pj_per_bit = np.where(
        inter, settings.inter_node_link_pj_per_bit, settings.intra_node_link_pj_per_bit
    )
    volume = np.where(
        all_reduce, bytes_sent_per_byte("all_reduce", t), bytes_sent_per_byte("all_gather", t)
    )
    sent = np.where(is_coll & ~is_share, volume * collective_bytes, 0.0)
    per_node = members_per_node(cluster, 1, t)
    bw, alpha = collective_link(
        cluster, device.intra_node, inter, collective_bytes, all_reduce, t, per_node
    )
    return RingTerms(
        sent_bytes=sent,
        network_s=np.where(is_coll, alpha + volume * collective_bytes / bw, 0.0),
        network_pj=sent * _BITS_PER_BYTE * pj_per_bit,
    )
