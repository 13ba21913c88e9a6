"""Per-layer operator scheduling (DESIGN.md §5): which ops share the cores, which run intra-op
parallel, in what order, for the least makespan.

Public API: :func:`solve_schedule` (one op graph on T tensor and W vector cores) and its
:class:`Schedule`.
"""

from ilp.schedule import (
    DEFAULT_MIP_GAP,
    DEFAULT_TIME_LIMIT_S,
    Method,
    Schedule,
    ScheduleStatus,
    solve_schedule,
)

__all__ = [
    "DEFAULT_MIP_GAP",
    "DEFAULT_TIME_LIMIT_S",
    "Method",
    "Schedule",
    "ScheduleStatus",
    "solve_schedule",
]
