"""Build a :class:`~placement.types.StageGraph` from a workloads layer graph and layer times.

The only place placement touches ``workloads``: the caller passes the times its schedules
found for each distinct layer (by ``class_id``); bytes and flags come from the layer graph.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from phaze_common.errors import ConfigError
from placement.layout import DEFAULT_PRECISION, Layout
from placement.types import RecomputeMode, StageEdge, StageGraph, StageLayer
from workloads.layer_graph import LayerGraph

__all__ = ["stage_graph", "tp_collectives"]

# (kind, bytes, group, devices, runs per micro-batch) of the tensor-parallel collectives
TpCollectives = tuple[tuple[str, float, int, int, int], ...]


def tp_collectives(graph: LayerGraph) -> TpCollectives:
    """The tensor-parallel collectives the op graphs of ``graph``'s layers run per
    micro-batch (forward, backward and recompute passes of every class a layer runs), as
    (kind, full-tensor bytes, group, devices running it, runs): what the iteration's ledger
    records (:func:`placement.ledger.iteration_ledger`). A layer split over the tensor
    ranks runs them on its ``tp`` devices."""
    runs: Counter = Counter()
    for layer in graph.layers:
        devices = graph.tp if layer.tensor_parallel else 1
        for cid in layer.classes:
            passes = graph.op_graphs[cid]
            for g in (passes.forward, passes.backward, passes.recompute):
                for op in g.ops:
                    if op.kind == "collective" and op.collective_bytes > 0 and op.group > 1:
                        key = (str(op.collective), float(op.collective_bytes), op.group, devices)
                        runs[key] += 1
    return tuple((*key, n) for key, n in sorted(runs.items()))


def stage_graph(
    graph: LayerGraph,
    times_s: Mapping[str, tuple[float, float, float]],
    *,
    micro_batch: int,
    recompute: RecomputeMode,
    sequence_parallel: bool = False,
    precision: str = DEFAULT_PRECISION,
    workspace_bytes: Mapping[str, float] | None = None,
    tp_comm_s: Mapping[str, float] | None = None,
) -> StageGraph:
    """``times_s[class_id] = (forward, backward, recompute)`` seconds per micro-batch;
    ``tp_comm_s[class_id]`` the exposed collectives of its forward and backward passes. A
    layer's times and collectives are the sums over its :attr:`~workloads.layer_graph.Layer.classes`
    (its workspace the largest). The graph's :attr:`~placement.types.StageGraph.layout` holds
    the width and the knobs given (``precision`` the recipe's name, :mod:`workloads.precision`),
    which every placement of it keeps.

    Layer indices become positions in ``graph.layers`` (already topological).
    """
    missing = sorted({c for x in graph.layers for c in x.classes} - set(times_s))
    if missing:
        raise ConfigError(f"stage graph (tp={graph.tp}): no times for layer classes {missing}")
    index = {x.index: i for i, x in enumerate(graph.layers)}
    ws = workspace_bytes or {}
    comm = tp_comm_s or {}
    layers = tuple(
        StageLayer(
            name=x.name,
            fwd_s=sum(times_s[c][0] for c in x.classes),
            bwd_s=sum(times_s[c][1] for c in x.classes),
            recompute_s=sum(times_s[c][2] for c in x.classes),
            parameters=x.parameters,
            stash_bytes=float(x.activation_bytes),
            workspace_bytes=float(max(ws.get(c, 0.0) for c in x.classes)),
            tensor_parallel=x.tensor_parallel and graph.tp > 1,
            kind=str(x.kind),
            tp_comm_s=float(sum(comm.get(c, 0.0) for c in x.classes)),
            expert_parameters=float(x.expert_parameters),
            dispatch_bytes=float(x.dispatch_bytes),
            kv_bytes=float(x.kv_bytes),
            tied_parameters=float(x.tied_parameters),
        )
        for x in graph.layers
    )
    edges = tuple(StageEdge(index[e.src], index[e.dst], float(e.bytes)) for e in graph.edges)
    layout = Layout(
        t=graph.tp,
        mbs=micro_batch,
        recompute=str(recompute),  # a workloads.Recompute StrEnum becomes its value
        sp=sequence_parallel,
        precision=precision,
    )
    return StageGraph(
        layers=layers,
        edges=edges,
        layout=layout,
        experts=graph.experts,
        top_k=graph.top_k,
        expert_groups=graph.expert_groups,
        routed_groups=graph.routed_groups,
    )
