"""The sweep: workloads x designs x knobs, evaluated in parallel, committed as they finish.

Work is split by design: one task evaluates one design (one HBM capacity) for every workload
and knob setting, and its points are committed to the SQLite store as soon as it returns.
A re-run skips designs whose points are all stored, so an interrupted sweep resumes where it
stopped and ends with exactly the results of an uninterrupted one.

Exact pruning (docs/models.md): a design is skipped only when, for every workload, some evaluated
point dominates an *optimistic bound* of every point the design could reach (throughput at
100 % MFU; cost exact; carbon and time at that throughput with the least possible energy).
The bound is valid because no placement beats peak FLOP/s, so a pruned design can sit on no
Pareto front of the sweep's objectives. Designs are processed in rounds of growing size in a
fixed order, each round pruned only against earlier rounds, so which designs are pruned does
not depend on the executor, the number of workers or an interruption.

The stages, one module each: :mod:`~phaze.sweep.planning` (config -> designs and shared
context), :mod:`~phaze.sweep.tasks` (what a worker runs), :mod:`~phaze.sweep.records` (store
records of points), :mod:`~phaze.sweep.optimistic` (the bounds), :mod:`results.fronts`
and :mod:`~phaze.sweep.rounds` (pruning rounds), :mod:`~phaze.sweep.aggregate` (rows over
workloads) and :mod:`~phaze.sweep.run` (the driver).
"""

from phaze.sweep.optimistic import Bound, bounds, tight_bound
from phaze.sweep.planning import plan
from phaze.sweep.records import placement_summary, point_key, record_of, schedule_exactness
from phaze.sweep.run import SweepResult, run_sweep

__all__ = [
    "SweepResult",
    "Bound",
    "bounds",
    "tight_bound",
    "placement_summary",
    "point_key",
    "record_of",
    "schedule_exactness",
    "run_sweep",
    "plan",
]
