"""The ledger of one iteration's collectives: each recorded once, priced for time and energy.

A :class:`Collective` says what moves (its ``kind`` over a ``group`` of ranks, the message's
``bytes``), on which ``link``, how the schedule hides it (``overlap``) and how often it runs
per iteration on each of the ``devices`` running it. The bytes each device sends follow the
ring and all-to-all algorithms (Patarasuk & Yuan, JPDC 2009; Thakur et al., IJHPCA 2005):
an all-reduce of ``B`` bytes over ``n`` ranks sends ``2 (n - 1) / n B``, a reduce-scatter or
all-gather ``(n - 1) / n B``, an all-to-all of ``B`` dispatch bytes ``(n - 1) / n B``, a ring
pass ``n - 1`` chunks of ``B`` and a send ``B`` (:attr:`Collective.volume`). A routed
all-to-all (node-limited routing, :func:`placement.ep_cp.routed_bytes`) names the bytes it
sends across the network and over NVLink itself (``routed``).

:func:`collective_s` prices a record's time on the one link model
(:func:`arch_space.perf.multinode.measured_link`), :func:`link_energy_j` its energy at the
link's energy per bit: both read the same record, so time and energy move the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np

from arch_space.accelerator import Cluster
from arch_space.perf.device import CollectiveCurve
from arch_space.perf.multinode import bytes_sent_per_byte
from placement import network as net

__all__ = [
    "A2A_PER_MOE_BLOCK",
    "KINDS",
    "KV_RING_PASSES",
    "Collective",
    "LinkPrices",
    "PricedCollective",
    "collective_s",
    "ledger_bytes",
    "link_energy_j",
    "priced",
]

Kind = Literal["all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send", "ring_pass"]
KINDS: Final = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send", "ring_pass")
# a MoE block's token all-to-alls per micro-batch: a dispatch and a combine in the forward
# pass, both again in the backward pass, and in a recompute that rebuilds the MoE layer
A2A_PER_MOE_BLOCK: Final = {"forward": 2, "backward": 2, "recompute": 2}
# the K/V ring passes of context parallelism per micro-batch: the K/V forward, the K/V and
# their gradients backward, the K/V again in a recompute of the attention core
KV_RING_PASSES: Final = {"forward": 1, "backward": 2, "recompute": 1}

_BITS_PER_BYTE: Final = 8
_PJ: Final = 1e-12


@dataclass(frozen=True, slots=True)
class Collective:
    """``count`` collectives of ``kind`` per iteration on each of ``devices`` devices, over
    the ``group`` ranks of the ``parallel`` dimension (``tp``, ``dp``, ``pp``, ``ep``,
    ``cp``, ``tied``), each of ``bytes``: a ring collective's full tensor, the dispatch
    bytes a device puts into an all-to-all, a send's message, a ring pass's chunk. ``inter``:
    on the inter-node link (else the intra-node one); ``overlap`` how the schedule runs it
    (``exposed``, ``scheduled`` inside the layer passes, ``after_backward`` or
    ``per_micro_batch`` for the data-parallel ones, ``beside_compute``); ``routed``: the
    (network, NVLink) bytes a routed all-to-all sends per device, which replace the closed
    form; ``stride``: how many ranks apart the group's members are (the NICs a ring across
    nodes drives in each node, :func:`placement.network.members_per_node`)."""

    kind: Kind
    parallel: str
    group: int
    bytes: float
    inter: bool
    count: float
    devices: int
    overlap: str = "exposed"
    routed: tuple[float, float] | None = None
    stride: int = 1

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"collective kind {self.kind!r} is not one of {', '.join(KINDS)}")

    @property
    def volume(self) -> float:
        """Bytes each device sends per byte of :attr:`bytes` in one collective
        (:func:`arch_space.perf.multinode.bytes_sent_per_byte`)."""
        return float(bytes_sent_per_byte(self.kind, self.group))

    def sent_bytes(self) -> tuple[float, float]:
        """(intra-node, inter-node) bytes all its devices send over the iteration."""
        times = self.count * self.devices
        if self.routed is not None:
            network, nvlink = self.routed
            return times * nvlink, times * network
        sent = times * self.volume * self.bytes
        return (0.0, sent) if self.inter else (sent, 0.0)

    @property
    def total_bytes(self) -> float:
        """Bytes all its devices send over the iteration."""
        return sum(self.sent_bytes())


def ledger_bytes(ledger: Iterable[Collective], parallel: str | None = None) -> float:
    """Bytes the collectives of ``ledger`` (of the ``parallel`` dimension, or all) send."""
    return sum(c.total_bytes for c in ledger if parallel is None or c.parallel == parallel)


def link_energy_j(ledger: Iterable[Collective], intra_pj_per_bit: float, inter_pj_per_bit: float):
    """Joules the collectives of ``ledger`` spend on the links: every byte sent at its
    link's energy per bit."""
    total = 0.0
    for c in ledger:
        intra, inter = c.sent_bytes()
        total += (intra * intra_pj_per_bit + inter * inter_pj_per_bit) * _BITS_PER_BYTE * _PJ
    return total


