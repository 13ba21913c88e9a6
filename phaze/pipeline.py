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
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from arch_space import Accelerator, Cluster, device_cost_usd, embodied_kgco2e, static_power_w
from arch_space.perf import default_settings
from arch_space.perf.device import CollectiveCurve, DeviceProfile, device_profile
from ilp import PassTiming, layer_timing
from phaze.config import SolverSettings
from phaze.errors import ConfigError, Infeasible
from phaze.lower_bounds import bound_graph
from phaze.scoring import Score, ScoringParams, score_point
from placement import (
    OPTIMIZER_STEP_BYTES_PER_PARAMETER,
    Placement,
    PlacementProblem,
    StageGraph,
    Strategy,
    place,
)
from placement.adapt import stage_graph
from placement.interleave import best_interleaved
from placement.iteration import EnergyRates, iteration_energy
from placement.partial import describe_defaults, evaluate_partial
from workloads import (
    LayerGraph,
    LayerKind,
    Model,
    Recompute,
    TrainingSetup,
    block_activation_bytes,
    build_layer_graph,
    model_flops_per_sequence,
    valid_tp_widths,
)
from workloads.build import DENSE_BLOCK_CLASS
from workloads.framework import DEFAULT_FRAMEWORK, framework_profile

__all__ = [
    "Knobs",
    "Context",
    "search_degrees",
    "Evaluation",
    "Hbm",
    "device_hbm",
    "Variant",
    "tp_widths",
    "timing_design",
    "training_setup",
    "width_variant",
    "placement_problem",
    "width_fits",
    "evaluate",
    "time_lower_bound_s",
]

logger = logging.getLogger(__name__)

# Relative margin before a width's lower-bound placement time counts as slower than the best:
# the bound and a schedule that meets it can differ by rounding (a few ulps) in floating point.
_BOUND_SLACK: Final = 1e-9

# (HBM capacity bytes, HBM bandwidth bytes/s, measured collective curve inside a node): all a
# placement needs of a device (:func:`device_hbm`)
Hbm = tuple[int, float, CollectiveCurve | None]


@dataclass(frozen=True, slots=True)
class Knobs:
    """The training knobs swept per design: micro-batch (sequences) and recompute mode."""

    micro_batch: int
    recompute: str


@dataclass(frozen=True, slots=True)
class Context:
    """What every evaluation of a sweep shares: cluster, batch, solver and scoring settings.

    ``max_tp`` caps the tensor-parallel width (default: the devices of one node, as Megatron
    does, since TP across nodes pays inter-node links on every layer). ``framework`` names
    the overlap profile (:mod:`workloads.framework`); ``device`` overrides the sustained
    rates of the designs' preset (:mod:`arch_space.perf.device`; used to fit them).
    ``zero_stages`` are the ZeRO stages the placement search may choose from,
    ``zero_fallback`` those it tries when none of them fits (stages 2 and 3 add collectives
    per micro-batch, so at equal layout they never beat stage 1; searching them only when
    needed keeps sweeps fast; give ``zero_stages=(0, 1, 2, 3)`` for the exact optimum over
    all four); ``state_bytes_per_parameter`` overrides the training state per parameter
    (e.g. 20 for DeepSpeed's BF16 optimizer). ``ep_degrees`` and ``cp_degrees`` are the
    expert- and context-parallel degrees the search may choose from (None:
    :func:`search_degrees`).
    """

    cluster: Cluster
    seq_len: int = 2048
    global_batch: int = 512
    sequence_parallel: bool = True
    max_tp: int | None = None
    zero_stages: tuple[int, ...] = (0, 1)
    zero_fallback: tuple[int, ...] = (2, 3)
    state_bytes_per_parameter: int | None = None
    tokens_to_train: int | None = None
    solver: SolverSettings = dataclasses.field(default_factory=SolverSettings)
    scoring: ScoringParams = dataclasses.field(default_factory=ScoringParams)
    framework: str = DEFAULT_FRAMEWORK
    device: DeviceProfile | None = None
    ep_degrees: tuple[int, ...] | None = None
    cp_degrees: tuple[int, ...] | None = None


