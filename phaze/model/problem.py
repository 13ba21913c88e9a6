"""The placement problem a design poses: what a placement needs of its devices (HBM
capacity and bandwidth, the measured collective curve, a collective's share of the compute)
and the framework's rules, for the layer graphs of one training setup."""

from __future__ import annotations

from arch_space import Accelerator
from arch_space.perf import default_settings
from arch_space.perf.device import CollectiveCurve, device_profile
from phaze.model.context import Context, search_degrees
from phaze_common.errors import ConfigError
from placement import PlacementProblem, StageGraph
from workloads import TrainingSetup
from workloads.framework import FrameworkProfile, runnable_zero_stages

__all__ = ["Hbm", "device_hbm", "dp_bytes_per_parameter", "placement_problem"]

# (HBM capacity bytes, HBM bandwidth bytes/s, measured collective curve inside a node, share
# of the compute a collective holds): all a placement needs of a device (:func:`device_hbm`)
Hbm = tuple[int, float, CollectiveCurve | None, float]


def device_hbm(acc: Accelerator, ctx: Context) -> Hbm:
    """What a placement needs of ``acc`` (its collective curve and the share of its compute
    a collective holds from ``ctx.device`` if set)."""
    device = ctx.device or device_profile(acc)
    return (
        acc.hbm_bytes,
        acc.hbm_bandwidth_bytes_per_s,
        device.intra_node,
        device.collective_compute_share,
    )


def dp_bytes_per_parameter(setup: TrainingSetup) -> tuple[float, float]:
    """(gradient reduction, weight all-gather) bytes per parameter of the data-parallel
    collectives: the gradients reduce in the framework's format where it names one, else in
    the state's where it fixes one (DeepSpeed's BF16 optimizer: its fp32 accumulators), else
    in the weights' (Megatron-Core reduces in the parameters' dtype unless told fp32); the
    updated weights gather in the weights' format."""
    parts = setup.state_parts
    weights = float(parts.weight_bytes)
    grads = setup.profile.reduce_bytes_per_parameter or parts.reduced_grad_bytes or weights
    return float(grads), weights


def placement_problem(
    graphs: tuple[StageGraph, ...], hbm: Hbm, ctx: Context, setup: TrainingSetup
) -> PlacementProblem:
    """The placement problem of ``graphs`` on devices with ``hbm`` in ``ctx``'s cluster."""
    hbm_bytes, hbm_bytes_per_s, collectives, compute_share = hbm
    eps, cps = search_degrees(max(g.experts for g in graphs), ctx)
    fw = setup.profile
    gradient_bytes, weight_bytes = dp_bytes_per_parameter(setup)
    return PlacementProblem(
        graphs=graphs,
        cluster=ctx.cluster,
        hbm_bytes=float(hbm_bytes),
        global_batch=ctx.global_batch,
        state_bytes_per_parameter=float(setup.state_bytes_per_parameter),
        # through HBM: the step after the last backward pass, a caching recipe's weight casts
        optimizer_s_per_parameter=setup.state_parts.step_bytes_per_parameter
        / (hbm_bytes_per_s * default_settings().hbm_efficiency),
        weight_refresh_s_per_parameter=setup.recipe.weight_refresh_bytes_per_parameter
        / (hbm_bytes_per_s * default_settings().hbm_efficiency),
        p2p_overlap=fw.p2p_overlap != "never",
        p2p_overlap_interleaved_only=fw.p2p_overlap == "interleaved",
        p2p_sends=fw.p2p_sends,
        p2p_gathers=fw.p2p_gathers,
        dp_overlap=fw.dp_overlap,
        param_gather_overlap=fw.param_gather_overlap,
        sharded_prefetch=fw.sharded_prefetch,
        regather_per_micro_batch=fw.regather_per_micro_batch,
        gradient_bytes_per_parameter=gradient_bytes,
        weight_bytes_per_parameter=weight_bytes,
        max_stages=1 if fw.pipeline == "none" else None,
        interleaving=fw.pipeline == "interleaved",
        dualpipe=fw.pipeline == "dualpipe",
        ep_overlap=fw.ep_overlap,
        comm_sm_share=fw.comm_sm_share,
        collectives=collectives,
        collective_compute_share=compute_share,
        zero_stages=_zero_stages(ctx, fw),
        optimizer_bytes_per_parameter=float(setup.optimizer_bytes_per_parameter),
        ep_degrees=eps,
        cp_degrees=cps,
    )


def _zero_stages(ctx: Context, fw: FrameworkProfile) -> tuple[int, ...]:
    """The ZeRO stages of ``ctx`` the framework runs; ConfigError when it runs none."""
    stages = runnable_zero_stages(ctx.zero_stages, fw)
    if not stages:
        raise ConfigError(
            f"zero: {fw.name} runs ZeRO stages {', '.join(map(str, fw.zero_stages))} "
            f"(asked for {', '.join(map(str, ctx.zero_stages))})"
        )
    return stages
