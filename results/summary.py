"""Small views of a sweep's points shared by the plots and the report: groups and highlights."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from results.pareto import Objective, ObjectiveSpec, best, best_per_design, parse_objectives
from results.schema import AGGREGATE_WORKLOAD, COLUMNS

__all__ = [
    "DEFAULT_OBJECTIVES",
    "by_workload",
    "throughput_metric",
    "metric_for",
    "is_pruned",
    "is_preset",
    "objective_title",
    "Highlight",
    "highlights",
    "top_designs",
]

# The objectives a report ranks by when the sweep's inputs name none.
DEFAULT_OBJECTIVES: Final = ("tokens_per_s", "tco_usd", "total_kgco2e", "tcdp")


def by_workload(points: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Points grouped by workload: workloads in name order, the aggregate rows last."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for p in points:
        groups.setdefault(str(p.get("workload")), []).append(p)
    order = sorted(groups, key=lambda w: (w == AGGREGATE_WORKLOAD, w))
    return {w: groups[w] for w in order}


def throughput_metric(workload: str) -> str:
    """``tokens_per_s`` for a workload; ``throughput_score`` for the aggregate rows."""
    return "throughput_score" if workload == AGGREGATE_WORKLOAD else "tokens_per_s"


def metric_for(workload: str, metric: str) -> str:
    """The column that plays ``metric``'s role in ``workload``'s rows (throughput -> score)."""
    if workload == AGGREGATE_WORKLOAD and metric in ("tokens_per_s", "samples_per_s"):
        return "throughput_score"
    return metric


def is_pruned(p: Mapping[str, Any]) -> bool:
    """True for points the sweep skipped by a proven bound (stored infeasible, reason 'pruned...')."""
    return not p.get("feasible") and str(p.get("reason") or "").startswith("pruned")


def is_preset(p: Mapping[str, Any]) -> bool:
    """True for points of a named design (a preset such as 'a100'); swept designs have no name."""
    return bool(p.get("design_name"))


def objective_title(spec: ObjectiveSpec) -> str:
    """``highest throughput`` / ``lowest tCDP``: the words for "best by this objective"."""
    (o,) = parse_objectives([spec])
    return f"{'highest' if o.sense == 'max' else 'lowest'} {COLUMNS[o.metric].label}"


@dataclass(frozen=True, slots=True)
class Highlight:
    """A point that is the best of its group for one or more objectives."""

    point: Mapping[str, Any]
    objectives: tuple[Objective, ...]

    @property
    def title(self) -> str:
        """``highest throughput, lowest tCDP``."""
        return ", ".join(objective_title(o) for o in self.objectives)

    @property
    def metrics(self) -> frozenset[str]:
        """Columns this point wins on (tCDP in either unit)."""
        names = {o.metric for o in self.objectives}
        if names & {"tcdp", "tcdp_kgco2e_days"}:
            names |= {"tcdp", "tcdp_kgco2e_days"}
        return frozenset(names)


def highlights(
    points: Sequence[Mapping[str, Any]], objectives: Iterable[ObjectiveSpec]
) -> list[Highlight]:
    """The best point for each objective, once each, with every objective it wins.

    ``points`` are one workload's; for the aggregate rows throughput means the score. Ties are
    broken by the point's throughput, then design id and key, so the selection is deterministic.
    """
    won: dict[str, list[Objective]] = {}
    rows: dict[str, Mapping[str, Any]] = {}
    workload = str(points[0].get("workload")) if points else ""
    tie = throughput_metric(workload)
    for o in parse_objectives(objectives):
        o = Objective(metric_for(workload, o.metric), o.sense)
        p = best(points, [o] + ([Objective(tie, "max")] if tie != o.metric else []))
        if p is None:
            continue
        k = str(p.get("key"))
        rows[k] = p
        won.setdefault(k, []).append(o)
    return [Highlight(rows[k], tuple(won[k])) for k in won]


def top_designs(
    points: Sequence[Mapping[str, Any]],
    objective: ObjectiveSpec,
    objectives: Iterable[ObjectiveSpec],
    n: int,
) -> list[Mapping[str, Any]]:
    """The ``n`` best designs by ``objective``, each at its best point: the one ranking rule of
    the sweep's tables and the report's. Ties are broken by the other ``objectives`` in their
    order, then design id and key.
    """
    (first,) = parse_objectives([objective])
    others = [o for o in parse_objectives(objectives) if o.metric != first.metric]
    return best_per_design(points, [first, *others])[:n]