# Context parallelism pays off for long sequences: Megatron-LM recommends it from 8K tokens
# (docs/api-guide/context_parallel.md); below, the search leaves it off to stay fast.
_CP_FROM_SEQ: Final = 8192
_CP_DEGREES: Final = (1, 2, 4, 8)


def search_degrees(experts: int, ctx: Context) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The (ep, cp) degrees the search chooses from: the context's, or by default every
    divisor of the experts up to the devices (1 for a dense model) and, from 8K tokens,
    cp in 1, 2, 4, 8 dividing the sequence and the devices (else 1)."""
    devices = ctx.cluster.devices
    eps = ctx.ep_degrees or tuple(
        e for e in range(1, min(experts, devices) + 1) if experts % e == 0
    )
    if ctx.cp_degrees is not None:
        cps = ctx.cp_degrees
    elif ctx.seq_len >= _CP_FROM_SEQ:
        cps = tuple(c for c in _CP_DEGREES if ctx.seq_len % c == 0 and devices % c == 0)
    else:
        cps = (1,)
    return tuple(e for e in eps if experts % e == 0) or (1,), cps


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The outcome of one (workload, design, knobs) point: a placement and its score, or
    the reason nothing fits. ``pass_timings`` are the layer passes scheduled at the
    placement's width, one per distinct layer and pass (each says how exact it is)."""

    workload: str
    design: Accelerator
    knobs: Knobs
    placement: Placement | None
    score: Score | None
    reason: str = ""
    pass_timings: tuple[PassTiming, ...] = ()
    defaults: str = ""  # the fields a partial strategy left open and what they became

    @property
    def feasible(self) -> bool:
        return self.placement is not None


def tp_widths(model: Model, ctx: Context) -> tuple[int, ...]:
    """Tensor-parallel widths to try: those Megatron accepts, up to ``max_tp`` and the
    devices, and dividing the sequence when sequence parallelism is on."""
    cap = min(ctx.max_tp or ctx.cluster.devices_per_node, ctx.cluster.devices)
    return tuple(
        t
        for t in valid_tp_widths(model, cap)
        if not (ctx.sequence_parallel and t > 1 and ctx.seq_len % t)
    )


def training_setup(model: Model, ctx: Context, knobs: Knobs) -> TrainingSetup:
    """The training setup of ``knobs`` in ``ctx``: what builds the layer graphs."""
    return TrainingSetup(
        seq_len=ctx.seq_len,
        global_batch=ctx.global_batch,
        micro_batch=knobs.micro_batch,
        recompute=Recompute(knobs.recompute),
        sequence_parallel=ctx.sequence_parallel,
        tokens_to_train=ctx.tokens_to_train,
        framework=ctx.framework,
        state_bytes_per_parameter=ctx.state_bytes_per_parameter,
    )


def timing_design(acc: Accelerator) -> Accelerator:
    """The fields that decide layer times: HBM capacity and the name do not."""
    return dataclasses.replace(acc, name="", hbm_bytes=1 << 30)


@dataclass(frozen=True, slots=True)
class Variant:
    """One TP width's stage graph, its dynamic energy per micro-batch, all layers, and the
    timings of its distinct layer passes."""

    graph: StageGraph
    compute_j: float
    memory_j: float
    network_j: float
    passes: tuple[PassTiming, ...]


@lru_cache(maxsize=4096)
def width_variant(
    model: Model,
    setup: TrainingSetup,
    tp: int,
    acc: Accelerator,
    cluster: Cluster,
    solver: SolverSettings,
    device: DeviceProfile | None = None,
) -> Variant:
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
        search_nodes=solver.search_nodes,
        device=device,
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
        tp_comm_s={
            cid: lt.forward.comm_exposed_s + lt.backward.comm_exposed_s
            for cid, lt in timings.items()
        },
        workspace_bytes=_workspace_bytes(model, setup, lg),
    )
    parts = [0.0, 0.0, 0.0]
    for layer in lg.layers:
        lt = timings[layer.class_id]
        devices = tp if layer.tensor_parallel else 1
        for p in (lt.forward, lt.backward, lt.recompute):
            parts[0] += devices * p.compute_j
            parts[1] += devices * p.memory_j
            parts[2] += devices * p.network_j
    passes = tuple(p for lt in timings.values() for p in (lt.forward, lt.backward, lt.recompute))
    return Variant(sg, *parts, passes)


