"""Placement: pipeline stages, data/tensor-parallel degrees and time per batch (docs/placement.md).

Public API:

* :func:`place` - the best placement over every graph variant (exact downset DP, with a fast
  path for chains) on an :class:`arch_space.Cluster` (re-exported here);
* :class:`Layout` - the one parallel layout value; :func:`parse_strategy` reads it from a
  strategy string and ``str(layout)`` writes it;
* :class:`ServingLayout` - a serving deployment's pools (each a :class:`Layout`) and engine
  knobs; :func:`parse_serving` reads its strategy string, :mod:`placement.serving_engine`
  gives its steady state (docs/serving.md);
* :func:`evaluate_fixed` - a given layout under the same model;
* :func:`read_reference_instance` / :func:`solve_reference` - the Piper / Phaze-reference
  instance format under its own objective;
* :mod:`placement.iteration` - the iteration model: named time terms, memory per device
  and energy of a placement;
* :mod:`placement.network` - link choice and ring collectives;
* :func:`placement.adapt.stage_graph` - a workloads ``LayerGraph`` plus layer times as a
  :class:`StageGraph`.

Examples
--------
>>> from placement import Cluster, PlacementProblem, StageEdge, StageGraph, StageLayer, place
>>> layers = tuple(StageLayer(f"b{i}", 1.0, 2.0, parameters=10, stash_bytes=5.0,
...                           tensor_parallel=False) for i in range(4))
>>> g = StageGraph(layers, tuple(StageEdge(i, i + 1, 0.0) for i in range(3)))
>>> best = place(PlacementProblem((g,), Cluster(devices=1), hbm_bytes=1e9, global_batch=2))
>>> best.layout.p, best.layout.d, best.breakdown.iteration_s  # 2 micro-batches x 4 x (1 + 2) s
(1, 1, 24.0)
"""

from arch_space.accelerator import Cluster
from placement.chunks import megatron_chunks
from placement.ep_cp import ep_cp_graph
from placement.fixed import evaluate_fixed
from placement.iteration import DeviceMemory, IterationEnergy, IterationTime
from placement.layout import Groups, Layout, Links, parse_strategy
from placement.reference import (
    ReferenceInstance,
    ReferenceResult,
    parse_reference_instance,
    read_reference_instance,
    reference_document,
    solve_reference,
)
from placement.search import place
from placement.serving_layout import ServingLayout, parse_serving
from placement.types import (
    OPTIMIZER_STEP_BYTES_PER_PARAMETER,
    STATE_BYTES_PER_PARAMETER,
    Placement,
    PlacementProblem,
    Stage,
    StageEdge,
    StageGraph,
    StageLayer,
)

__all__ = [
    "Cluster",
    "DeviceMemory",
    "IterationEnergy",
    "IterationTime",
    "Groups",
    "Layout",
    "Links",
    "Placement",
    "PlacementProblem",
    "ReferenceInstance",
    "ReferenceResult",
    "ServingLayout",
    "OPTIMIZER_STEP_BYTES_PER_PARAMETER",
    "STATE_BYTES_PER_PARAMETER",
    "Stage",
    "StageEdge",
    "StageGraph",
    "StageLayer",
    "ep_cp_graph",
    "evaluate_fixed",
    "megatron_chunks",
    "parse_reference_instance",
    "parse_serving",
    "parse_strategy",
    "place",
    "read_reference_instance",
    "reference_document",
    "solve_reference",
]
