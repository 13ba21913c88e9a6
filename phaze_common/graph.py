"""The one topological order of a small DAG that the packages share, deterministic across runs.

Kahn's algorithm with the smallest ready node first (Kahn, "Topological sorting of large
networks", CACM 5(11), 1962), the order :func:`networkx.lexicographical_topological_sort`
gives, without building a networkx graph for the op graphs and placement instances it orders
by the thousand.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from typing import TypeVar

__all__ = ["topological_order"]

T = TypeVar("T")


def topological_order(nodes: Sequence[T], edges: Iterable[tuple[T, T]]) -> list[T]:
    """``nodes`` in the topological order of ``edges`` (source, dest) that takes the smallest
    ready node first; shorter than ``nodes`` when the edges have a cycle (the nodes on it and
    after it are left out).

    Examples
    --------
    >>> topological_order([0, 1, 2, 3], [(2, 1), (3, 0)])
    [2, 1, 3, 0]
    """
    missing = dict.fromkeys(nodes, 0)
    succs: dict[T, list[T]] = {v: [] for v in nodes}
    for a, b in edges:
        missing[b] += 1
        succs[a].append(b)
    ready = [v for v, m in missing.items() if not m]
    heapq.heapify(ready)
    order = []
    while ready:
        v = heapq.heappop(ready)
        order.append(v)
        for w in succs[v]:
            missing[w] -= 1
            if not missing[w]:
                heapq.heappush(ready, w)
    return order
