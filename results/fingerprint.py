"""What a sweep found, reduced to what a speed change must leave as it was: per workload, the
Pareto front of its objectives (every point on it with its objective values) and the best
point of each objective, plus the point counts.

Two stores with the same fingerprint name the same best designs and the same fronts, value
for value. The front is the sweep's own (all objectives at once, as pruning keeps it:
:mod:`results.fronts`), so it works for any number of objectives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from results.fronts import dominated
from results.pareto import best, parse_objectives
from results.schema import AGGREGATE_WORKLOAD
from results.store import Store

__all__ = ["fingerprint"]


def fingerprint(store: Store, objectives: Sequence[str]) -> dict[str, Any]:
    """The fronts and best points of ``store``'s feasible points over ``objectives``
    (JSON-able: keys and values as the store holds them)."""
    objs = parse_objectives(objectives)
    feasible = [p for p in store.points(feasible_only=True) if p["workload"] != AGGREGATE_WORKLOAD]
    by_workload: dict[str, list[Mapping[str, Any]]] = {}
    for p in feasible:
        if all(p.get(o.metric) is not None for o in objs):
            by_workload.setdefault(p["workload"], []).append(p)
    out: dict[str, Any] = {"points": len(store), "feasible": len(feasible), "workloads": {}}
    for name in sorted(by_workload):
        pts = sorted(by_workload[name], key=lambda p: p["key"])
        rows = np.array(
            [[(-1 if o.sense == "max" else 1) * p[o.metric] for o in objs] for p in pts]
        )
        on_front = ~dominated(rows, rows)
        out["workloads"][name] = {
            "front": {
                p["key"]: [p[o.metric] for o in objs]
                for p, keep in zip(pts, on_front, strict=True)
                if keep
            },
            "best": {o.metric: best(pts, o)["key"] for o in objs},  # type: ignore[index]
        }
    return out
