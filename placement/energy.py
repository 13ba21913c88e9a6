"""The energy of one training iteration under a placement (docs/models.md, Scoring).

The time terms of :class:`~placement.iteration.IterationTime` are priced at the device's
powers, and the bytes the collectives move at the link energies; the data-parallel
collectives are those the time model prices (:func:`placement.dp_comm.dp_collectives`), so
time and energy see the same volumes.
"""

from __future__ import annotations

from arch_space.accelerator import Cluster
from placement.dp_comm import dp_collectives
from placement.ep_cp import fold_a2a, routed_bytes
from placement.iteration import EnergyRates, IterationEnergy
from placement.types import Placement
from workloads.recompute_modules import repeats_attention_core, repeats_dispatch

__all__ = ["dp_bytes", "iteration_energy"]


def dp_bytes(
    placement: Placement,
    model_parameters: float,
    expert_parameters: float = 0.0,
    bytes_per_parameter: tuple[float, float] = (2.0, 2.0),
    regather_per_micro_batch: bool = False,
):
    """Bytes all devices send in one iteration's data-parallel collectives.

    The ``n = d cp`` ranks holding the same weights run each ring; each of the ``t p n``
    devices sends ``(n - 1) / n`` of its shard's bytes per pass, ``(n - 1) P`` bytes per
    parameter byte in all; the experts' ``P_e`` (``1/ep`` on a device) run over the ``n / ep``
    ranks holding the same experts, ``(n / ep - 1) P_e``. ``bytes_per_parameter`` are the
    gradients' and the weights' (:func:`placement.dp_comm.dp_collectives`).
    """
    lay = placement.layout
    n = lay.d * lay.cp
    n_expert = max(n // lay.ep_d, 1)
    moved = (n - 1) * (model_parameters - expert_parameters) + (n_expert - 1) * expert_parameters
    return sum(
        c.count * c.passes * c.bytes_per_parameter * moved
        for c in dp_collectives(
            lay.zero, placement.micro_batches, *bytes_per_parameter, regather_per_micro_batch
        )
    )


def iteration_energy(
    placement: Placement, rates: EnergyRates, cluster: Cluster, micro_batches: int
) -> IterationEnergy:
    """Energy of one iteration over all devices of ``cluster`` (docs/models.md).

    Dynamic op energy per micro-batch times the ``micro_batches`` of the global batch;
    pipeline and data-parallel traffic at the link energy; static power of every device over
    the whole iteration, split by the bottleneck device's timeline into the time it computes
    (``static_j``) and the time it waits (``idle_j``: bubble, exposed communication, optimizer
    step; a waiting device draws its idle power, the static power calibrated to P0 idle); the
    hosts of every node over the whole iteration.
    """
    lay = placement.layout
    t, p, cp = lay.t, lay.p, lay.cp
    ep, stride, share = fold_a2a(t, lay.ep_d, cp, lay.sp, lay.folds_experts)
    n = lay.d * cp
    links = lay.links(cluster)

    def pj_per_bit(inter_node: bool) -> float:
        if inter_node:
            return rates.inter_node_link_pj_per_bit
        return rates.intra_node_link_pj_per_bit

    dp = dp_bytes(
        placement,
        rates.model_parameters,
        rates.expert_parameters,
        (rates.gradient_bytes_per_parameter, rates.weight_bytes_per_parameter),
        rates.regather_per_micro_batch,
    )
    # Activations forward and their gradients backward at each of the p - 1 stage boundaries,
    # sent by each of the t devices of a stage, for every micro-batch of the batch.
    p2p_bytes = 2.0 * (p - 1) * t * rates.boundary_bytes * micro_batches
    # The tied weights' 2-byte gradients all-reduced between the first and the last stage:
    # each of the two ranks of every (tensor, data, context) rank sends its copy's bytes.
    copies = sum(st.tied_parameters for st in placement.stages)
    p2p_bytes += 2.0 * 2.0 * copies * t * n
    # Four token all-to-alls per MoE block (six when recompute rebuilds the MoE layer),
    # (ep-1)/ep of each device's dispatch bytes leaving it; the K/V ring's cp - 1 chunks per
    # pass, three passes (forward, backward K/V and their gradients; four when recompute
    # rebuilds the attention core) (:mod:`placement.ep_cp`). With node-limited routing the
    # copies split between the network and NVLink as the time model sends them
    # (placement.ep_cp.routed_bytes).
    a2a_count = 6 if repeats_dispatch(lay.recompute) else 4
    sent = share * rates.dispatch_bytes
    a2a_bytes = a2a_count * (ep - 1) / ep * t * sent * micro_batches
    a2a_j = a2a_bytes * pj_per_bit(links.ep)
    if rates.routing[2] and links.ep:
        net_b, nvl_b = routed_bytes(sent, ep, stride, cluster, rates.routing)
        scale = a2a_count * t * micro_batches
        a2a_j = scale * (float(net_b) * pj_per_bit(True) + float(nvl_b) * pj_per_bit(False))
    ring_count = 4 if repeats_attention_core(lay.recompute) else 3
    ring_bytes = ring_count * (cp - 1) * t * rates.kv_bytes * micro_batches
    # pipeline sends are priced on the data-parallel group's link, as the rings they share
    # a node with (docs/models.md)
    link_j = (
        (dp + p2p_bytes) * pj_per_bit(links.dp) + a2a_j + ring_bytes * pj_per_bit(links.cp)
    ) * (8 * 1e-12)
    bd = placement.breakdown
    busy_s = min(bd.compute_s + bd.recompute_s, bd.iteration_s)
    static_w = cluster.devices * rates.static_w_per_device
    return IterationEnergy(
        compute_j=rates.compute_j * micro_batches,
        memory_j=rates.memory_j * micro_batches,
        static_j=static_w * busy_s,
        network_j=rates.network_j * micro_batches + link_j,
        idle_j=static_w * (bd.iteration_s - busy_s),
        host_j=cluster.host_share * rates.host_w_per_node * bd.iteration_s,
    )