def _energy_rates(
    variant: Variant, acc: Accelerator, model: Model, host_w_per_node: float
) -> EnergyRates:
    """What one iteration's energy is made of on ``acc`` (:func:`iteration_energy` prices it)."""
    perf = default_settings()
    return EnergyRates(
        compute_j=variant.compute_j,
        memory_j=variant.memory_j,
        network_j=variant.network_j,
        static_w_per_device=static_power_w(acc),
        intra_node_link_pj_per_bit=perf.intra_node_link_pj_per_bit,
        inter_node_link_pj_per_bit=perf.inter_node_link_pj_per_bit,
        model_parameters=float(model.parameters),
        boundary_bytes=max((e.bytes for e in variant.graph.edges), default=0.0),
        host_w_per_node=host_w_per_node,
        dispatch_bytes=sum(x.dispatch_bytes for x in variant.graph.layers),
        kv_bytes=sum(x.kv_bytes for x in variant.graph.layers),
    )


def device_hbm(acc: Accelerator, ctx: Context) -> Hbm:
    """What a placement needs of ``acc`` (its collective curve from ``ctx.device`` if set)."""
    curve = (ctx.device or device_profile(acc)).intra_node
    return acc.hbm_bytes, acc.hbm_bandwidth_bytes_per_s, curve


def placement_problem(
    graphs: tuple[StageGraph, ...], hbm: Hbm, ctx: Context, setup: TrainingSetup
) -> PlacementProblem:
    """The placement problem of ``graphs`` on devices with ``hbm`` in ``ctx``'s cluster."""
    hbm_bytes, hbm_bytes_per_s, collectives = hbm
    eps, cps = search_degrees(max(g.experts for g in graphs), ctx)
    return PlacementProblem(
        graphs=graphs,
        cluster=ctx.cluster,
        hbm_bytes=float(hbm_bytes),
        global_batch=ctx.global_batch,
        state_bytes_per_parameter=float(setup.state_bytes_per_parameter),
        # the optimizer step after the last backward pass streams its bytes through HBM
        optimizer_s_per_parameter=OPTIMIZER_STEP_BYTES_PER_PARAMETER[setup.optimizer]
        / (hbm_bytes_per_s * default_settings().hbm_efficiency),
        p2p_overlap=framework_profile(setup.framework).p2p_overlap,
        dp_overlap=framework_profile(setup.framework).dp_overlap,
        collectives=collectives,
        zero_stages=ctx.zero_stages,
        optimizer_bytes_per_parameter=float(setup.optimizer_bytes_per_parameter),
        ep_degrees=eps,
        cp_degrees=cps,
    )


def _workspace_bytes(model: Model, setup: TrainingSetup, lg: LayerGraph) -> dict[str, float]:
    """What a block rebuilds for its backward pass beyond its stash under recompute: the
    activations it would have stashed without recompute, live while it runs backward."""
    if setup.recompute is Recompute.NONE:
        return {}
    plain = dataclasses.replace(setup, recompute=Recompute.NONE)
    return {
        x.class_id: float(
            block_activation_bytes(model, plain, lg.tp, dense=x.class_id == DENSE_BLOCK_CLASS)
            - x.activation_bytes
        )
        for x in lg.layers
        if x.kind is LayerKind.BLOCK
    }


@lru_cache(maxsize=1024)
def _memory_graph(model: Model, setup: TrainingSetup, tp: int) -> StageGraph:
    """Width ``tp``'s stage graph with every layer time zero, for memory questions alone:
    its bytes are those of every design's graph at this width (no schedule needed)."""
    lg = build_layer_graph(model, setup, tp)
    return stage_graph(
        lg,
        dict.fromkeys(lg.op_graphs, (0.0, 0.0, 0.0)),
        micro_batch=setup.micro_batch,
        recompute=str(setup.recompute),
        sequence_parallel=setup.sequence_parallel,
        workspace_bytes=_workspace_bytes(model, setup, lg),
    )