def collective_s(c: Collective, cluster: Cluster, curve: CollectiveCurve | None = None) -> float:
    """Seconds one device spends in ``c`` over the iteration, end to end (before any
    overlap hides it): ``count`` times one collective's latency plus its sent bytes over
    the link's rate. Ring collectives and sends run at the rates of the one link model
    (:func:`placement.network.collective_link`, :func:`placement.network.measured_link`);
    all-to-alls and ring passes at the
    group's link, as :mod:`placement.ep_cp` prices them (a routed all-to-all's network and
    NVLink parts at once)."""
    if c.count == 0 or c.bytes <= 0 or c.group <= 1 and c.kind != "send":
        return 0.0
    if c.kind in ("all_reduce", "reduce_scatter", "all_gather"):
        per_node = net.members_per_node(cluster, c.stride, c.group)
        bw, lat = net.collective_link(
            cluster, curve, c.inter, c.bytes, c.kind == "all_reduce", c.group, per_node
        )
        one = float(lat) + c.volume * c.bytes / float(bw)
    elif c.kind == "send":
        bw, lat = net.measured_link(cluster, curve, c.inter, c.bytes, "p2p")
        one = float(lat) + c.bytes / float(bw)
    elif c.routed is not None:
        network, nvlink = c.routed
        bw_net, lat_net = net.link(cluster, inter_node=True)
        bw_nvl, lat_nvl = net.link(cluster, inter_node=False)
        one = (
            lat_net + max(network / bw_net, nvlink / bw_nvl)
            if network > 0
            else (lat_nvl + nvlink / bw_nvl)
        )
    else:
        bw, lat = net.link(cluster, inter_node=c.inter)
        steps = c.group - 1 if c.kind == "ring_pass" else 1
        one = steps * lat + c.volume * c.bytes / bw
    return c.count * float(np.float64(one))


@dataclass(frozen=True, slots=True)
class PricedCollective:
    """A ledger record with what it costs over the iteration: the bytes all its devices
    send, its seconds end to end (:func:`collective_s`) and its link energy."""

    collective: Collective
    sent_bytes: float
    time_s: float
    energy_j: float


@dataclass(frozen=True, slots=True)
class LinkPrices:
    """What prices a ledger: the cluster's links, the device's measured collective curve
    inside a node (None: the line rates) and the links' energy per bit."""

    cluster: Cluster
    curve: CollectiveCurve | None
    intra_pj_per_bit: float
    inter_pj_per_bit: float


def priced(ledger: Iterable[Collective], prices: LinkPrices) -> tuple[PricedCollective, ...]:
    """Each record of ``ledger`` with its bytes, time and energy, all from the record."""
    pj = (prices.intra_pj_per_bit, prices.inter_pj_per_bit)
    return tuple(
        PricedCollective(
            c,
            c.total_bytes,
            collective_s(c, prices.cluster, prices.curve),
            link_energy_j((c,), *pj),
        )
        for c in ledger
    )
