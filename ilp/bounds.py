"""Lower bounds on the makespan of any schedule of one layer pass, from op costs alone.

Shared by the scheduler (to stop searching once a schedule meets the bound) and the sweep
(to prune designs before scheduling), so both use exactly one bound.

The bound is the largest of:

* the critical path with every op in its fastest mode;
* per core type, the least core-seconds any mode of its ops needs over the cores, plus the
  least time before the first and after the last of them can run;
* a destructive bound (Klein and Scholl, "Computing lower bounds by destructive improvement:
  an application to resource-constrained project scheduling", EJOR 112(2), 1999): suppose
  the makespan were T. An op whose single-core path ``head + single + tail`` exceeds T must
  run intra-op parallel. When parallel ops hold the whole chip, such forced ops run one at a
  time and beside nothing that holds a core, so T is at least their summed time plus the
  longest path of the other core-holding ops; and for every weight a in [0, 1] the chip's
  weighted occupancy ``a * tensor share + (1 - a) * vector share`` is at most 1 at any
  instant, so T is at least the integral of that occupancy (each op at its least). T is
  impossible when either exceeds it. Both only fall as T grows (fewer ops are forced), so
  the least T that passes is found by bisection over the ops' single-core path lengths.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

__all__ = ["makespan_lower_bound"]

# Occupancy weights a tried by the destructive bound (0 and 1 are the per-type bounds).
_WEIGHTS: Final = np.arange(1, 8) / 8.0


@dataclass(frozen=True, slots=True)
class _Ops:
    """The facts of one instance that every bound reads (see :func:`makespan_lower_bound`).

    ``fastest[i]`` is op i's least time; ``split[i]`` the (tensor, vector) cores it holds
    split; ``head[i]``/``tail[i]`` the least time before its start and after its finish.
    """

    core: Sequence[str]
    single_s: Sequence[float]
    parallel_s: Sequence[float]
    preds: Sequence[Sequence[int]]
    caps: tuple[int, int]
    blocks_all: bool
    can: list[bool]
    fastest: list[float]
    uses: list[tuple[bool, bool]]
    split: list[tuple[int, int]]
    head: list[float]
    tail: list[float]


def makespan_lower_bound(
    core: Sequence[str],
    single_s: Sequence[float],
    parallel_s: Sequence[float],
    preds: Sequence[Sequence[int]],
    num_tc: int,
    num_vc: int,
    *,
    parallel_blocks_all: bool = True,
    destructive: bool = True,
) -> float:
    """A valid lower bound on the least makespan of ops ``0..n-1`` on the cores.

    ``core[i]`` is "TC", "VC", "TCandVC" or "Nop" (holds no core); ``single_s[i]`` and
    ``parallel_s[i]`` are its times on one core and split over all cores of its type (the
    split mode exists where it is faster); ``preds[j]`` lists j's predecessors, and the ops
    must be numbered in a topological order (every predecessor index below its successor's).
    A split op holds every core of its type, and every core at all when
    ``parallel_blocks_all``. ``destructive=False`` leaves out the destructive bound, most
    of the time on tens of ops, for callers that take many bounds of small sets.
    """
    n = len(core)
    if n == 0:
        return 0.0
    ops = _facts(core, single_s, parallel_s, preds, (num_tc, num_vc), parallel_blocks_all)
    head, tail = ops.head, ops.tail
    best = max(h + f + t for h, f, t in zip(head, ops.fastest, tail, strict=True))

    # Per core type: least core-seconds over the cores, inside its ops' time window.
    for k in (0, 1):
        work, first, last = 0.0, float("inf"), float("inf")
        for i in range(n):
            need = single_s[i] * ops.uses[i][k]
            if ops.can[i]:
                need = min(need, parallel_s[i] * ops.split[i][k])
            if need > 0:
                work += need
                first = min(first, head[i])
                last = min(last, tail[i])
        if work > 0:
            best = max(best, first + work / ops.caps[k] + last)

    threshold = [head[i] + single_s[i] + tail[i] if ops.can[i] else -1.0 for i in range(n)]
    cuts = sorted({x for x in threshold if x > best})
    if not cuts or not destructive:
        return best
    return max(best, _destructive(ops, best, cuts, threshold))


def _facts(core, single_s, parallel_s, preds, caps, blocks_all) -> _Ops:
    n = len(core)
    can = [c != "Nop" and p < s for c, s, p in zip(core, single_s, parallel_s, strict=True)]
    fastest = [p if ok else s for ok, s, p in zip(can, single_s, parallel_s, strict=True)]
    uses = [(c in ("TC", "TCandVC"), c in ("VC", "TCandVC")) for c in core]
    split = [
        caps if blocks_all or c == "TCandVC" else ((caps[0], 0) if tc else (0, caps[1]))
        for c, (tc, _) in zip(core, uses, strict=True)
    ]
    succs: list[list[int]] = [[] for _ in range(n)]
    head = [0.0] * n
    for j in range(n):
        for i in preds[j]:
            succs[i].append(j)
            head[j] = max(head[j], head[i] + fastest[i])
    tail = [0.0] * n
    for i in range(n - 1, -1, -1):
        tail[i] = max((fastest[j] + tail[j] for j in succs[i]), default=0.0)
    return _Ops(
        core, single_s, parallel_s, preds, caps, blocks_all, can, fastest, uses, split, head, tail
    )


def _destructive(ops: _Ops, base: float, cuts: list[float], threshold: list[float]) -> float:
    """The least T >= ``base`` that the forced-split reasoning cannot rule out.

    Between consecutive ``cuts`` (the single-core path lengths above ``base``) the set of
    forced ops is constant, so so is the bound g it implies; the answer is max(lo, g) in the
    first interval [lo, hi) with g < hi.
    """
    n = len(ops.core)
    a = _WEIGHTS[None, :]
    caps = ops.caps
    # Per op (rows) and weight (columns): tensor and vector shares integrated over the op.
    uses = np.asarray(ops.uses, dtype=float).reshape(n, 2)
    split = np.asarray(ops.split, dtype=float).reshape(n, 2)
    can = np.asarray(ops.can)[:, None]
    occ_single = np.asarray(ops.single_s)[:, None] * (
        a * uses[:, :1] / caps[0] + (1 - a) * uses[:, 1:] / caps[1]
    )
    occ_split = np.where(
        can,
        np.asarray(ops.parallel_s)[:, None]
        * (a * split[:, :1] / caps[0] + (1 - a) * split[:, 1:] / caps[1]),
        0.0,
    )
    least = np.where(can, np.minimum(occ_single, occ_split), occ_single)
    holders = [i for i in range(n) if ops.core[i] != "Nop"]
    window = (
        min(ops.head[i] for i in holders) + min(ops.tail[i] for i in holders) if holders else 0.0
    )
    thresholds = np.asarray(threshold)
    split_s = np.asarray(ops.parallel_s)
    # A core-holding op that is not forced is on the path at its fastest time.
    path_weight = [f if c != "Nop" else 0.0 for c, f in zip(ops.core, ops.fastest, strict=True)]

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
