"""One evaluation, top to bottom (STYLE §1.1): layer graphs -> op costs -> layer schedules ->
placement -> score. Every step is a plain function of frozen values, so results are
deterministic and cacheable by content.

The orchestration lives here; the models live in their packages: ``workloads`` (graphs,
FLOPs, memory), ``arch_space`` (area, cost, carbon, op costs), ``ilp`` (schedules),
``placement`` (pipeline/data/tensor parallelism) and :mod:`phaze.model.scoring` (metrics).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from typing import Final

from arch_space import Accelerator, embodied_kgco2e, static_power_w
from arch_space.formats import check_precision
from arch_space.perf import default_settings
from arch_space.perf.device import device_profile
from ilp import PassTiming
from phaze.model.context import CP_DEGREES, Context, search_degrees
from phaze.model.lower_bounds import (
    beyond_all_hbm,
)
from phaze.model.problem import Hbm, device_hbm, dp_bytes_per_parameter, placement_problem
from phaze.model.scoring import Score, score_point, system_capex
from phaze.model.widths import (
    Key,
    Variant,
    best_widths,
    why_no_width_fits,
    width_fits,
    width_variant,
    with_sp,
)
from phaze_common.errors import ConfigError, Infeasible
from phaze_common.units import fmt_count
from placement import (
    Layout,
    Placement,
)
from placement.collectives import Collective, LinkPrices, PricedCollective, priced
from placement.energy import iteration_energy
from placement.iteration import EnergyRates
from placement.layout import FIELDS, ep_fits
from placement.ledger import iteration_ledger
from placement.partial import describe_defaults, evaluate_partial
from workloads import (
    Model,
    TrainingSetup,
    model_flops_per_sequence,
    valid_tp_widths,
)
from workloads.framework import (
    framework_profile,
    layout_refusals,
    runnable_zero_stages,
    with_attention,
)

__all__ = [
    "Context",
    "search_degrees",
    "Evaluation",
    "Hbm",
    "device_hbm",
    "Variant",
    "tp_widths",
    "variant_keys",
    "timing_design",
    "training_setup",
    "width_variant",
    "placement_problem",
    "width_fits",
    "evaluate",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The outcome of one (workload, design, knobs) point: a placement and its score, or
    the reason nothing fits. ``pass_timings`` are the layer passes scheduled at the
    placement's width, one per distinct layer and pass (each says how exact it is);
    ``collectives`` the iteration's ledger of collectives, which the energy priced, and
    ``link_prices`` what prices them (:meth:`priced_collectives`)."""

    workload: str
    design: Accelerator
    knobs: Layout
    placement: Placement | None
    score: Score | None
    reason: str = ""
    pass_timings: tuple[PassTiming, ...] = ()
    defaults: str = ""  # the fields a partial strategy left open (or sp searched): their values
    collectives: tuple[Collective, ...] = ()
    link_prices: LinkPrices | None = None

    @property
    def feasible(self) -> bool:
        return self.placement is not None

    @property
    def model_flops_per_s_per_device(self) -> float:
        """Model FLOP/s each device achieves (forward and backward, no recompute): the
        MFU numerator, ``mfu`` times the design's peak."""
        assert self.score is not None, "an infeasible point achieves nothing"
        return self.score.mfu * self.design.peak_flops

    def priced_collectives(self) -> tuple[PricedCollective, ...]:
        """Each collective of the iteration with its bytes, time and link energy (priced on
        demand: a sweep never asks)."""
        if self.link_prices is None:
            return ()
        return priced(self.collectives, self.link_prices)


def tp_widths(model: Model, ctx: Context) -> tuple[int, ...]:
    """Tensor-parallel widths to try: those Megatron accepts, up to ``max_tp`` and the
    devices, and dividing the sequence unless sequence parallelism is fixed off."""
    return tuple(sorted({t for t, _ in variant_keys(model, ctx)}))


def variant_keys(
    model: Model, ctx: Context, widths: tuple[int, ...] = ()
) -> tuple[tuple[int, bool], ...]:
    """The (width, sequence parallelism) of every stage graph the search tries: ``widths``
    (default: those Megatron accepts up to ``max_tp`` and the devices, dividing the sequence
    unless sequence parallelism is fixed off), each with sequence parallelism as ``ctx``
    fixes it or, searched, on and off (``t > 1``; at ``t = 1`` it changes nothing and is
    off; only off where a given width does not divide the sequence)."""
    cap = min(ctx.max_tp or ctx.cluster.devices_per_node, ctx.cluster.devices)
    searched = ctx.sequence_parallel is None

    def tried(t: int, sp: bool) -> bool:
        divides = ctx.seq_len % t == 0
        if not widths and not divides and ctx.sequence_parallel is not False:
            return False  # a default width must divide the sequence unless sp is fixed off
        return not (searched and sp and (t == 1 or not divides))

    return tuple(
        (t, sp)
        for t in widths or valid_tp_widths(model, cap)
        for sp in ((True, False) if searched else (ctx.sequence_parallel,))
        if tried(t, sp)
    )


