"""One training iteration under a placement: where its time, memory and energy go.

Every figure of an iteration comes from here. :func:`assemble` turns the stages of a
placement (searched or fixed) into a :class:`~placement.types.Placement` with named time
terms (:class:`IterationTime`) and the memory parts of the fullest device
(:class:`DeviceMemory`); :func:`stage_memory` is the memory of one stage, :func:`placement.dp_comm.tail_fn`
the time after the pipeline flush, :func:`iteration_energy` the energy terms. The DP of
:mod:`placement.dp` prices the same model in a vectorised form (tests check it equal).

The time model (1F1B, interleaved with ``v`` chunks per device; Narayanan et al. SC21
§2.2): with ``L`` the bottleneck device's load per micro-batch and ``m'`` the micro-batches
per pipeline,

    iteration = L * (m' + (p - 1) / v) + dp_comm(d, P_1, zero) + embedding_comm
                + optimizer(P_1 / d if zero) + weight_refresh(P_1),

``P_1`` the parameters of pipeline rank 0 (in 1F1B it finishes its backward pass last, so
its data-parallel all-reduce is the exposed one; the optimizer step follows it, and a
precision recipe that caches fp8 weight copies casts them afresh once, from its weights:
``weight_refresh``, counted in ``optimizer_s``; the first forward pass of each of the ``p``
stages carries its own cast, which the warm-up chains, and only one is counted). Under DualPipe
(``problem.dualpipe``) the bubble is :func:`placement.pipelining.dualpipe_bubble_s` of the
bottleneck rank's load and backward time instead. The steady
part ``L * m'`` splits into the bottleneck device's compute, recompute, exposed
tensor-parallel collectives and pipeline receives; ``L * (p - 1) / v`` is the bubble.
Tensor-parallel collectives are scheduled inside the layer times the caller's op model
gives; the layers report the time in which they run and no compute does (their stages'
``tp_comm_s``), which ``tp_comm_exposed_s`` counts apart from ``compute_s`` (the recomputed
passes' collectives stay in ``recompute_s``); likewise the token all-to-alls of expert
parallelism (``ep_comm_exposed_s``) and the exposed K/V ring of context parallelism
(``cp_comm_exposed_s``), priced by :mod:`placement.ep_cp`. With tied input and output
embeddings and more than one stage, the last stage keeps a copy of the word embedding and
the two stages all-reduce its gradients after the data-parallel reduction, before the
optimizer step (Megatron-LM's ``_allreduce_word_embedding_grads`` in
``megatron/core/distributed/finalize_model_grads.py``, a blocking call):
``embedding_comm_exposed_s`` (:func:`embedding_allreduce_s`).

Memory per device: weights, gradients and optimizer state of the device's parameters (the
copy of tied weights included), the activations of the micro-batches in flight and the largest backward workspace
less the stash freed before it is live (:func:`backward_workspace`). Under ZeRO
stage 1, 2 or 3 the optimizer state, then the gradients, then the weights are sharded over
the ``d * cp`` ranks holding the same weights (:func:`zero_state`), the experts' over
``d * cp / ep``: divided here and nowhere else. The data-parallel collectives of each stage are :func:`placement.dp_comm.dp_time`.

Where new effects go: collectives the layer schedule reports apart move from ``compute_s``
to ``tp_comm_exposed_s``; energy by cause can price each time term at its own power.

Energy (:func:`iteration_energy`) prices the time terms: op energies for the compute, static
power while the devices compute, idle power over the rest of the iteration (bubble, exposed
communication, optimizer step), and the hosts' power over all of it; a waiting device drawing
more than idle power (spinning collectives) would price ``tp_comm_exposed_s`` apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple, dataclass, fields

import numpy as np

from placement.dp_comm import dp_time, shard_unit, sharded_parameters
from placement.layout import Layout
from placement.pipelining import bubble_s, dualpipe_bubble_s, pipeline_s
from placement.types import Placement, PlacementProblem, Stage, StageGraph

__all__ = [
    "IterationTime",
    "DeviceMemory",
    "IterationEnergy",
    "EnergyRates",
    "state_split",
    "zero_state",
    "backward_workspace",
    "stage_memory",
    "sharded_parameters",
    "assemble",
]


@dataclass(frozen=True, slots=True)
class IterationTime:
    """Seconds of one iteration by cause; the terms sum to ``iteration_s``."""

    compute_s: float
    recompute_s: float
    tp_comm_exposed_s: float
    ep_comm_exposed_s: float
    cp_comm_exposed_s: float
    pp_comm_exposed_s: float
    bubble_s: float
    dp_comm_exposed_s: float
    embedding_comm_exposed_s: float
    optimizer_s: float
    iteration_s: float

    def terms(self) -> dict[str, float]:
        """The named terms, without their sum."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "iteration_s"}

    @property
    def communication_s(self) -> float:
        """The exposed communication: the ``*_comm_exposed_s`` terms."""
        return sum(v for k, v in self.terms().items() if k.endswith("_comm_exposed_s"))


