"""Serial list scheduling, lower bounds and the heuristic upper bound of a :class:`Problem`.

The serial schedule-generation scheme (SGS) takes modes and a priority order and starts each
op, in priority order among those whose predecessors are placed, at the earliest time its
cores are free for its whole duration. Two facts make it the workhorse here:

* Fed the start order of any feasible schedule S, it returns a schedule no later than S op by
  op (every op still fits where S put it, by induction over the order). So the ILP's
  solution is turned into an exact, capacity-feasible schedule in seconds, without trusting
  the solver's tolerances.
* Over all orders and modes it reaches an optimal schedule (Kolisch, "Serial and parallel
  resource-constrained project scheduling methods revisited", EJOR 90(2), 1996), which the
  tests' brute force uses independently.

Lower bounds: the critical path with each op in its fastest mode, and per core type the
least core-seconds any mode of each op needs divided by the number of cores, plus the
least time before the first and after the last op that needs that type can run.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from ilp.problem import PARALLEL, SINGLE, Problem, demand

__all__ = ["Structure", "structure", "serial_sgs", "makespan", "lower_bound", "heuristic"]

_PASSES: Final = 4  # local-search passes over all mode moves
_TRIALS: Final = 200  # list schedules the local search may build (O(n^2) each)


@dataclass(frozen=True, slots=True)
class Structure:
    """Precomputed graph facts of a problem.

    ``desc[i]`` is the bitset of i's strict descendants; ``head[i]`` the earliest start and
    ``tail[i]`` the least time after i's finish to the end, both with fastest modes.
    """

    preds: tuple[tuple[int, ...], ...]
    succs: tuple[tuple[int, ...], ...]
    desc: tuple[int, ...]
    head: tuple[float, ...]
    tail: tuple[float, ...]

    def comparable(self, i: int, j: int) -> bool:
        return bool((self.desc[i] >> j) & 1 or (self.desc[j] >> i) & 1)


@lru_cache(maxsize=4096)
def structure(problem: Problem) -> Structure:
    n = problem.n
    preds: list[list[int]] = [[] for _ in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    for i, j in problem.edges:
        preds[j].append(i)
        succs[i].append(j)
    desc = [0] * n
    tail = [0.0] * n
    for i in range(n - 1, -1, -1):
        d = 0
        t = 0.0
        for j in succs[i]:
            d |= (1 << j) | desc[j]
            t = max(t, problem.min_duration(j) + tail[j])
        desc[i], tail[i] = d, t
    head = [0.0] * n
    for j in range(n):
        head[j] = max((head[i] + problem.min_duration(i) for i in preds[j]), default=0.0)
    return Structure(
        preds=tuple(map(tuple, preds)),
        succs=tuple(map(tuple, succs)),
        desc=tuple(desc),
        head=tuple(head),
        tail=tuple(tail),
    )


def serial_sgs(problem: Problem, modes: Sequence[int], rank: Sequence[float]) -> tuple[float, ...]:
    """Start times from the serial SGS: among ops whose predecessors are placed, the one of
    least ``rank`` (ties by index) goes next, at the earliest time its cores are free.

    Notes
    -----
    The core profile is a step function kept as breakpoints; placing an op scans it once, so
    a schedule costs O(n^2).
    """
    st = structure(problem)
    cap_tc, cap_vc = problem.num_tc, problem.num_vc
    times = [0.0]  # breakpoints; usage on [times[k], times[k+1]), the last segment is idle
    use_tc = [0]
    use_vc = [0]
    start = [0.0] * problem.n
    finish = [0.0] * problem.n
    missing = [len(p) for p in st.preds]
    ready = [(rank[i], i) for i in range(problem.n) if not missing[i]]
    heapq.heapify(ready)
    while ready:
        _, i = heapq.heappop(ready)
        d = problem.duration(i, modes[i])
        dt, dv = demand(problem, i, modes[i])
        est = max((finish[p] for p in st.preds[i]), default=0.0)
        if dt or dv:
            k = bisect_right(times, est) - 1
            while True:
                c = max(est, times[k])
                end = c + d
                m = k
                while m < len(times) and times[m] < end:
                    if use_tc[m] + dt > cap_tc or use_vc[m] + dv > cap_vc:
                        break
                    m += 1
                else:
                    break
                k = m + 1
            for t in (c, end):
                pos = bisect_right(times, t)
                if times[pos - 1] != t:
                    times.insert(pos, t)
                    use_tc.insert(pos, use_tc[pos - 1])
                    use_vc.insert(pos, use_vc[pos - 1])
            m = bisect_right(times, c) - 1
            while times[m] < end:
                use_tc[m] += dt
                use_vc[m] += dv
                m += 1
        else:
            c = est
        start[i] = c
        finish[i] = c + d
        for j in st.succs[i]:
            missing[j] -= 1
            if not missing[j]:
                heapq.heappush(ready, (rank[j], j))
    return tuple(start)


def makespan(problem: Problem, modes: Sequence[int], start: Sequence[float]) -> float:
    return max((start[i] + problem.duration(i, modes[i]) for i in range(problem.n)), default=0.0)


def lower_bound(problem: Problem) -> float:
    """A valid lower bound on the optimal makespan (critical path; core-seconds per type)."""
    st = structure(problem)
    path = max(
        (st.head[i] + problem.min_duration(i) + st.tail[i] for i in range(problem.n)), default=0.0
    )
    best = path
    for k, cap in ((0, problem.num_tc), (1, problem.num_vc)):
        # Every op holding a core of this type runs inside [min head, makespan - min tail].
        work = 0.0
        first = last = float("inf")
        for i in range(problem.n):
            modes = (SINGLE, PARALLEL) if problem.can_parallel[i] else (SINGLE,)
            need = min(problem.duration(i, m) * demand(problem, i, m)[k] for m in modes)
            if need > 0:
                work += need
                first = min(first, st.head[i])
                last = min(last, st.tail[i])
        if work > 0:
            best = max(best, first + work / cap + last)
    return best


def heuristic(problem: Problem, bound: float) -> tuple[tuple[int, ...], tuple[float, ...], float]:
    """A good feasible schedule (modes, starts, makespan); stops early on reaching ``bound``.

    Starts from fastest and single-core modes under two priority rules (topological order,
    and longest remaining path first), then a local search over modes: flip one op, or set
    every op of the same core and durations to one mode, re-scheduling in the incumbent's
    start order and by remaining path, while that shortens the makespan (at most
    :data:`_PASSES` passes and :data:`_TRIALS` schedules, so large parts leave their time
    budget to the MIP).
    """
    st = structure(problem)
    n = problem.n
    by_index = tuple(float(i) for i in range(n))
    by_tail = tuple(-(problem.min_duration(i) + st.tail[i]) for i in range(n))
    fast = tuple(PARALLEL if problem.can_parallel[i] else SINGLE for i in range(n))
    single = (SINGLE,) * n
    best: tuple[tuple[int, ...], tuple[float, ...], float] | None = None
    for modes in dict.fromkeys((fast, single)):
        for rank in (by_tail, by_index):
            s = serial_sgs(problem, modes, rank)
            ms = makespan(problem, modes, s)
            if best is None or ms < best[2]:
                best = (modes, s, ms)
            if ms <= bound:
                return best
    assert best is not None
    alike: dict[tuple, list[int]] = {}
    for i in range(n):
        if problem.can_parallel[i]:
            key = (problem.core[i], problem.single_s[i], problem.parallel_s[i])
            alike.setdefault(key, []).append(i)
    moves: list[tuple[tuple[int, ...], int | None]] = [
        ((i,), None) for i in range(n) if problem.can_parallel[i]
    ]
    for group in alike.values():
        if len(group) > 1:
            moves += [(tuple(group), SINGLE), (tuple(group), PARALLEL)]
    trials = 0
    for _ in range(_PASSES):
        improved = False
        for ops, to in moves:
            if trials >= _TRIALS:
                return best
            modes = list(best[0])
            for i in ops:
                modes[i] = (1 - modes[i]) if to is None else to
            trial = tuple(modes)
            if trial == best[0]:
                continue
            for rank in (best[1], by_tail):
                trials += 1
                s = serial_sgs(problem, trial, rank)
                ms = makespan(problem, trial, s)
                if ms < best[2] * (1 - 1e-12):
                    best, improved = (trial, s, ms), True
                    if ms <= bound:
                        return best
                    break
        if not improved:
            break
    return best
