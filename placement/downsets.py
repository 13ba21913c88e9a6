"""Downsets of a layer DAG and the contiguous stages between nested pairs of them.

A *downset* is a set of layers closed under successors (if a layer is in it, so is every
layer it feeds). A pipeline's stages, read from the last one back, grow a chain of downsets
``{} = D_0 < D_1 < ... < D_p = V``; stage ``i`` from the end is ``D_i \\ D_(i-1)``, a contiguous
subgraph (Tarnawski et al., "Piper", NeurIPS 2021, §4). A chain of ``n`` layers has ``n + 1``
downsets (its suffixes); a general DAG can have exponentially many, so we stop at a limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from phaze_common.errors import SolverError

__all__ = ["DOWNSET_LIMIT", "PAIR_LIMIT", "DownsetPairs", "downset_pairs"]

# Past these sizes the general DP would need more memory than a laptop has (pair membership
# is a pairs x layers boolean matrix); the reference C++ stops at 40,000 downsets.
DOWNSET_LIMIT: Final = 20_000
PAIR_LIMIT: Final = 400_000


@dataclass(frozen=True, slots=True)
class DownsetPairs:
    """Every downset and every (downset, strict sub-downset) pair.

    ``members[k]`` is downset ``k`` as a boolean row over layers; state 0 is the empty set
    and ``full`` the whole graph. Pairs are sorted by ``outer``; ``in_stage[q]`` marks the
    layers of stage ``members[outer[q]] & ~members[inner[q]]``.
    """

    members: np.ndarray
    full: int
    outer: np.ndarray
    inner: np.ndarray
    in_stage: np.ndarray


def _enumerate(n: int, successors: tuple[int, ...]) -> list[int]:
    """All downsets as bitmasks, by growing from the empty set one admissible layer at a time."""
    seen = {0}
    order = [0]
    frontier = [0]
    while frontier:
        nxt = []
        for down in frontier:
            for v in range(n):
                bit = 1 << v
                if not down & bit and successors[v] & ~down == 0:
                    grown = down | bit
                    if grown not in seen:
                        seen.add(grown)
                        order.append(grown)
                        nxt.append(grown)
                        if len(order) > DOWNSET_LIMIT:
                            raise SolverError(
                                f"layer graph has more than {DOWNSET_LIMIT} downsets; the "
                                "general placement DP cannot enumerate them (chains and "
                                "near-chains are fine)"
                            )
        frontier = nxt
    return order


def downset_pairs(n: int, edges: tuple[tuple[int, int], ...]) -> DownsetPairs:
    """Enumerate the downsets of the DAG on ``n`` layers and all nested pairs.

    Notes
    -----
    Breadth-first growth yields downsets by size, so state 0 is empty and the last is full.
    The subset test runs in numpy blocks: O(downsets^2 * layers / block) work.
    """
    succ = [0] * n
    for u, v in edges:
        succ[u] |= 1 << v
    masks = _enumerate(n, tuple(succ))
    members = np.array([[(m >> v) & 1 for v in range(n)] for m in masks], dtype=bool)
    members = members.reshape(len(masks), n)
    sizes = members.sum(axis=1)
    outer_parts, inner_parts = [], []
    total = 0
    block = max(1, 2_000_000 // max(1, len(masks) * max(n, 1)))
    not_members = ~members
    for lo in range(0, len(masks), block):
        hi = min(len(masks), lo + block)
        # sub[b, k]: downset k is inside downset lo+b (no member of k outside it)
        sub = ~(members[None, :, :] & not_members[lo:hi, None, :]).any(axis=2)
        sub &= sizes[None, :] < sizes[lo:hi, None]
        ob, ik = np.nonzero(sub)
        total += ob.size
        if total > PAIR_LIMIT:
            raise SolverError(
                f"layer graph has more than {PAIR_LIMIT} nested downset pairs; the general "
                "placement DP would not fit in memory"
            )
        outer_parts.append(ob + lo)
        inner_parts.append(ik)
    outer = np.concatenate(outer_parts).astype(np.int64)
    inner = np.concatenate(inner_parts).astype(np.int64)
    in_stage = members[outer] & ~members[inner]
    for a in (members, outer, inner, in_stage):
        a.setflags(write=False)
    return DownsetPairs(members, len(masks) - 1, outer, inner, in_stage)
