"""The energy of one training iteration under a placement (docs/models.md, Scoring).

The time terms of :class:`~placement.iteration.IterationTime` are priced at the device's
powers, and the bytes the collectives move at the link energies. The collectives are the
iteration's ledger (:func:`placement.ledger.iteration_ledger`): each recorded once, with the
volumes and links the time model prices, so time and energy see the same bytes.
"""

from __future__ import annotations

from arch_space.accelerator import Cluster
from placement.collectives import Collective, ledger_bytes, link_energy_j
from placement.iteration import EnergyRates, IterationEnergy
from placement.ledger import dp_ledger, iteration_ledger
from placement.types import Placement

__all__ = ["dp_bytes", "iteration_energy"]


def dp_bytes(
    placement: Placement,
    model_parameters: float,
    expert_parameters: float = 0.0,
    bytes_per_parameter: tuple[float, float] = (2.0, 2.0),
    regather_per_micro_batch: bool = False,
):
    """Bytes all devices send in one iteration's data-parallel collectives
    (:func:`placement.ledger.dp_ledger`): ``(n - 1) P`` bytes per parameter byte and pass
    over the ``n = d cp`` ranks holding the same weights, ``(n / ep - 1) P_e`` for the
    experts' ``P_e``."""
    return ledger_bytes(
        dp_ledger(
            placement,
            model_parameters,
            expert_parameters,
            bytes_per_parameter,
            regather_per_micro_batch,
        )
    )


def iteration_energy(
    placement: Placement,
    rates: EnergyRates,
    cluster: Cluster,
    micro_batches: int,
    ledger: tuple[Collective, ...] | None = None,
) -> IterationEnergy:
    """Energy of one iteration over all devices of ``cluster`` (docs/models.md).

    Dynamic op energy per micro-batch times the ``micro_batches`` of the global batch (the
    tensor-parallel collectives' link energy among it, priced per op); the ledger's
    collectives at their links' energy (:func:`placement.collectives.link_energy_j`); static
    power of every device over the whole iteration, split by the bottleneck device's timeline into the time it computes
    (``static_j``) and the time it waits (``idle_j``: bubble, exposed communication, optimizer
    step; a waiting device draws its idle power, the static power calibrated to P0 idle); the
    hosts of every node over the whole iteration. ``ledger``: the iteration's collectives if
    already recorded (:func:`placement.ledger.iteration_ledger`).
    """
    if ledger is None:
        ledger = iteration_ledger(placement, rates, cluster, micro_batches)
    link_j = link_energy_j(
        ledger, rates.intra_node_link_pj_per_bit, rates.inter_node_link_pj_per_bit
    )
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
