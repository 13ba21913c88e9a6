"""The collectives of one training iteration under a placement, recorded once
(:class:`placement.collectives.Collective`): what the energy (:mod:`placement.energy`) and
the reports read.

Each record holds what one run of it moves and how many runs the iteration has, over the
whole job (all replicas, all micro-batches of the batch):

* ``tp``: the tensor-parallel collectives of the layers' op graphs
  (:func:`placement.adapt.tp_collectives`), on the tensor group's link, every micro-batch;
* ``dp``: the data-parallel collectives :func:`placement.dp_comm.dp_collectives` decides
  (the ones the time model prices), over the ``d cp`` ranks holding the same weights, each
  of the ``t p d cp`` devices sending its shard; the routed experts' part over the ``d cp /
  ep`` ranks holding the same experts;
* ``tied``: the tied embedding's gradient all-reduce between the first and the last stage
  (:func:`placement.dp_comm.embedding_allreduce_s`);
* ``pp``: the boundary activations forward and their gradients backward at each of the
  ``p - 1`` boundaries, for every micro-batch, ``p2p_sends`` per boundary; without sequence
  parallelism each of the ``t`` devices sends ``1/t`` of the tensor and the next stage
  all-gathers it over its tensor-parallel group (Megatron-LM's scatter/gather,
  :func:`placement.network.boundary_link`), ``p2p_gathers`` per boundary;
* ``ep``: the token all-to-alls of every MoE block (:data:`A2A_PER_MOE_BLOCK` per
  micro-batch, the recompute's when it rebuilds the MoE layer), over the expert group of
  :func:`placement.ep_cp.fold_a2a`, routed (:func:`placement.ep_cp.routed_bytes`) where the
  graph limits the nodes a token reaches;
* ``cp``: the K/V ring passes of context parallelism (:data:`KV_RING_PASSES`), ``cp - 1``
  steps of ``1/cp`` of the K/V each.

The links are the time model's: each group's (:meth:`placement.layout.Layout.links`), the
pipeline's boundaries across nodes when the job spans them.
"""

from __future__ import annotations

from arch_space.accelerator import Cluster
from placement.collectives import A2A_PER_MOE_BLOCK, KV_RING_PASSES, Collective
from placement.dp_comm import dp_collectives
from placement.ep_cp import fold_a2a, routed_bytes
from placement.iteration import EnergyRates
from placement.types import Placement
from workloads.recompute_modules import repeats_attention_core, repeats_dispatch

__all__ = ["dp_ledger", "iteration_ledger", "passes_per_micro_batch", "serving_ledger"]


def passes_per_micro_batch(per_pass: dict[str, int], repeats: bool) -> int:
    """Runs per micro-batch of a collective run ``per_pass`` times in the forward, backward
    and (when the recompute ``repeats`` it) recompute passes."""
    return per_pass["forward"] + per_pass["backward"] + (per_pass["recompute"] if repeats else 0)


def iteration_ledger(
    placement: Placement, rates: EnergyRates, cluster: Cluster, micro_batches: int
) -> tuple[Collective, ...]:
    """The collectives of one iteration of ``placement`` running ``micro_batches`` (all of
    the batch's, over every replica) on ``cluster`` (see the module docstring)."""
    lay = placement.layout
    links = lay.links(cluster)
    return (
        *_tensor(rates, cluster, micro_batches),
        *dp_ledger(
            placement,
            rates.model_parameters,
            rates.expert_parameters,
            (rates.gradient_bytes_per_parameter, rates.weight_bytes_per_parameter),
            rates.regather_per_micro_batch,
            links.dp,
        ),
        *_pipeline(placement, rates, links, micro_batches),
        *_expert(placement, rates, cluster, links.ep, micro_batches),
        *_context(placement, rates, links.cp, micro_batches),
    )


