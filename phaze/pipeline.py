"""One evaluation, top to bottom (STYLE §1.1): layer graphs -> op costs -> layer schedules ->
placement -> score. Every step is a plain function of frozen values, so results are
deterministic and cacheable by content.

The orchestration lives here; the models live in their packages: ``workloads`` (graphs,
FLOPs, memory), ``arch_space`` (area, cost, carbon, op costs), ``ilp`` (schedules),
``placement`` (pipeline/data/tensor parallelism) and :mod:`phaze.scoring` (metrics).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from arch_space import Accelerator, Cluster, device_cost_usd, embodied_kgco2e, static_power_w
from arch_space.perf import default_settings
from ilp import layer_timing
from phaze.config import SolverSettings
from phaze.errors import ConfigError, Infeasible
from phaze.scoring import BatchEnergy, Score, ScoringParams, score_point
from placement import (
    OPTIMIZER_STEP_BYTES_PER_PARAMETER,
    Network,
    Placement,
    PlacementProblem,
    Strategy,
    evaluate_fixed,
    place,
)
from placement.adapt import stage_graph
from workloads import (
    Model,
    Recompute,
    TrainingSetup,
    build_layer_graph,
    model_flops_per_sequence,
    valid_tp_widths,
)

__all__ = ["Knobs", "Context", "Evaluation", "network_of", "tp_widths", "evaluate"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Knobs:
    """The training knobs swept per design: micro-batch (sequences) and recompute mode."""

    micro_batch: int
    recompute: str


@dataclass(frozen=True, slots=True)
class Context:
    """What every evaluation of a sweep shares: cluster, batch, solver and scoring settings.

    ``max_tp`` caps the tensor-parallel width (default: the devices of one node, as Megatron
    does, since TP across nodes pays inter-node links on every layer).
    """

    cluster: Cluster
    seq_len: int = 2048
    global_batch: int = 512
    sequence_parallel: bool = True
    max_tp: int | None = None
    tokens_to_train: int | None = None
    solver: SolverSettings = dataclasses.field(default_factory=SolverSettings)
    scoring: ScoringParams = dataclasses.field(default_factory=ScoringParams)


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The outcome of one (workload, design, knobs) point: a placement and its score, or
    the reason nothing fits."""

    workload: str
    design: Accelerator
    knobs: Knobs
    placement: Placement | None
    score: Score | None
    reason: str = ""

    @property
    def feasible(self) -> bool:
        return self.placement is not None


def network_of(cluster: Cluster) -> Network:
    """The cluster as the placement sees it (same field names)."""
    return Network(
        devices=cluster.devices,
        devices_per_node=cluster.devices_per_node,
        intra_node_bandwidth_bytes_per_s=cluster.intra_node_bandwidth_bytes_per_s,
        inter_node_bandwidth_bytes_per_s=cluster.inter_node_bandwidth_bytes_per_s,
        intra_node_latency_s=cluster.intra_node_latency_s,
        inter_node_latency_s=cluster.inter_node_latency_s,
    )


def tp_widths(model: Model, ctx: Context) -> tuple[int, ...]:
    """Tensor-parallel widths to try: those Megatron accepts, up to ``max_tp`` and the
    devices, and dividing the sequence when sequence parallelism is on."""
    cap = min(ctx.max_tp or ctx.cluster.devices_per_node, ctx.cluster.devices)
    return tuple(
        t
        for t in valid_tp_widths(model, cap)
        if not (ctx.sequence_parallel and t > 1 and ctx.seq_len % t)
    )


def _setup(model: Model, ctx: Context, knobs: Knobs) -> TrainingSetup:
    return TrainingSetup(
        seq_len=ctx.seq_len,
        global_batch=ctx.global_batch,
        micro_batch=knobs.micro_batch,
        recompute=Recompute(knobs.recompute),
        sequence_parallel=ctx.sequence_parallel,
        tokens_to_train=ctx.tokens_to_train,
    )


def _timing_design(acc: Accelerator) -> Accelerator:
    """The fields that decide layer times: HBM capacity and the name do not."""
    return dataclasses.replace(acc, name="", hbm_bytes=1 << 30)


@dataclass(frozen=True, slots=True)
class _Variant:
    """One TP width's stage graph and its dynamic energy per micro-batch, all layers."""

    graph: object  # placement.StageGraph
    compute_j: float
    memory_j: float
    network_j: float


@lru_cache(maxsize=4096)
def _variant(
    model: Model,
    setup: TrainingSetup,
    tp: int,
    acc: Accelerator,
    cluster: Cluster,
    solver: SolverSettings,
) -> _Variant:
    """Layer schedules of every distinct layer at width ``tp`` -> a placement stage graph.

    Cached by content: designs differing only in HBM capacity share it.
    """
    lg = build_layer_graph(model, setup, tp)
    timings = layer_timing(
        lg,
        acc,
        cluster,
        solver=solver.name,
        time_limit_s=solver.time_limit_s,
        mip_gap=solver.mip_gap,
    )
    times = {
        cid: (lt.forward.makespan_s, lt.backward.makespan_s, lt.recompute.makespan_s)
        for cid, lt in timings.items()
    }
    sg = stage_graph(
        lg,
        times,
        micro_batch=setup.micro_batch,
        recompute=str(setup.recompute),
        sequence_parallel=setup.sequence_parallel,
    )
    parts = [0.0, 0.0, 0.0]
    for layer in lg.layers:
        lt = timings[layer.class_id]
        devices = tp if layer.tensor_parallel else 1
        for p in (lt.forward, lt.backward, lt.recompute):
            parts[0] += devices * p.compute_j
            parts[1] += devices * p.memory_j
            parts[2] += devices * p.network_j
    return _Variant(sg, *parts)