def training_setup(
    model: Model,
    ctx: Context,
    knobs: Layout,
    sequence_parallel: bool | None = None,
    acc: Accelerator | None = None,
) -> TrainingSetup:
    """The training setup of ``knobs`` in ``ctx`` (sequence parallelism as ``ctx`` fixes it,
    else ``sequence_parallel``, else on): what builds the layer graphs. An expert-parallel
    degree ``knobs`` fix (dividing the experts) shapes the MoE blocks' graphs; a searched
    one leaves them at 1. On ``acc``, a stack whose fused attention kernel the chip does not
    run (:meth:`~arch_space.perf.device.DeviceProfile.runs_attention`) runs it unfused."""
    sp = ctx.sequence_parallel
    ep = knobs.ep if "ep" not in knobs.open else 1
    if not knobs.open & {"t", "d"} and knobs.d % ep and ep_fits(ep, knobs.t, knobs.d, 1):
        ep //= knobs.t  # folded over tensor x data ranks: the graph at ep / t (placement.md)
    return TrainingSetup(
        seq_len=ctx.seq_len,
        global_batch=ctx.global_batch,
        micro_batch=knobs.mbs,
        recompute=knobs.recompute,
        sequence_parallel=(sequence_parallel is not False) if sp is None else sp,
        tokens_to_train=ctx.tokens_to_train,
        framework=_runnable_framework(ctx, acc),
        state_bytes_per_parameter=ctx.state_bytes_per_parameter,
        optimizer_state=ctx.optimizer_state,
        precision=knobs.precision,
        expert_parallel=ep if model.experts and model.experts % ep == 0 else 1,
        allow_context_extension=ctx.allow_context_extension,
    )


def _runnable_framework(ctx: Context, acc: Accelerator | None) -> str:
    """``ctx``'s stack as it runs on ``acc``: its attention unfused where the chip does not
    run the stack's fused kernel."""
    if acc is None:
        return ctx.framework
    device = ctx.device or device_profile(acc)
    if device.runs_attention(framework_profile(ctx.framework).attention):
        return ctx.framework
    return with_attention(ctx.framework, "unfused")


def timing_design(acc: Accelerator) -> Accelerator:
    """The fields that decide layer times: HBM capacity and the name do not."""
    return dataclasses.replace(acc, name="", hbm_bytes=1 << 30)


def _energy_rates(
    variant: Variant, acc: Accelerator, model: Model, setup: TrainingSetup, host_w_per_node: float
) -> EnergyRates:
    """What one iteration's energy is made of on ``acc`` (:func:`iteration_energy` prices it)."""
    perf = default_settings()
    gradient_bytes, weight_bytes = dp_bytes_per_parameter(setup)
    return EnergyRates(
        compute_j=variant.compute_j,
        memory_j=variant.memory_j,
        # the op model's link energy is its tensor-parallel collectives': the ledger prices it
        network_j=0.0,
        tp_collectives=variant.tp_collectives,
        static_w_per_device=static_power_w(acc),
        intra_node_link_pj_per_bit=perf.intra_node_link_pj_per_bit,
        inter_node_link_pj_per_bit=perf.inter_node_link_pj_per_bit,
        model_parameters=float(model.parameters + model.mtp_parameters()),
        boundary_bytes=max((e.bytes for e in variant.graph.edges), default=0.0),
        host_w_per_node=host_w_per_node,
        dispatch_bytes=sum(x.dispatch_bytes for x in variant.graph.layers),
        kv_bytes=sum(x.kv_bytes for x in variant.graph.layers),
        routing=(variant.graph.top_k, variant.graph.expert_groups, variant.graph.routed_groups),
        # the routed experts of the whole model: each tensor-parallel layer holds 1/t of them
        expert_parameters=sum(
            x.expert_parameters * (variant.graph.tp if x.tensor_parallel else 1)
            for x in variant.graph.layers
        ),
        gradient_bytes_per_parameter=gradient_bytes,
        weight_bytes_per_parameter=weight_bytes,
        regather_per_micro_batch=setup.profile.regather_per_micro_batch,
        p2p_sends=setup.profile.p2p_sends,
        p2p_gathers=setup.profile.p2p_gathers,
        ep_overlap=setup.profile.ep_overlap,
    )


