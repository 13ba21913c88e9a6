"""Layer timings for the placement stage: op costs -> schedules -> :class:`LayerTiming`.

For each distinct layer (class id) of a :class:`~workloads.layer_graph.LayerGraph`, the
operator model (:func:`arch_space.perf.op_costs`) gives every op the kinds of compute unit it
runs on and its cost on one unit of each and on all units of them; those become the
scheduler's node attributes, and the design's units of each kind
(:attr:`~arch_space.accelerator.Accelerator.capacity`) its cores; :func:`ilp.solve_schedule`
gives each pass's makespan, energy and utilisation. Every collective over more than one
device holds one unit of its parallel group's communication channel (a resource kind of one
unit, declared for the pass when it has such collectives), so a group's collectives run one
at a time, in the order the scheduler finds best, beside the compute that does not depend on
them (a split op too: split ops hold every core, not the channel). Identical passes (same
ops, same design) are solved once: timings are cached by content (the op graph, the
accelerator without its name, the cluster and the :class:`SolveOptions`), and schedules by
their costs and unit counts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import TypedDict, Unpack

import networkx as nx

from arch_space.accelerator import Accelerator, Cluster
from arch_space.perf import op_costs
from arch_space.perf.device import DeviceProfile
from ilp.problem import channel_kind
from ilp.schedule import (
    DEFAULT_MIP_GAP,
    DEFAULT_SEARCH_NODES,
    DEFAULT_TIME_LIMIT_S,
    Schedule,
    solve_schedule,
)
from workloads.layer_graph import LayerGraph
from workloads.ops import Op, OpGraph, OpKind

__all__ = [
    "PassTiming",
    "LayerTiming",
    "SolveOptions",
    "SolveSettings",
    "channels",
    "op_channel",
    "costed_graph",
    "pass_schedule",
    "layer_timing",
]


@dataclass(frozen=True, slots=True)
class SolveOptions:
    """How each pass is scheduled: the arguments of :func:`ilp.solve_schedule` of that name."""

    solver: str = "highs"
    time_limit_s: float = DEFAULT_TIME_LIMIT_S
    mip_gap: float = DEFAULT_MIP_GAP
    search_nodes: int = DEFAULT_SEARCH_NODES


class SolveSettings(TypedDict, total=False):
    """:class:`SolveOptions` as keyword arguments."""

    solver: str
    time_limit_s: float
    mip_gap: float
    search_nodes: int


@dataclass(frozen=True, slots=True)
class PassTiming:
    """One pass (forward, backward or recompute) of one distinct layer on one design.

    ``utilisation_by_kind`` is the average share of each resource kind's units busy over the
    makespan, as (kind, share) pairs (hashable like the rest; ``dict()`` of it is the
    mapping). ``status``,
    ``method`` and ``gap`` say how exact the schedule is (see :class:`ilp.Schedule`).
    ``comm_exposed_s`` is the time in which collectives run and no compute op does.
    ``energy_j`` sums the ops' energies (each with the chip's static power over its own
    latency); ``compute_j``/``memory_j``/``network_j`` split the dynamic energy alone (ops in
    the mode the schedule chose), for totals that count static power once per chip.
    """

    makespan_s: float
    energy_j: float
    compute_j: float
    memory_j: float
    network_j: float
    solver: str
    status: str
    method: str
    gap: float
    wall_s: float
    time_limit_s: float
    utilisation_by_kind: tuple[tuple[str, float], ...] = ()
    comm_exposed_s: float = 0.0

    @classmethod
    def from_schedule(cls, s: Schedule, graph: nx.DiGraph) -> PassTiming:
        parts = [0.0, 0.0, 0.0]
        for node, attrs in graph.nodes(data=True):
            key = "parallel_parts_j" if node in s.parallel else "parts_j"
            for i, x in enumerate(attrs.get(key, (0.0, 0.0, 0.0))):
                parts[i] += x
        return cls(
            makespan_s=s.makespan_s,
            energy_j=s.energy_j,
            compute_j=parts[0],
            memory_j=parts[1],
            network_j=parts[2],
            solver=s.solver,
            status=str(s.status),
            method=str(s.method),
            gap=s.gap,
            wall_s=s.wall_s,
            time_limit_s=s.time_limit_s,
            utilisation_by_kind=tuple(s.utilisation.items()),
            comm_exposed_s=_exposed_comm_s(s, graph),
        )


def _merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        elif b > a:
            out.append((a, b))
    return out


def _exposed_comm_s(s: Schedule, graph: nx.DiGraph) -> float:
    """Seconds of the makespan in which a collective runs and no compute op does (the
    compute a collective holds beside other ops is not compute)."""
    comm, work = [], []
    for node, attrs in graph.nodes(data=True):
        op = attrs.get("op")
        if op is None or node not in s.start_s:
            continue
        interval = (s.start_s[node], s.start_s[node] + s.duration_s[node])
        if op.kind is OpKind.COLLECTIVE:
            comm.append(interval)
        elif attrs["units"] and op.kind is not OpKind.COMM_SHARE:
            work.append(interval)
    exposed = 0.0
    busy = _merged(work)
    for a, b in _merged(comm):
        covered = sum(max(0.0, min(b, y) - max(a, x)) for x, y in busy)
        exposed += b - a - covered
    return exposed


@dataclass(frozen=True, slots=True)
class LayerTiming:
    """Forward, backward and recompute passes of one distinct layer.

    ``recompute`` is the extra work re-run before the backward pass under the training
    setup's recompute mode (zero time and energy without recompute).
    """

    class_id: str
    forward: PassTiming
    backward: PassTiming
    recompute: PassTiming


def costed_graph(
    graph: OpGraph, acc: Accelerator, cluster: Cluster, device: DeviceProfile | None = None
) -> nx.DiGraph:
    """The networkx view of ``graph`` with the kinds of unit each op runs on (``units``, one
    of each in its single mode), its single- and all-unit latency and energy on ``acc`` (the
    scheduler's input), and each collective's ``demand`` of one unit of its group's channel
    (:func:`channels`); ``device`` overrides the preset's sustained rates."""
    table = op_costs(graph, acc, cluster, device=device)
    g = nx.DiGraph(graph.to_networkx())
    for k, op in enumerate(graph.ops):
        if (channel := op_channel(op)) is not None:
            g.nodes[op.name]["demand"] = {channel: 1}
        g.nodes[op.name].update(
            units=dict.fromkeys(table.units[k], 1),
            latency_s=float(table.latency_s[k]),
            parallel_latency_s=float(table.parallel_latency_s[k]),
            energy_j=float(table.energy_j[k]),
            parallel_energy_j=float(table.parallel_energy_j[k]),
            parts_j=tuple(map(float, table.parts_j[k])),
            parallel_parts_j=tuple(map(float, table.parallel_parts_j[k])),
        )
    return g


def op_channel(op: Op) -> str | None:
    """The channel a collective over more than one device holds: its parallel group's."""
    if op.kind is OpKind.COLLECTIVE and op.group > 1:
        return channel_kind(op.comm_group)
    return None


def channels(graph: nx.DiGraph) -> dict[str, int]:
    """The channels the ops of a costed graph hold, one unit each (the further resources
    :func:`ilp.solve_schedule` is given)."""
    return {k: 1 for _, d in graph.nodes(data="demand") if d for k in d}


def pass_schedule(
    graph: OpGraph, acc: Accelerator, cluster: Cluster, **settings: Unpack[SolveSettings]
) -> Schedule:
    """The optimal schedule of one pass's op graph on ``acc``'s compute units and its
    collectives' channels (``settings``: :class:`SolveOptions`)."""
    costed = costed_graph(graph, acc, cluster)
    return _schedule(costed, acc, SolveOptions(**settings))


def _schedule(costed: nx.DiGraph, acc: Accelerator, options: SolveOptions) -> Schedule:
    return solve_schedule(
        costed,
        acc.capacity,
        resources=channels(costed),
        solver=options.solver,
        time_limit_s=options.time_limit_s,
        mip_gap=options.mip_gap,
        search_nodes=options.search_nodes,
    )


@lru_cache(maxsize=8192)
def _pass_timing(
    graph: OpGraph,
    acc: Accelerator,
    cluster: Cluster,
    options: SolveOptions,
    device: DeviceProfile | None,
) -> PassTiming:
    costed = costed_graph(graph, acc, cluster, device)
    timing = PassTiming.from_schedule(_schedule(costed, acc, options), costed)
    if graph.host_s > timing.makespan_s:  # the device waits for the host's launches
        return dataclasses.replace(timing, makespan_s=graph.host_s)
    return timing


def layer_timing(
    layer_graph: LayerGraph,
    acc: Accelerator,
    cluster: Cluster,
    *,
    device: DeviceProfile | None = None,
    **settings: Unpack[SolveSettings],
) -> Mapping[str, LayerTiming]:
    """Forward, backward and recompute timing of every distinct layer, by class id;
    ``device`` overrides the preset's sustained rates (:mod:`arch_space.perf.device`),
    ``settings`` are the :class:`SolveOptions`.

    Raises
    ------
    ConfigError
        Bad solver name or settings.
    SolverError
        Every solver failed on some pass (timeouts are not errors: see ``status``).
    """
    design = dataclasses.replace(acc, name="")  # the name does not change any cost
    options = SolveOptions(**settings)
    out = {}
    for class_id, passes in layer_graph.op_graphs.items():
        timings = [
            _pass_timing(g, design, cluster, options, device)
            for g in (passes.forward, passes.backward, passes.recompute)
        ]
        out[class_id] = LayerTiming(class_id, *timings)
    return MappingProxyType(out)