def _batch_energy(
    variant: _Variant,
    placement: Placement,
    setup: TrainingSetup,
    cluster: Cluster,
    acc: Accelerator,
    model: Model,
) -> BatchEnergy:
    """Energy of one iteration over all devices (DESIGN §7).

    Dynamic op energy per micro-batch (summed over the layers and their TP shards) times the
    micro-batches of the global batch; pipeline and data-parallel traffic at the link energy
    of the op model; leakage of every device over the whole iteration (idle time included).
    """
    micro_batches = setup.global_batch // setup.micro_batch
    perf = default_settings()
    t, p, d = placement.tp, placement.pp, placement.dp
    inter = d * t > cluster.devices_per_node
    pj_per_bit = perf.inter_node_link_pj_per_bit if inter else perf.intra_node_link_pj_per_bit
    # Ring all-reduce of fp16 gradients (2 B/parameter): each of the t*p*d devices sends
    # 2 (d-1)/d of its shard's P/(t*p) gradients, 4 (d-1) P bytes in all.
    allreduce_bytes = 2.0 * (d - 1) / d * d * 2.0 * model.parameters
    # Activations forward and their gradients backward at each of the p - 1 stage boundaries,
    # sent by each of the t devices of a stage, for every micro-batch of the batch.
    boundary = max((e.bytes for e in variant.graph.edges), default=0.0)
    p2p_bytes = 2.0 * (p - 1) * t * boundary * micro_batches
    link_j = (allreduce_bytes + p2p_bytes) * 8 * pj_per_bit * 1e-12
    return BatchEnergy(
        compute_j=variant.compute_j * micro_batches,
        memory_j=variant.memory_j * micro_batches,
        static_j=cluster.devices * static_power_w(acc) * placement.time_per_batch_s,
        network_j=variant.network_j * micro_batches + link_j,
    )


def evaluate(
    workload: str,
    model: Model,
    acc: Accelerator,
    knobs: Knobs,
    ctx: Context,
    *,
    strategy: Strategy | None = None,
) -> Evaluation:
    """Evaluate one point: the best placement (or the given ``strategy``) and its score.

    Raises ConfigError for bad input; returns an infeasible Evaluation (with the reason) when
    nothing fits.
    """
    setup = _setup(model, ctx, knobs)
    if ctx.global_batch % knobs.micro_batch:
        raise ConfigError(
            f"micro_batch = {knobs.micro_batch} must divide global_batch = {ctx.global_batch}"
        )
    widths = (strategy.tp,) if strategy else tp_widths(model, ctx)
    if not widths:
        return Evaluation(
            workload, acc, knobs, None, None, f"no tensor-parallel width fits {model.name}"
        )
    timing_acc = _timing_design(acc)
    variants = {t: _variant(model, setup, t, timing_acc, ctx.cluster, ctx.solver) for t in widths}
    problem = PlacementProblem(
        graphs=tuple(v.graph for v in variants.values()),
        network=network_of(ctx.cluster),
        hbm_bytes=float(acc.hbm_bytes),
        global_batch=ctx.global_batch,
        state_bytes_per_parameter=float(setup.state_bytes_per_parameter),
        # the optimizer step after the last backward pass streams its bytes through HBM
        optimizer_s_per_parameter=OPTIMIZER_STEP_BYTES_PER_PARAMETER[setup.optimizer]
        / (acc.hbm_bandwidth_bytes_per_s * default_settings().hbm_efficiency),
    )
    try:
        placement = evaluate_fixed(problem, strategy) if strategy else place(problem)
    except Infeasible as e:
        return Evaluation(workload, acc, knobs, None, None, e.reason)
    energy = _batch_energy(variants[placement.tp], placement, setup, ctx.cluster, acc, model)
    tokens = setup.training_tokens(model.tokens_to_train)
    score = score_point(
        iteration_s=placement.time_per_batch_s,
        global_batch=ctx.global_batch,
        seq_len=ctx.seq_len,
        model_flops_per_batch=ctx.global_batch * model_flops_per_sequence(model, ctx.seq_len),
        tokens_to_train=float(tokens),
        devices=ctx.cluster.devices,
        peak_flops_per_device=acc.peak_flops,
        energy=energy,
        device_cost_usd=device_cost_usd(acc),
        embodied_kgco2e_per_device=embodied_kgco2e(acc),
        params=ctx.scoring,
    )
    return Evaluation(workload, acc, knobs, placement, score)


def evaluate_many(
    workload: str, model: Model, acc: Accelerator, knobs: Sequence[Knobs], ctx: Context
) -> Mapping[Knobs, Evaluation]:
    """Every knob setting of one design (timings shared through the cache)."""
    return {k: evaluate(workload, model, acc, k, ctx) for k in knobs}
