"""The fronts of a serving sweep at a rate: the prefill-decode design pairs' and the single
designs', each the cost per million output tokens that meets the SLO at the rate against
the p99 time per output token there (both lower is better; docs/serving.md, "Pairs of designs").

Only pairs and points that meet the SLO at the rate (``feasible_at_rate``) have a cost at
the rate, so only they can be on a front.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeVar

from results.pareto import pareto, rank

__all__ = ["FRONT_AXES", "meeting", "front", "cheapest", "single_points"]

R = TypeVar("R", bound=Mapping[str, Any])

#: The fronts' axes, both minimised: cost per million output tokens at the rate, p99 TPOT.
FRONT_AXES: Final = ("usd_per_million_tokens_at_rate", "tpot_p99_s")
_OBJECTIVES: Final = [(m, "min") for m in FRONT_AXES]


def meeting(records: Sequence[R]) -> list[R]:
    """The ``records`` (pairs, or points) that meet the SLO at the rate."""
    return [r for r in records if r.get("feasible_at_rate")]


def front(records: Sequence[R]) -> list[R]:
    """The Pareto front over :data:`FRONT_AXES` of the ``records`` (pairs, or points) that
    meet the SLO at the rate, cheapest first.

    Examples
    --------
    >>> rs = [{"key": "a", "feasible_at_rate": 1, "usd_per_million_tokens_at_rate": 1.0,
    ...        "tpot_p99_s": 0.03},
    ...       {"key": "b", "feasible_at_rate": 1, "usd_per_million_tokens_at_rate": 2.0,
    ...        "tpot_p99_s": 0.01},
    ...       {"key": "c", "feasible_at_rate": 1, "usd_per_million_tokens_at_rate": 2.0,
    ...        "tpot_p99_s": 0.02},
    ...       {"key": "d", "feasible_at_rate": 0, "usd_per_million_tokens_at_rate": None,
    ...        "tpot_p99_s": 0.001}]
    >>> [r["key"] for r in front(rs)]
    ['a', 'b']
    """
    return pareto(meeting(records), _OBJECTIVES)


def cheapest(records: Sequence[R]) -> R | None:
    """The record of least cost per million tokens at the rate among those meeting the SLO
    there (ties: lower p99 TPOT, then design and key), or None."""
    ranked = rank(meeting(records), _OBJECTIVES)
    return ranked[0] if ranked else None


def single_points(points: Sequence[R]) -> list[R]:
    """The single-design serving points of a workload (not the per-design aggregates)."""
    return [p for p in points if p.get("mode") == "serve" and p.get("feasible")]