@lru_cache(maxsize=4096)
def width_fits(model: Model, setup: TrainingSetup, tp: int, hbm: Hbm, ctx: Context) -> bool:
    """Does some placement at width ``tp`` fit devices with ``hbm``?

    Whether a placement fits depends on bytes, never on layer times, so the zero-time graph
    of :func:`_memory_graph` answers for every design with this HBM, without a schedule.
    """
    try:
        place(placement_problem((_memory_graph(model, setup, tp),), hbm, ctx, setup))
    except Infeasible:
        return False
    return True


@lru_cache(maxsize=1024)
def _why_not(
    model: Model, setup: TrainingSetup, widths: tuple[int, ...], hbm: Hbm, ctx: Context
) -> str:
    """The reason :func:`placement.place` gives when no width fits (its reasons are about
    bytes, so the zero-time graphs give the reason of every design's real graphs)."""
    graphs = tuple(_memory_graph(model, setup, t) for t in widths)
    try:
        place(placement_problem(graphs, hbm, ctx, setup))
    except Infeasible as e:
        return e.reason
    raise AssertionError("no width fits alone, yet one fits among them")


def _best_widths(
    model: Model,
    setup: TrainingSetup,
    widths: tuple[int, ...],
    hbm: Hbm,
    timing_acc: Accelerator,
    ctx: Context,
) -> tuple[dict[int, Variant], Placement]:
    """The variants that can hold the fastest placement over ``widths``, and that placement:
    the one :func:`placement.place` finds over every width (Infeasible, with its reason,
    when none fits).

    Widest first (usually the fastest). Once some width has a placement, another is
    scheduled only when the placement of its lower-bound graph (no schedule:
    :func:`phaze.lower_bounds.bound_graph`) is not slower than the best so far: placement
    time never falls when layer times rise, so a width whose bound is slower cannot win,
    and leaving it out of the final search changes no result. One search over the other widths' bound graphs first
    settles the usual case, where none of them can win.
    """

    def search(graphs: tuple[StageGraph, ...]) -> Placement | None:
        try:
            return place(placement_problem(graphs, hbm, ctx, setup))
        except Infeasible:
            return None

    def slower(p: Placement | None, than: Placement) -> bool:
        return p is None or p.time_per_batch_s > than.time_per_batch_s * (1 + _BOUND_SLACK)

    widest, *rest = sorted(widths, reverse=True)
    variants = {
        widest: width_variant(model, setup, widest, timing_acc, ctx.cluster, ctx.solver, ctx.device)
    }
    best = search((variants[widest].graph,))
    bounds = {t: bound_graph(model, setup, t, timing_acc, ctx.cluster, ctx.device) for t in rest}
    if best is not None and rest and slower(search(tuple(bounds.values())), best):
        rest = []
    for t in rest:
        if best is not None and slower(search((bounds[t],)), best):
            continue
        variants[t] = width_variant(
            model, setup, t, timing_acc, ctx.cluster, ctx.solver, ctx.device
        )
        alone = search((variants[t].graph,))
        if alone is not None and (best is None or alone.time_per_batch_s < best.time_per_batch_s):
            best = alone
    if best is None or len(variants) > 1:
        kept = tuple(variants[t].graph for t in widths if t in variants)
        best = place(placement_problem(kept, hbm, ctx, setup))
    return variants, best


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

    Notes
    -----
    Layer schedules are the costly step, so without a ``strategy`` only the widths whose
    placement fits the HBM are scheduled (:func:`width_fits`), and a narrower width only when its
    lower-bound placement could beat the best so far (:func:`_best_widths`). Both are exact:
    the result is that of scheduling every width and searching them all at once. Megatron's
    interleaved layouts (``v >= 2``) of the widths kept then compete with that placement
    (:func:`placement.interleave.best_interleaved`).
    """
    setup = training_setup(model, ctx, knobs)
    if ctx.global_batch % knobs.micro_batch:
        raise ConfigError(
            f"micro_batch = {knobs.micro_batch} must divide global_batch = {ctx.global_batch}"
        )
    if strategy is not None and "cp" not in strategy.unset and ctx.seq_len % strategy.cp:
        allowed = [c for c in _CP_DEGREES if ctx.seq_len % c == 0]
        raise ConfigError(
            f"strategy: cp = {strategy.cp} must divide the sequence of {ctx.seq_len} tokens "
            f"(allowed e.g.: {', '.join(map(str, allowed))})"
        )
    fixed_tp = strategy is not None and "tp" not in strategy.unset
    widths = (strategy.tp,) if fixed_tp else tp_widths(model, ctx)
    if not widths:
        return Evaluation(
            workload, acc, knobs, None, None, f"no tensor-parallel width fits {model.name}"
        )
    hbm = device_hbm(acc, ctx)
    timing_acc = timing_design(acc)
    defaults = ""
    if strategy is None:
        # Only widths with a placement that fits the HBM can win; memory does not depend on
        # layer times, so this needs no layer schedule (the costly step).
        fitting = tuple(t for t in widths if width_fits(model, setup, t, hbm, ctx))
        if not fitting and ctx.zero_fallback:  # only the wider sharding may fit
            ctx = dataclasses.replace(ctx, zero_stages=ctx.zero_fallback, zero_fallback=())
            fitting = tuple(t for t in widths if width_fits(model, setup, t, hbm, ctx))
        if not fitting:
            return Evaluation(
                workload, acc, knobs, None, None, _why_not(model, setup, widths, hbm, ctx)
            )
        try:
            variants, placement = _best_widths(model, setup, fitting, hbm, timing_acc, ctx)
        except Infeasible as e:
            return Evaluation(workload, acc, knobs, None, None, e.reason)
        graphs = tuple(v.graph for v in variants.values())
        placement = (
            best_interleaved(placement_problem(graphs, hbm, ctx, setup), placement.time_per_batch_s)
            or placement
        )
    else:
        # left open, sequence parallelism is what the search uses: on when t > 1
        open_sp = "sequence_parallel" in strategy.unset
        variants = {
            t: width_variant(
                model,
                dataclasses.replace(setup, sequence_parallel=ctx.sequence_parallel and t > 1)
                if open_sp
                else setup,
                t,
                timing_acc,
                ctx.cluster,
                ctx.solver,
                ctx.device,
            )
            for t in widths
        }
        problem = placement_problem(tuple(v.graph for v in variants.values()), hbm, ctx, setup)
        try:
            placement, chosen = evaluate_partial(
                problem, strategy, sequence_parallel=ctx.sequence_parallel
            )
        except Infeasible as e:
            return Evaluation(workload, acc, knobs, None, None, e.reason)
        defaults = describe_defaults(chosen)
    energy = iteration_energy(
        placement,
        _energy_rates(variants[placement.tp], acc, model, ctx.scoring.host_w_per_node),
        ctx.cluster,
        setup.global_batch // setup.micro_batch,
    )
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
    return Evaluation(
        workload,
        acc,
        knobs,
        placement,
        score,
        pass_timings=variants[placement.tp].passes,
        defaults=defaults,
    )


def time_lower_bound_s(model: Model, acc: Accelerator, knobs: Knobs, ctx: Context) -> float:
    """A lower bound on the time per batch :func:`evaluate` finds at ``knobs`` (inf when
    nothing can fit), with no layer schedule: the search, interleaving included, over the
    lower-bound graphs of every width (:func:`phaze.lower_bounds.bound_graph`) and every ZeRO
    stage ``ctx`` allows. Placement time never falls when layer times rise."""
    setup = training_setup(model, ctx, knobs)
    if ctx.global_batch % knobs.micro_batch:
        return float("inf")
    timing_acc = timing_design(acc)
    graphs = tuple(
        bound_graph(model, setup, t, timing_acc, ctx.cluster, ctx.device)
        for t in tp_widths(model, ctx)
    )
    if not graphs:
        return float("inf")
    every = dataclasses.replace(ctx, zero_stages=ctx.zero_stages + ctx.zero_fallback)
    hbm = device_hbm(acc, ctx)
    problem = placement_problem(graphs, hbm, every, setup)
    try:
        best = place(problem).time_per_batch_s
    except Infeasible:
        return float("inf")
    interleaved = best_interleaved(problem, best)
    return best if interleaved is None else interleaved.time_per_batch_s
