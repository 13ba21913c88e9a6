"""Placement: pipeline stages, data/tensor-parallel degrees and time per batch (DESIGN.md §6).

Public API:

* :func:`place` - the best placement over every graph variant (exact downset DP, with a fast
  path for chains);
* :func:`evaluate_fixed` / :func:`parse_strategy` - a given strategy under the same model;
* :func:`read_reference_instance` / :func:`solve_reference` - the Piper / Phaze-reference
  instance format under its own objective;
* :mod:`placement.network` - link choice and ring collectives.
"""

from placement.fixed import Strategy, evaluate_fixed, megatron_chunks, parse_strategy
from placement.reference import (
    ReferenceInstance,
    ReferenceResult,
    parse_reference_instance,
    read_reference_instance,
    reference_document,
    solve_reference,
)
from placement.search import place, place_graph
from placement.types import (
    STATE_BYTES_PER_PARAMETER,
    Network,
    Placement,
    PlacementProblem,
    Stage,
    StageEdge,
    StageGraph,
    StageLayer,
)

__all__ = [
    "Network",
    "Placement",
    "PlacementProblem",
    "ReferenceInstance",
    "ReferenceResult",
    "STATE_BYTES_PER_PARAMETER",
    "Stage",
    "StageEdge",
    "StageGraph",
    "StageLayer",
    "Strategy",
    "evaluate_fixed",
    "megatron_chunks",
    "parse_reference_instance",
    "parse_strategy",
    "place",
    "place_graph",
    "read_reference_instance",
    "reference_document",
    "solve_reference",
]