_KNOB_FIELDS: Final = frozenset({"mbs", "recompute", "sp", "split", "precision"})
# the layout fields a framework's rules read; an open one holds its default, which every
# profile runs
_RULED: Final = ("p", "v", "zero")


def evaluate(
    workload: str,
    model: Model,
    acc: Accelerator,
    knobs: Layout,
    ctx: Context,
    beat_s: float = math.inf,
) -> Evaluation:
    """Evaluate one point: the best placement keeping what ``knobs`` fixes, and its score.
    With ``beat_s``, a search (``knobs`` fixing no layout field) with no placement faster
    than ``beat_s`` s per batch says so (infeasible), scheduling no width its bounds rule out.

    ``knobs`` fixes the micro-batch size and recompute mode at least. Fixing nothing more
    (or sequence parallelism too) asks for the search; fixing any other field asks for the
    fastest completion of that partial strategy (:mod:`placement.partial`), all of them a
    fixed one. Raises ConfigError for bad input; returns an infeasible Evaluation (with the
    reason) when nothing fits.

    Notes
    -----
    Layer schedules are the costly step, so in the search only the (width, sp) variants
    whose placement fits the HBM are scheduled (:func:`phaze.model.widths.width_fits`), and another than the
    widest only when its lower-bound placement could beat the best so far
    (:func:`phaze.model.widths.best_widths`). Both are exact: the result is that of scheduling every variant
    and searching them all at once. Megatron's interleaved layouts (``v >= 2``) of the
    variants kept then compete with that placement
    (:func:`placement.interleave.best_interleaved`). A strategy leaving sequence
    parallelism open, where ``ctx`` searches it, has both settings of each width priced.
    """
    assert knobs.given("mbs") and knobs.given("recompute"), "the knobs fix mbs and recompute"
    if knobs.given("sp"):
        ctx = dataclasses.replace(ctx, sequence_parallel=knobs.sp)
    setup = training_setup(model, ctx, knobs, acc=acc)
    check_precision(acc, knobs.precision)
    if ctx.global_batch % knobs.mbs:
        raise ConfigError(
            f"micro_batch = {knobs.mbs} must divide global_batch = {ctx.global_batch}"
        )
    if knobs.given("cp") and ctx.seq_len % knobs.cp:
        allowed = [c for c in CP_DEGREES if ctx.seq_len % c == 0]
        raise ConfigError(
            f"strategy: cp = {knobs.cp} must divide the sequence of {ctx.seq_len} tokens "
            f"(allowed e.g.: {', '.join(map(str, allowed))})"
        )
    if setup.profile.pipeline == "dualpipe" and not all(knobs.given(f) for f in "tpd"):
        # the search's DP and its bounds price 1F1B; DualPipe is priced layout by layout
        raise ConfigError(
            f"strategy: {setup.profile.name}'s DualPipe schedule needs t, p and d given "
            f"(got {knobs}; e.g. --strategy t=1,p=16,d=128)"
        )
    keys = variant_keys(model, ctx, (knobs.t,) if knobs.given("t") else ())
    if not keys:
        return Evaluation(
            workload, acc, knobs, None, None, f"no tensor-parallel width fits {model.name}"
        )
    given = knobs.split is not None or {f for f in FIELDS if knobs.given(f)} - _KNOB_FIELDS
    if given:
        refused = layout_refusals(
            setup.profile,
            **{f: getattr(knobs, f) for f in _RULED},
        )
        if refused:
            raise ConfigError(f"strategy {knobs}: " + "; ".join(refused))
    what = (
        f"the training state of {model.name} ({fmt_count(model.parameters)} parameters x "
        f"{setup.state_bytes_per_parameter} B of weights, gradients and optimizer state)"
    )
    state_bytes = (model.parameters + model.mtp_parameters()) * setup.state_bytes_per_parameter
    beyond = beyond_all_hbm(what, state_bytes, ctx.cluster.devices, acc.hbm_bytes)
    if beyond:  # no layout can hold it: say so, not the first layout's shortfall
        return Evaluation(workload, acc, knobs, None, None, beyond)
    if given:
        found = _given(model, setup, keys, acc, ctx, knobs)
    else:
        found = _searched(model, setup, keys, acc, ctx, beat_s)
    if isinstance(found, str):
        return Evaluation(workload, acc, knobs, None, None, found)
    variant, placement, defaults = found
    return _scored(workload, model, acc, knobs, ctx, setup, (variant, placement, defaults))