@dataclass(frozen=True, slots=True)
class DeviceMemory:
    """Bytes one device holds at its peak, by kind."""

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    workspace_bytes: float

    @property
    def total_bytes(self) -> float:
        # field by field, in order: astuple deep-copies, and this runs in inner loops
        return (
            self.weights_bytes
            + self.gradients_bytes
            + self.optimizer_bytes
            + self.activations_bytes
            + self.workspace_bytes
        )

    def __add__(self, other: DeviceMemory) -> DeviceMemory:
        return DeviceMemory(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))


@dataclass(frozen=True, slots=True)
class IterationEnergy:
    """Energy of one training iteration over all devices and their hosts, by cause, in
    joules of IT energy (the facility's PUE is applied by the scoring)."""

    compute_j: float  # MACs (with control and operand delivery) and vector-lane operations
    memory_j: float  # on-chip buffer and HBM traffic
    static_j: float  # leakage while the devices compute
    network_j: float  # bytes moved over links
    idle_j: float = 0.0  # idle power while the devices wait: bubble, exposed communication
    host_j: float = 0.0  # host servers: CPUs, DRAM, NICs, switches, fans

    @property
    def device_j(self) -> float:
        """The accelerators' energy: everything but the hosts."""
        return self.compute_j + self.memory_j + self.static_j + self.network_j + self.idle_j

    @property
    def total_j(self) -> float:
        return self.device_j + self.host_j

    def terms(self) -> dict[str, float]:
        """The named terms, without their sum."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, slots=True)
class EnergyRates:
    """What an iteration's energy is made of, from the layer timings and the device.

    Dynamic energies are per micro-batch over every layer and its tensor-parallel shards;
    link energies per bit moved; ``model_parameters`` counts the whole model (the gradient
    all-reduce moves them all); ``boundary_bytes`` is the largest activation crossing a
    stage boundary per micro-batch; ``host_w_per_node`` is a host server's power under load.
    ``dispatch_bytes`` and ``kv_bytes`` sum the layers' token all-to-all and K/V bytes per
    micro-batch per device at ``ep = cp = 1`` (what expert and context parallelism move);
    ``expert_parameters`` is the routed experts' part of ``model_parameters``; ``routing``
    the graph's (``top_k``, ``expert_groups``, ``routed_groups``), which splits the
    all-to-alls' bytes between the network and NVLink (:func:`placement.ep_cp.routed_bytes`).
    ``gradient_bytes_per_parameter`` and ``weight_bytes_per_parameter`` are what the
    data-parallel collectives move per parameter, as the time model prices them
    (:attr:`PlacementProblem.gradient_bytes_per_parameter`); ``regather_per_micro_batch``
    gathers ZeRO-2's weights for every micro-batch, as the time model does
    (:attr:`PlacementProblem.regather_per_micro_batch`); ``p2p_sends`` and ``p2p_gathers``
    the sends and all-gathers of a boundary's tensor per micro-batch
    (:attr:`PlacementProblem.p2p_sends`); ``ep_overlap`` whether the all-to-alls run beside
    compute; ``tp_collectives`` the tensor-parallel collectives per micro-batch
    (:func:`placement.adapt.tp_collectives`), whose link energy the ledger prices (then
    ``network_j`` holds only what the op model moves besides them). They make the
    iteration's ledger of collectives (:func:`placement.ledger.iteration_ledger`).
    """

    compute_j: float
    memory_j: float
    network_j: float
    static_w_per_device: float
    intra_node_link_pj_per_bit: float
    inter_node_link_pj_per_bit: float
    model_parameters: float
    boundary_bytes: float
    host_w_per_node: float = 0.0
    dispatch_bytes: float = 0.0
    kv_bytes: float = 0.0
    expert_parameters: float = 0.0
    routing: tuple[int, int, int] = (1, 0, 0)
    gradient_bytes_per_parameter: float = 2.0
    weight_bytes_per_parameter: float = 2.0
    regather_per_micro_batch: bool = False
    p2p_sends: float = 1.0
    p2p_gathers: float = 1.0
    ep_overlap: bool = False
    tp_collectives: tuple[tuple[str, float, int, int, int], ...] = ()


def state_split(
    state_bytes_per_parameter: float,
    optimizer_bytes_per_parameter: float,
    weight_bytes_per_parameter: float,
) -> tuple[float, float, float]:
    """(weights, gradients, optimizer state) bytes per parameter; they sum to the input.

    The weights in their format (:attr:`PlacementProblem.weight_bytes_per_parameter`: 2 B
    for bf16); the optimizer's own state (Adam: fp32 master weights and two moments, 12 B);
    the rest is gradients (4 B of fp32 main gradients in Megatron-LM; 6 B with DeepSpeed's
    BF16 optimizer, which keeps bf16 gradients beside fp32 accumulators).
    """
    weights = min(weight_bytes_per_parameter, state_bytes_per_parameter)
    optimizer = min(optimizer_bytes_per_parameter, state_bytes_per_parameter - weights)
    return weights, state_bytes_per_parameter - weights - optimizer, optimizer


def zero_state(
    state_bytes_per_parameter: float,
    zero: int,
    optimizer_bytes_per_parameter: float,
    weight_bytes_per_parameter: float,
) -> tuple[float, float, float]:
    """(replicated, sharded, gathered) bytes per parameter under ZeRO stage ``zero``.

    Stage 1 shards the optimizer state over the ``d`` replicas (Megatron-LM's distributed
    optimizer), stage 2 also the gradients, stage 3 (FSDP's full shard) also the weights
    (Rajbhandari et al., SC20, §5). Each replica holds ``replicated + sharded / d`` per
    parameter; under stage 3 it also gathers whole layers: ``gathered`` per parameter of the
    largest layer (the layer running and the next one prefetched; Zhao et al., VLDB 2023).
    """
    weights, gradients, optimizer = state_split(
        state_bytes_per_parameter, optimizer_bytes_per_parameter, weight_bytes_per_parameter
    )
    sharded = (0.0, optimizer, gradients + optimizer, state_bytes_per_parameter)[zero]
    gathered = 2.0 * weights if zero == 3 else 0.0
    return state_bytes_per_parameter - sharded, sharded, gathered


def backward_workspace(workspace: Sequence[float], stash: Sequence[float]) -> float:
    """The workspace a stage holds above its stashes at its peak, layers in execution order.

    A layer's backward workspace (the activations its recompute rebuilds) is live only once
    every later layer of the stage has run its backward pass for the same micro-batch and
    freed that micro-batch's stash (autograd releases a node's saved tensors as its backward
    runs; XLA's buffer liveness drops them after their last use): so it adds
    ``max_i(workspace_i - sum_{j > i} stash_j)``, never below 0. A head whose logits stash
    exceeds a block's workspace thus hides the block's workspace.
    """
    peak, later = 0.0, 0.0
    for ws, st in zip(reversed(workspace), reversed(stash), strict=True):
        peak = max(peak, ws - later)
        later += st
    return peak


def stage_memory(
    problem: PlacementProblem,
    *,
    parameters: float,
    stash_bytes: float,
    in_flight: float,
    workspace_bytes: float,
    d: int,
    zero: int = 0,
    largest_layer_parameters: float = 0.0,
    expert_parameters: float = 0.0,
    ep: int = 1,
    cp: int = 1,
) -> DeviceMemory:
    """Memory of one stage on each of its devices in a pipeline replicated ``d`` times.

    Here ``d`` enters memory: under ZeRO stage ``zero`` the sharded state is split over the
    ``d * cp`` ranks holding the same weights (Megatron-LM's distributed optimizer shards
    over the data- and context-parallel group); stage 3's gathered layers count as
    workspace. The ``expert_parameters`` of the device (already ``1/ep`` of the experts) are
    replicated over ``d * cp / ep`` ranks only, so their sharded state per device is
    ``expert_parameters * ep / (d * cp)`` (:func:`sharded_parameters`).
    """
    state, opt = problem.state_bytes_per_parameter, problem.optimizer_bytes_per_parameter
    weight = problem.weight_bytes_per_parameter
    weights, gradients, optimizer = state_split(state, opt, weight)
    _, _, gathered = zero_state(state, zero, opt, weight)
    shard = sharded_parameters(parameters, expert_parameters, ep) / (d * cp)

    def part(bytes_per_parameter: float, from_stage: int) -> float:
        return (shard if zero >= from_stage else parameters) * bytes_per_parameter

    return DeviceMemory(
        weights_bytes=part(weights, 3),
        gradients_bytes=part(gradients, 2),
        optimizer_bytes=part(optimizer, 1),
        activations_bytes=in_flight * stash_bytes,
        workspace_bytes=workspace_bytes + gathered * largest_layer_parameters,
    )


def assemble(
    problem: PlacementProblem,
    graph: StageGraph,
    stages: tuple[Stage, ...],
    *,
    layout: Layout,
    micro_batches: int,
    first_stage_params: float,
    first_stage_expert_params: float = 0.0,
    embedding_comm_s: float = 0.0,
) -> Placement:
    """A Placement from its stages: the one iteration model of searched and fixed layouts.

    Device ``r`` runs the stages with ``device == r``; its load and memory are their sums.
    ``micro_batches`` counts those of one pipeline; ``layout`` holds the degrees (its ``ep``
    and ``cp`` those of ``graph``; ``first_stage_expert_params`` the experts' part of rank
    0's parameters). ``embedding_comm_s`` is the tied weights' gradient all-reduce
    (:func:`embedding_allreduce_s` on the links the stage boundaries use).
    """
    p, v, d = layout.p, layout.v, layout.d
    assert p == 1 + max(st.device for st in stages), "the stages must fill the p ranks"
    # per rank: load, compute, recompute, exposed TP, EP, CP collectives, pipeline
    # receives, backward passes
    per = np.zeros((8, p))
    memory = [DeviceMemory(0.0, 0.0, 0.0, 0.0, 0.0)] * p
    for st in stages:
        per[:, st.device] += (
            st.load_s,
            st.compute_s,
            st.recompute_s,
            st.tp_comm_s,
            st.ep_comm_s,
            st.cp_comm_s,
            st.p2p_s,
            st.bwd_s,
        )
        memory[st.device] = memory[st.device] + stage_memory(
            problem,
            parameters=st.parameters,
            stash_bytes=st.stash_bytes,
            in_flight=st.in_flight,
            workspace_bytes=st.workspace_bytes,
            d=d,
            zero=layout.zero,
            largest_layer_parameters=st.largest_layer_parameters,
            expert_parameters=st.expert_parameters,
            ep=graph.ep,
            cp=graph.cp,
        )
    r = int(np.argmax(per[0]))
    load, comp, recomp, tpc, epc, cpc, comm, bwd = (float(x) for x in per[:, r])
    dp = dp_time(
        problem,
        graph.tp,
        layout.zero,
        np.array([d]),
        np.array([first_stage_params]),
        d * micro_batches,
        cp=graph.cp,
        ep=graph.ep,
        expert_params=first_stage_expert_params,
        load_s=load,
        unit=shard_unit(graph),
    )
    dp_comm, optimizer = float(dp.exposed_s[0]), float(dp.step_s[0])
    m = micro_batches
    if problem.dualpipe and p >= 2:
        bubble = float(dualpipe_bubble_s(load, bwd, p))
        pipeline = m * load + bubble
    else:
        bubble, pipeline = bubble_s(load, p, v), pipeline_s(load, m, p, v)
    breakdown = IterationTime(
        compute_s=m * (comp - recomp - tpc - epc - cpc),
        recompute_s=m * recomp,
        tp_comm_exposed_s=m * tpc,
        ep_comm_exposed_s=m * epc,
        cp_comm_exposed_s=m * cpc,
        pp_comm_exposed_s=m * comm,
        bubble_s=bubble,
        dp_comm_exposed_s=dp_comm,
        embedding_comm_exposed_s=embedding_comm_s,
        optimizer_s=optimizer,
        iteration_s=pipeline + dp_comm + embedding_comm_s + optimizer,
    )
    return Placement(
        layout=layout,
        stages=stages,
        micro_batches=m,
        load_s=load,
        breakdown=breakdown,
        memory_breakdown=max(memory, key=lambda mem: mem.total_bytes),
        dp_comm_overlapped_s=float(dp.overlapped_s[0]),
        dp_comm_unoverlapped_s=float(dp.unoverlapped_s[0]),
    )
