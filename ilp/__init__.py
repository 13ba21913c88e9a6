"""Per-layer operator scheduling (docs/scheduling.md): which ops share the cores, which run intra-op
parallel, in what order, for the least makespan.

* :func:`solve_schedule` - one op graph (networkx, with costs) on the chip's kinds of compute
  unit and any further resource kinds (resources are data: kinds, capacities, units per op).
* :func:`layer_timing` - every distinct layer of a layer graph on one design, for placement
  (each collective holding its parallel group's communication channel).
* :func:`makespan_lower_bound` - what no schedule can beat, from op costs alone (pruning).
"""

from ilp.bounds import makespan_lower_bound
from ilp.schedule import (
    DEFAULT_MIP_GAP,
    DEFAULT_SEARCH_NODES,
    DEFAULT_TIME_LIMIT_S,
    HEURISTIC,
    SCHEDULERS,
    Method,
    Schedule,
    ScheduleStatus,
    solve_schedule,
)
from ilp.timing import LayerTiming, PassTiming, costed_graph, layer_timing, pass_schedule

__all__ = [
    "DEFAULT_MIP_GAP",
    "DEFAULT_SEARCH_NODES",
    "DEFAULT_TIME_LIMIT_S",
    "HEURISTIC",
    "SCHEDULERS",
    "LayerTiming",
    "Method",
    "PassTiming",
    "Schedule",
    "ScheduleStatus",
    "costed_graph",
    "layer_timing",
    "makespan_lower_bound",
    "pass_schedule",
    "solve_schedule",
]
