"""Pareto fronts of minimised objective rows, and whether they dominate bounds.

Pruning asks, for many bounds, "does some evaluated point dominate this one?"; the points'
front answers exactly as all the points would, in O(front) per bound.
"""

from __future__ import annotations

from typing import Final

import numpy as np

__all__ = ["front_add", "dominated"]

# Booleans in the temporaries of one front comparison (bounds x front rows x objectives).
_COMPARE_CELLS: Final = 1 << 22


def front_add(front: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``front`` (minimised objective rows) with ``rows`` added, keeping only the rows that
    no other row is <= in every objective.

    A bound is dominated by some point iff it is dominated by some row of this front (a
    point that another is <= everywhere dominates nothing the other does not), so pruning
    compares bounds with the front alone: O(front) rather than O(points) per design.
    """
    if rows.size == 0:
        return front
    rows = rows[~_covered(front, rows)]
    for r in rows:
        if front.size and np.any(np.all(front <= r, axis=1)):
            continue
        front = np.vstack([front[~np.all(r <= front, axis=1)], r])
    return front


def _covered(front: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """For each of ``rows``: is some row of ``front`` <= it in every objective?"""
    return _compare(front, rows, strict=False)


def dominated(front: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """For each of ``rows``: is some row of ``front`` <= it in every objective and < in one?"""
    return _compare(front, rows, strict=True)


def _compare(front: np.ndarray, rows: np.ndarray, *, strict: bool) -> np.ndarray:
    out = np.zeros(len(rows), dtype=bool)
    if front.size == 0 or rows.size == 0:
        return out
    step = max(1, _COMPARE_CELLS // front.size)  # bounds the (step, front, objectives) temporaries
    for lo in range(0, len(rows), step):
        r = rows[lo : lo + step, None, :]
        hit = np.all(front <= r, axis=2)
        if strict:
            hit &= np.any(front < r, axis=2)
        out[lo : lo + step] = np.any(hit, axis=1)
    return out