def dp_ledger(
    placement: Placement,
    model_parameters: float,
    expert_parameters: float = 0.0,
    bytes_per_parameter: tuple[float, float] = (2.0, 2.0),
    regather_per_micro_batch: bool = False,
    inter: bool = False,
) -> list[Collective]:
    """The data-parallel collectives of one iteration of ``placement`` for a model of
    ``model_parameters`` (``expert_parameters`` of them routed experts), at
    ``bytes_per_parameter`` (the gradients', the weights'), on the inter-node link when
    ``inter``: :func:`placement.dp_comm.dp_collectives` over the ``d cp`` ranks holding the
    same weights, each of the ``t p d cp`` devices sending its shard (the model's dense
    parameters over ``t p`` devices, its experts over ``t p ep``)."""
    lay = placement.layout
    n = lay.d * lay.cp
    n_expert = max(n // lay.ep_d, 1)
    devices = lay.t * lay.p * n
    dense = (model_parameters - expert_parameters) / (lay.t * lay.p)
    expert = expert_parameters / (lay.t * lay.p * lay.ep_d)
    out = []
    for c in dp_collectives(
        lay.zero, placement.micro_batches, *bytes_per_parameter, regather_per_micro_batch
    ):
        overlap = "per_micro_batch" if c.per_micro_batch else "after_backward"
        for group, params in ((n, dense), (n_expert, expert)):
            if group > 1 and params > 0:
                nbytes = c.bytes_per_parameter * params
                out.append(
                    Collective(
                        c.kind, "dp", group, nbytes, inter, c.count, devices, overlap, None, lay.t
                    )
                )
    return out


def _tensor(rates: EnergyRates, cluster: Cluster, micro_batches: int) -> list[Collective]:
    """The tensor-parallel collectives of the layers' op graphs, every micro-batch of the
    batch (scheduled inside the layer passes, which price their time)."""
    return [
        Collective(kind, "tp", group, nbytes, inter, runs * micro_batches, devices, "scheduled")
        for kind, nbytes, group, devices, runs in rates.tp_collectives
        for inter in (bool(cluster.spans_nodes(group)),)
    ]


def _pipeline(placement: Placement, rates: EnergyRates, links, micro_batches: int):
    lay = placement.layout
    t, n = lay.t, lay.d * lay.cp
    out = []
    tied = sum(st.tied_parameters for st in placement.stages)
    if tied > 0:
        nbytes = rates.gradient_bytes_per_parameter * tied
        out.append(Collective("all_reduce", "tied", 2, nbytes, links.pp, 1, 2 * t * n))
    if lay.p <= 1 or rates.boundary_bytes <= 0:
        return out
    crossings = 2 * (lay.p - 1) * micro_batches  # forward and backward, every boundary
    split = t > 1 and not lay.sp
    send = rates.boundary_bytes / t if split else rates.boundary_bytes
    out.append(Collective("send", "pp", 2, send, links.pp, crossings * rates.p2p_sends, t))
    if split:
        gathers = crossings * rates.p2p_gathers
        out.append(Collective("all_gather", "pp", t, rates.boundary_bytes, links.tp, gathers, t))
    return out


def _expert(placement: Placement, rates: EnergyRates, cluster: Cluster, inter, micro_batches):
    lay = placement.layout
    t, cp = lay.t, lay.cp
    ep, stride, share = fold_a2a(t, lay.ep_d, cp, lay.sp, lay.folds_experts)
    if ep <= 1 or rates.dispatch_bytes <= 0:
        return []
    runs = passes_per_micro_batch(A2A_PER_MOE_BLOCK, repeats_dispatch(lay.recompute))
    nbytes = share * rates.dispatch_bytes / cp  # what one device sends, over every block
    routed = None
    if rates.routing[2] and inter:
        network, nvlink = routed_bytes(nbytes, ep, stride, cluster, rates.routing)
        routed = (float(network), float(nvlink))
    overlap = "beside_compute" if rates.ep_overlap else "exposed"
    count = runs * micro_batches
    return [
        Collective("all_to_all", "ep", ep, nbytes, inter, count, t * cp, overlap, routed, stride)
    ]


def _context(placement: Placement, rates: EnergyRates, inter: bool, micro_batches: int):
    lay = placement.layout
    cp = lay.cp
    if cp <= 1 or rates.kv_bytes <= 0:
        return []
    runs = passes_per_micro_batch(KV_RING_PASSES, repeats_attention_core(lay.recompute))
    chunk = rates.kv_bytes / cp
    count = runs * micro_batches
    return [
        Collective(
            "ring_pass", "cp", cp, chunk, inter, count, lay.t * cp, "beside_compute", None, lay.t
        )
    ]


def serving_ledger(
    *,
    t: int,
    stages: int,
    ep: int,
    dispatch_bytes: float,
    moe_blocks: int,
    boundary_bytes: float,
    inter: tuple[bool, bool, bool],
    tp_collectives: tuple[tuple[str, float, int, int, int], ...] = (),
) -> tuple[Collective, ...]:
    """The collectives of one serving pass through a replica of ``t`` tensor ranks,
    ``stages`` pipeline stages and ``ep`` expert ranks: the ``tp_collectives`` of the pass's
    op graphs (:func:`placement.adapt.tp_collectives`, run once each); a dispatch and a combine all-to-all of ``dispatch_bytes`` per device
    in each of the ``moe_blocks``, on each of the ``t`` devices (vLLM's expert
    parallelism); the activation of ``boundary_bytes`` across each of the ``stages - 1``
    boundaries, ``1/t`` of it from each device and all-gathered over the next stage's
    tensor group (Megatron's scatter/gather, as :func:`placement.network.boundary_link`
    prices it). ``inter``: whether the (tensor, expert, pipeline) groups cross nodes."""
    tp_inter, ep_inter, pp_inter = inter
    out = [
        Collective(kind, "tp", group, nbytes, tp_inter, runs, devices, "scheduled")
        for kind, nbytes, group, devices, runs in tp_collectives
    ]
    if ep > 1 and moe_blocks and dispatch_bytes > 0:
        runs = 2 * moe_blocks
        out.append(Collective("all_to_all", "ep", ep, dispatch_bytes, ep_inter, runs, t))
    if stages > 1 and boundary_bytes > 0:
        send = boundary_bytes / t
        out.append(Collective("send", "pp", 2, send, pp_inter, stages - 1, t))
        if t > 1:
            gather = Collective("all_gather", "pp", t, boundary_bytes, tp_inter, stages - 1, t)
            out.append(gather)
    return tuple(out)
