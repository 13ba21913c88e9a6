"""Lower bounds on the makespan of any schedule of one layer pass, from op costs alone.

Shared by the scheduler (to stop searching once a schedule meets the bound) and the sweep
(to prune designs before scheduling), so both use exactly one bound.

The bound is the largest of:

* the critical path with every op in its fastest mode;
* per resource kind, the least unit-seconds any mode of its ops needs over the kind's units,
  plus the least time before the first and after the last of them can run;
* a destructive bound (Klein and Scholl, "Computing lower bounds by destructive improvement:
  an application to resource-constrained project scheduling", EJOR 112(2), 1999): suppose
  the makespan were T. An op whose single-core path ``head + single + tail`` exceeds T must
  run intra-op parallel. When parallel ops hold every core of the chip, such forced ops run
  one at a time and beside nothing that holds a core, so T is at least their summed time plus
  the longest path of the other core-holding ops (an op holding only a further kind, a
  collective on its channel, may run beside a split op: it adds nothing to the path); and
  for every weight a in [0, 1] and
  pair of resource kinds the weighted occupancy ``a * share of one + (1 - a) * share of the
  other`` is at most 1 at any instant, so T is at least the integral of that occupancy
  (each op at its least). T is
  impossible when either exceeds it. Both only fall as T grows (fewer ops are forced), so
  the least T that passes is found by bisection over the ops' single-core path lengths.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Final

import numpy as np

from ilp.problem import PARALLEL, SINGLE, unit_demand

__all__ = ["makespan_lower_bound", "resource_lower_bound", "occupancy_weights"]

# Occupancy weights a tried by the destructive bound (0 and 1 are the per-kind bounds).
_WEIGHTS: Final = tuple(float(a) for a in np.arange(1, 8) / 8.0)

Units = tuple[int, ...]


def occupancy_weights(kinds: int, grid: Sequence[float]) -> tuple[tuple[float, ...], ...]:
    """Weights of the resource kinds for occupancy bounds: a on one kind and 1 - a on
    another, for every pair of kinds and every a in ``grid`` (one kind: weight 1). Any
    weights summing to 1 give a valid bound: the weighted share of the units in use is at
    most 1 at every instant."""
    if kinds == 1:
        return ((1.0,),)
    out: dict[tuple[float, ...], None] = {}
    for k, j in combinations(range(kinds), 2):
        for a in grid:
            w = [0.0] * kinds
            w[k], w[j] = a, 1 - a
            out.setdefault(tuple(w), None)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class _Ops:
    """The facts of one instance that every bound reads (see :func:`resource_lower_bound`).

    ``fastest[i]`` is op i's least time; ``uses[i]``/``split[i]`` the units of each kind it
    holds single and split; ``holds[i]``/``holds_core[i]`` whether it holds any unit, any
    core; ``head[i]``/``tail[i]`` the least time before its start and after its finish.
    """

    single_s: Sequence[float]
    parallel_s: Sequence[float]
    preds: Sequence[Sequence[int]]
    caps: Units
    blocks_all: bool
    can: Sequence[bool]
    holds: list[bool]
    holds_core: list[bool]
    fastest: list[float]
    uses: Sequence[Units]
    split: Sequence[Units]
    head: list[float]
    tail: list[float]


def makespan_lower_bound(
    units: Sequence[Mapping[str, int]],
    single_s: Sequence[float],
    parallel_s: Sequence[float],
    preds: Sequence[Sequence[int]],
    cores: Mapping[str, int],
    *,
    parallel_blocks_all: bool = True,
    destructive: bool = True,
    channels: Sequence[str | None] | None = None,
) -> float:
    """A valid lower bound on the least makespan of ops ``0..n-1`` on the cores.

    ``cores`` are the chip's kinds of compute unit with their units; ``units[i]`` the units
    of each kind op i holds in its single mode (empty: it holds no core); ``single_s[i]`` and
    ``parallel_s[i]`` are its times in its single mode and split over all units of its kinds
    (the split mode exists where it is faster); ``preds[j]`` lists j's predecessors, and the
    ops must be numbered in a topological order (every predecessor index below its
    successor's). A split op holds every unit of its kinds, and every core at all when
    ``parallel_blocks_all``. ``channels[i]``, when given, is the communication channel op i
    holds (a further kind of one unit, as :func:`ilp.timing.op_channel` names it) or None.
    ``destructive=False`` leaves out the destructive bound, most of the time on tens of ops,
    for callers that take many bounds of small sets.
    """
    ops_channel = list(channels) if channels is not None else [None] * len(units)
    further = sorted({c for c in ops_channel if c is not None})
    caps = (*cores.values(), *(1 for _ in further))
    needs = [
        unit_demand(
            (*(u.get(k, 0) for k in cores), *(int(ch == k) for k in further)),
            caps,
            len(cores),
            parallel_blocks_all,
        )
        for u, ch in zip(units, ops_channel, strict=True)
    ]
    can = [any(u.values()) and p < s for u, s, p in zip(units, single_s, parallel_s, strict=True)]
    return resource_lower_bound(
        single_s,
        parallel_s,
        can,
        ([d[SINGLE] for d in needs], [d[PARALLEL] for d in needs]),
        preds,
        caps,
        cores=len(cores),
        parallel_blocks_all=parallel_blocks_all,
        destructive=destructive,
    )


def resource_lower_bound(
    single_s: Sequence[float],
    parallel_s: Sequence[float],
    can: Sequence[bool],
    need: tuple[Sequence[Units], Sequence[Units]],
    preds: Sequence[Sequence[int]],
    capacity: Units,
    *,
    cores: int,
    parallel_blocks_all: bool = True,
    destructive: bool = True,
) -> float:
    """:func:`makespan_lower_bound` over resources as data: ``need[m][i]`` are the units of
    each kind op i holds in mode m (single, split), ``capacity`` the units of each kind, of
    which the first ``cores`` are the cores, ``can[i]`` whether op i may split;
    ``parallel_blocks_all`` declares that every split mode holds every unit of the core
    kinds."""
    n = len(single_s)
    if n == 0:
        return 0.0
    ops = _facts(single_s, parallel_s, can, need, preds, capacity, cores, parallel_blocks_all)
    head, tail = ops.head, ops.tail
    best = max(h + f + t for h, f, t in zip(head, ops.fastest, tail, strict=True))

    # Per kind: least unit-seconds over the units, inside its ops' time window.
    for k in range(len(capacity)):
        work, first, last = 0.0, float("inf"), float("inf")
        for i in range(n):
            need_s = single_s[i] * ops.uses[i][k]
            if ops.can[i]:
                need_s = min(need_s, parallel_s[i] * ops.split[i][k])
            if need_s > 0:
                work += need_s
                first = min(first, head[i])
                last = min(last, tail[i])
        if work > 0:
            best = max(best, first + work / ops.caps[k] + last)

    threshold = [head[i] + single_s[i] + tail[i] if ops.can[i] else -1.0 for i in range(n)]
    cuts = sorted({x for x in threshold if x > best})
    if not cuts or not destructive:
        return best
    return max(best, _destructive(ops, best, cuts, threshold))


def _facts(single_s, parallel_s, can, need, preds, caps, cores, blocks_all) -> _Ops:
    n = len(single_s)
    fastest = [p if ok else s for ok, s, p in zip(can, single_s, parallel_s, strict=True)]
    succs: list[list[int]] = [[] for _ in range(n)]
    head = [0.0] * n
    for j in range(n):
        for i in preds[j]:
            succs[i].append(j)
            head[j] = max(head[j], head[i] + fastest[i])
    tail = [0.0] * n
    for i in range(n - 1, -1, -1):
        tail[i] = max((fastest[j] + tail[j] for j in succs[i]), default=0.0)
    holds = [any(u) for u in need[SINGLE]]
    holds_core = [any(u[:cores]) for u in need[SINGLE]]
    return _Ops(
        single_s,
        parallel_s,
        preds,
        tuple(caps),
        blocks_all,
        can,
        holds,
        holds_core,
        fastest,
        need[SINGLE],
        need[PARALLEL],
        head,
        tail,
    )


def _shares(units: np.ndarray, caps: Units, weights: np.ndarray) -> np.ndarray:
    """Per op (rows) and set of weights (columns): the weighted share of the units it holds."""
    total = weights[None, :, 0] * units[:, :1] / caps[0]
    for k in range(1, len(caps)):
        total = total + weights[None, :, k] * units[:, k : k + 1] / caps[k]
    return total


def _destructive(ops: _Ops, base: float, cuts: list[float], threshold: list[float]) -> float:
    """The least T >= ``base`` that the forced-split reasoning cannot rule out.

    Between consecutive ``cuts`` (the single-core path lengths above ``base``) the set of
    forced ops is constant, so so is the bound g it implies; the answer is max(lo, g) in the
    first interval [lo, hi) with g < hi.
    """
    n = len(ops.single_s)
    kinds = len(ops.caps)
    weights = np.asarray(occupancy_weights(kinds, _WEIGHTS))
    uses = np.asarray(ops.uses, dtype=float).reshape(n, kinds)
    split = np.asarray(ops.split, dtype=float).reshape(n, kinds)
    can = np.asarray(ops.can)[:, None]
    occ_single = np.asarray(ops.single_s)[:, None] * _shares(uses, ops.caps, weights)
    occ_split = np.where(
        can, np.asarray(ops.parallel_s)[:, None] * _shares(split, ops.caps, weights), 0.0
    )
    least = np.where(can, np.minimum(occ_single, occ_split), occ_single)
    holders = [i for i in range(n) if ops.holds[i]]
    window = (
        min(ops.head[i] for i in holders) + min(ops.tail[i] for i in holders) if holders else 0.0
    )
    thresholds = np.asarray(threshold)
    split_s = np.asarray(ops.parallel_s)
    # An op holding a core that is not forced is on the path at its fastest time.
    path_weight = [f if h else 0.0 for h, f in zip(ops.holds_core, ops.fastest, strict=True)]

    def implied(lo: float) -> float:
        forced = thresholds > lo
        occupancy = float((np.where(forced[:, None], occ_split, least)).sum(axis=0).max())
        g = window + occupancy
        if ops.blocks_all:
            longest = [0.0] * n
            top = 0.0
            for j in range(n):
                longest[j] = max((longest[i] for i in ops.preds[j]), default=0.0) + (
                    0.0 if forced[j] else path_weight[j]
                )
                top = max(top, longest[j])
            g = max(g, float(split_s[forced].sum()) + top)
        return g

    lows = [base, *cuts]
    highs = [*cuts, float("inf")]
    lo, hi = 0, len(lows) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if max(lows[mid], implied(lows[mid])) < highs[mid]:
            hi = mid
        else:
            lo = mid + 1
    return max(lows[lo], implied(lows[lo]))