def _scored(
    workload: str,
    model: Model,
    acc: Accelerator,
    knobs: Layout,
    ctx: Context,
    setup: TrainingSetup,
    found: tuple[Variant, Placement, str],
) -> Evaluation:
    """The evaluation of a placement found: its iteration's energy and its score."""
    variant, placement, defaults = found
    scoring = ctx.scoring.for_accelerator(acc.profile_name)
    rates = _energy_rates(variant, acc, model, setup, scoring.host_w_per_node)
    micro_batches = setup.global_batch // setup.micro_batch
    ledger = iteration_ledger(placement, rates, ctx.cluster, micro_batches)
    energy = iteration_energy(
        placement,
        rates,
        ctx.cluster,
        micro_batches,
        ledger,
    )
    tokens = setup.training_tokens(model.tokens_to_train)
    score = score_point(
        iteration_s=placement.breakdown.iteration_s,
        global_batch=ctx.global_batch,
        seq_len=ctx.seq_len,
        model_flops_per_batch=ctx.global_batch * model_flops_per_sequence(model, ctx.seq_len),
        tokens_to_train=float(tokens),
        devices=ctx.cluster.devices,
        peak_flops_per_device=acc.peak_flops,
        energy=energy,
        capex=system_capex(acc, ctx.cluster.devices, scoring),
        idle_w_per_device=static_power_w(acc),
        embodied_kgco2e_per_device=embodied_kgco2e(acc),
        params=scoring,
    )
    prices = LinkPrices(
        ctx.cluster,
        (ctx.device or device_profile(acc)).intra_node,
        rates.intra_node_link_pj_per_bit,
        rates.inter_node_link_pj_per_bit,
    )
    return Evaluation(
        workload,
        acc,
        knobs,
        placement,
        score,
        pass_timings=variant.passes,
        defaults=defaults,
        collectives=ledger,
        link_prices=prices,
    )


def _searched(
    model: Model,
    setup: TrainingSetup,
    keys: tuple[Key, ...],
    acc: Accelerator,
    ctx: Context,
    beat_s: float,
) -> tuple[Variant, Placement, str] | str:
    """The search's placement over ``keys`` (its variant and what it chose for sequence
    parallelism when ``ctx`` searches it), or why none fits (or none beats ``beat_s``)."""
    hbm, timing_acc = device_hbm(acc, ctx), timing_design(acc)
    variants, found, fits = best_widths(model, setup, keys, hbm, timing_acc, ctx, beat_s)
    if not fits and runnable_zero_stages(ctx.zero_fallback, setup.profile):
        # only the wider sharding may fit
        ctx = dataclasses.replace(ctx, zero_stages=ctx.zero_fallback, zero_fallback=())
        variants, found, fits = best_widths(model, setup, keys, hbm, timing_acc, ctx, beat_s)
    if not fits:
        return why_no_width_fits(model, setup, keys, hbm, ctx)
    if found is None:
        return f"no placement faster than {beat_s} s per batch"
    # sequence parallelism searched: say what it chose
    defaults = f"sp={'on' if found.layout.sp else 'off'}" if ctx.sequence_parallel is None else ""
    return variants[found.layout.t, found.layout.sp], found, defaults


def _given(
    model: Model,
    setup: TrainingSetup,
    keys: tuple[Key, ...],
    acc: Accelerator,
    ctx: Context,
    layout: Layout,
) -> tuple[Variant, Placement, str] | str:
    """The fastest completion of the partial strategy ``layout`` (its variant and the values
    it gave the open fields), or why none fits."""
    if not layout.given("sp"):  # left open, it is what the search uses (off at t = 1)
        keys = tuple(dict.fromkeys((t, sp and t > 1) for t, sp in keys))
    variants = {
        (t, sp): width_variant(
            model, with_sp(setup, sp), t, timing_design(acc), ctx.cluster, ctx.solver, ctx.device
        )
        for t, sp in keys
    }
    graphs = tuple(v.graph for v in variants.values())
    problem = placement_problem(graphs, device_hbm(acc, ctx), ctx, setup)
    try:
        placement = evaluate_partial(problem, layout, sequence_parallel=ctx.sequence_parallel)
    except Infeasible as e:
        return e.reason
    return (
        variants[placement.layout.t, placement.layout.sp],
        placement,
        describe_defaults(layout, placement.layout),
    )
