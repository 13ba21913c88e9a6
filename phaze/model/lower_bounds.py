"""Lower bounds on layer and stage times from op costs alone, with no schedule.

A schedule is the costly step of an evaluation; these bounds are cheap and never above any
schedule's makespan, so they answer "can this possibly win?" before a schedule is made:
:func:`phaze.model.pipeline.evaluate` uses :func:`bound_graph` to leave out tensor-parallel
widths that cannot beat the best so far, and the sweep's pruning uses :func:`pass_bound_s`
for its tight bound of a design (:mod:`phaze.sweep.optimistic`). :func:`beyond_all_hbm`
answers "can it fit at all?": every byte of a model's weights (and, training, its state)
lives on some device, so more than all the devices' HBM fits under no layout.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

from arch_space import Accelerator, Cluster
from arch_space.perf import op_costs
from arch_space.perf.device import DeviceProfile, device_profile
from ilp import makespan_lower_bound
from ilp.timing import op_channel
from phaze_common.graph import topological_order
from phaze_common.units import fmt_bytes
from placement import StageGraph
from placement.adapt import stage_graph
from workloads import (
    LayerGraph,
    LayerKind,
    Model,
    OpGraph,
    Recompute,
    TrainingSetup,
    block_activation_bytes,
    build_layer_graph,
)
from workloads.build import DENSE_BLOCK_CLASS

__all__ = [
    "beyond_all_hbm",
    "bound_graph",
    "pass_bound_s",
    "recompute_workspace_bytes",
    "stack_device",
    "stage_knobs",
]


def beyond_all_hbm(what: str, need_bytes: float, devices: int, hbm_bytes: int) -> str | None:
    """Why ``need_bytes`` (``what``: a model's weights, or its training state) fit no layout
    of ``devices`` devices of ``hbm_bytes`` each, or None: held at least once, fully sharded
    over every device, they still exceed all the devices' HBM together.

    >>> beyond_all_hbm("weights", 2 * 2**40, 8, 80 * 2**30)
    'weights: 2 TiB, more than the HBM of all 8 devices together (8 x 80 GiB = 640 GiB), whatever the layout; at least 26 such devices are needed'
    >>> beyond_all_hbm("weights", 2**30, 8, 80 * 2**30) is None
    True
    """
    total = devices * hbm_bytes
    if need_bytes <= total:
        return None
    return (
        f"{what}: {fmt_bytes(need_bytes)}, more than the HBM of all {devices} devices "
        f"together ({devices} x {fmt_bytes(hbm_bytes)} = {fmt_bytes(total)}), whatever the "
        f"layout; at least {-(-int(need_bytes) // hbm_bytes)} such devices are needed"
    )


def stack_device(
    device: DeviceProfile | None, acc: Accelerator, setup: TrainingSetup
) -> DeviceProfile | None:
    """The sustained rates ``acc`` runs at under ``setup``'s stack: ``device`` (else the
    preset's) with the stack's attention kernel's rate
    (:meth:`~arch_space.perf.device.DeviceProfile.for_attention`); None, the preset's
    as they are, when the kernel changes nothing."""
    if setup.profile.attention != "flash2":
        return device
    return (device or device_profile(acc)).for_attention(setup.profile.attention)


@lru_cache(maxsize=4096)
def bound_graph(
    model: Model,
    setup: TrainingSetup,
    tp: int,
    acc: Accelerator,
    cluster: Cluster,
    device: DeviceProfile | None = None,
) -> StageGraph:
    """Width ``tp``'s stage graph with lower bounds of its layer times (no schedule) and the
    bytes of the scheduled graph (so a placement of it fits exactly when one of that graph
    does); ``device`` overrides the preset's sustained rates, as in the schedules it bounds."""
    lg = build_layer_graph(model, setup, tp)
    device = stack_device(device, acc, setup)
    times = {
        cid: tuple(
            pass_bound_s(g, acc, cluster, device)
            for g in (passes.forward, passes.backward, passes.recompute)
        )
        for cid, passes in lg.op_graphs.items()
    }
    return stage_graph(
        lg, times, **stage_knobs(setup), workspace_bytes=recompute_workspace_bytes(model, setup, lg)
    )


def stage_knobs(setup: TrainingSetup) -> dict[str, object]:
    """The knobs of ``setup`` a stage graph's layout carries (``placement.adapt.stage_graph``)."""
    return {
        "micro_batch": setup.micro_batch,
        "recompute": setup.recompute_mode,
        "sequence_parallel": setup.sequence_parallel,
        "precision": setup.precision,
    }


def recompute_workspace_bytes(
    model: Model, setup: TrainingSetup, lg: LayerGraph
) -> dict[str, float]:
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


@lru_cache(maxsize=8192)
def pass_bound_s(
    graph: OpGraph, acc: Accelerator, cluster: Cluster, device: DeviceProfile | None = None
) -> float:
    """A lower bound on the makespan of any schedule of one pass on ``acc``, from its op
    costs alone: the scheduler's own bound (:func:`ilp.bounds.makespan_lower_bound`),
    without building the scheduler's problem."""
    ops = graph.ops
    if not ops:
        return 0.0
    table = op_costs(graph, acc, cluster, device=device)
    preds: list[list[int]] = [[] for _ in ops]
    for i, j in graph.edges:
        preds[j].append(i)
    order = topological_order(range(len(ops)), graph.edges)
    assert len(order) == len(ops), "an op graph is acyclic"
    position = {op: k for k, op in enumerate(order)}
    single = table.latency_s.tolist()
    split = table.parallel_latency_s.tolist()
    return makespan_lower_bound(
        [dict.fromkeys(table.units[i], 1) for i in order],
        [single[i] for i in order],
        [split[i] for i in order],
        [[position[p] for p in preds[i]] for i in order],
        acc.capacity,
        channels=[op_channel(ops[i]) for i in order],
    )
