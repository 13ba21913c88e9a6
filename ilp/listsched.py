"""Serial and parallel list scheduling, lower bounds and the heuristic upper bound of a
:class:`Problem` (:func:`initial_schedule`, improved by :func:`improve`).

The serial schedule-generation scheme (SGS) takes modes and a priority order and starts each
op, in priority order among those whose predecessors are placed, at the earliest time its
resources are free for its whole duration. Two facts make it the workhorse here:

* Fed the start order of any feasible schedule S, it returns a schedule no later than S op by
  op (every op still fits where S put it, by induction over the order). So the ILP's
  solution is turned into an exact, capacity-feasible schedule in seconds, without trusting
  the solver's tolerances.
* Over all orders and modes it reaches an optimal schedule (Kolisch, "Serial and parallel
  resource-constrained project scheduling methods revisited", EJOR 90(2), 1996), which the
  tests' brute force uses independently.

The first fact also makes double justification safe (:func:`justify`): scheduling the ops
backwards in order of latest finish, then forwards in order of earliest start of that
right-justified schedule, never lengthens a schedule and often shortens it.

Lower bounds come from :mod:`ilp.bounds`.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache
from itertools import combinations
from typing import Final

from ilp.balance import balanced_modes
from ilp.bounds import resource_lower_bound
from ilp.problem import PARALLEL, SINGLE, Problem
from ilp.serial import State, place, placing_order
from ilp.structure import Structure, pack, structure

__all__ = [
    "Structure",
    "structure",
    "serial_sgs",
    "placing_order",
    "place",
    "parallel_sgs",
    "pack",
    "justify",
    "makespan",
    "lower_bound",
    "initial_schedule",
    "improve",
    "Incumbent",
]

_PASSES: Final = 4  # local-search passes over all mode moves
_TRIALS: Final = 200  # list schedules the local search may build (O(n^2) each)
_PAIR_TRIALS: Final = 100  # and then with two-op mode flips
_JUSTIFY_ROUNDS: Final = 3  # backward-forward passes of one justification, at most
# The local search keeps the serial SGS's state before every 16th op of its incumbent's
# schedule (a copy per op held O(n^2) memory: 300 MB for a 2,600-op MoE backward pass);
# a trial replays at most 15 ops more.
_RECORD_EVERY: Final = 16

Incumbent = tuple[tuple[int, ...], tuple[float, ...], float]  # (modes, starts, makespan)


def serial_sgs(problem: Problem, modes: Sequence[int], rank: Sequence[float]) -> tuple[float, ...]:
    """Start times from the serial SGS: see :func:`_sgs`."""
    return _sgs(problem, modes, rank)[0]


def _sgs(
    problem: Problem, modes: Sequence[int], rank: Sequence[float]
) -> tuple[tuple[float, ...], float]:
    """(start times, makespan) from the serial SGS: among ops whose predecessors are placed,
    the one of least ``rank`` (ties by index) goes next, at the earliest time its resources are
    free.

    Notes
    -----
    The resource profile is a step function kept as breakpoints; placing an op scans it once, so
    a schedule costs O(n^2).
    """
    return _placed(problem, tuple(modes), tuple(rank))


@lru_cache(maxsize=64)
def _placed(
    problem: Problem, modes: tuple[int, ...], rank: tuple[float, ...]
) -> tuple[tuple[float, ...], float]:
    """:func:`_sgs`, by content: the starting schedules and their justifications ask for
    the same list schedule many times (the serial and parallel SGS often agree, and a
    justification's rounds come back to a schedule built before), each O(n^2)."""
    return place(problem, modes, placing_order(problem, rank))


def parallel_sgs(
    problem: Problem, modes: Sequence[int], rank: Sequence[float]
) -> tuple[tuple[float, ...], float]:
    """(start times, makespan) from the parallel SGS: time advances from finish to finish,
    and at each such instant the ops whose predecessors have finished start, by least
    ``rank`` (ties by index), as long as their resources are free.

    It builds non-delay schedules (no op waits while its cores are idle), which the serial
    SGS misses when a high-priority op holds a low-priority one back: a matrix unit left idle
    behind an elementwise op, beside a weight-gradient GEMM that could have filled it. Not every
    problem has a non-delay optimum, so it complements the serial SGS rather than replacing
    it (Kolisch, EJOR 90(2), 1996).
    """
    st = structure(problem)
    succs, duration, loads, rooms, guard = st.succs, st.duration, st.load, st.room, st.guard
    n = problem.n
    start = [0.0] * n
    missing = [len(p) for p in st.preds]
    # The eligible ops by room (ops of one room hold the same units), each a heap by rank.
    # Within one instant the usage only grows, so once an op of some room does not fit,
    # none of that room's later ones do: merging the rooms' heads in rank order, and
    # dropping a room at its first op that does not fit, starts the ops a scan of every
    # eligible op in rank order starts, without visiting the ones left waiting.
    eligible: dict[int, list[tuple[float, int]]] = {}
    waiting = 0
    for i in range(n):
        if not missing[i]:
            eligible.setdefault(rooms[modes[i]][i], []).append((rank[i], i))
            waiting += 1
    for heap in eligible.values():
        heapq.heapify(heap)
    running: list[tuple[float, int]] = []  # (finish, op), a heap
    use = 0  # packed usage (see :class:`Structure`)
    now = span = 0.0
    while waiting or running:
        heads = [(heap[0], room) for room, heap in eligible.items() if heap]
        heapq.heapify(heads)
        while heads:
            key, room = heads[0]
            if (room - use) & guard != guard:
                heapq.heappop(heads)
                continue
            heap = eligible[room]
            heapq.heappop(heap)
            i = key[1]
            use += loads[modes[i]][i]
            start[i] = now
            heapq.heappush(running, (now + duration[modes[i]][i], i))
            waiting -= 1
            if heap:
                heapq.heapreplace(heads, (heap[0], room))
            else:
                heapq.heappop(heads)
        now = running[0][0]  # something runs: an idle chip fits every op
        span = now
        while running and running[0][0] <= now:
            i = heapq.heappop(running)[1]
            use -= loads[modes[i]][i]
            for j in succs[i]:
                missing[j] -= 1
                if not missing[j]:
                    heapq.heappush(eligible.setdefault(rooms[modes[j]][j], []), (rank[j], j))
                    waiting += 1
    return tuple(start), span


@lru_cache(maxsize=4096)
def _reversed(problem: Problem) -> Problem:
    """The problem with every edge turned round, op i renumbered n-1-i (still topological)."""
    n = problem.n
    return dataclasses.replace(
        problem,
        need=(problem.need[SINGLE][::-1], problem.need[PARALLEL][::-1]),
        single_s=problem.single_s[::-1],
        parallel_s=problem.parallel_s[::-1],
        can_parallel=problem.can_parallel[::-1],
        edges=tuple(sorted((n - 1 - j, n - 1 - i) for i, j in problem.edges)),
    )


def justify(
    problem: Problem, modes: Sequence[int], start: Sequence[float]
) -> tuple[tuple[float, ...], float]:
    """(start times, makespan) of the feasible schedule ``start`` after double justification.

    Each round schedules the ops on the reversed graph by latest finish first (a
    right-justified schedule: no op finishes later than the makespan it had), then forwards by
    earliest start of that (no op starts later than there). Neither step can lengthen the
    schedule (the serial SGS property above); gaps left by the first list schedule close.
    Valls, Ballestin and Quintanilla, "Justification and RCPSP: a technique that pays", EJOR
    165(2), 2005.
    """
    n = problem.n
    back = _reversed(problem)
    back_modes = tuple(modes[::-1])
    duration = [problem.duration(i, modes[i]) for i in range(n)]
    best = tuple(start), makespan(problem, modes, start)
    for _ in range(_JUSTIFY_ROUNDS):
        finish = [best[0][i] + duration[i] for i in range(n)]
        rs, rspan = _sgs(back, back_modes, tuple(-finish[n - 1 - k] for k in range(n)))
        right = tuple(rspan - rs[n - 1 - i] - duration[i] for i in range(n))
        s, span = _sgs(problem, modes, right)
        if span >= best[1] * (1 - 1e-12):
            break
        best = s, span
    return best


def makespan(problem: Problem, modes: Sequence[int], start: Sequence[float]) -> float:
    return max((start[i] + problem.duration(i, modes[i]) for i in range(problem.n)), default=0.0)


def lower_bound(problem: Problem) -> float:
    """A valid lower bound on the optimal makespan (:func:`ilp.bounds.resource_lower_bound`)."""
    return resource_lower_bound(
        problem.single_s,
        problem.parallel_s,
        problem.can_parallel,
        problem.need,
        structure(problem).preds,
        problem.capacity,
        cores=problem.core_kinds,
        parallel_blocks_all=problem.parallel_blocks_all,
    )


def initial_schedule(problem: Problem, bound: float) -> Incumbent:
    """The best of the starting list schedules; stops at the first that meets ``bound``.

    Fastest and single-core modes, each under two priority rules (longest remaining path
    first, and topological order), by the serial and then the parallel SGS, each justified
    (:func:`justify`) unless it meets ``bound``. The parallel SGS's non-delay schedules
    matter on backward passes, where they bring many more list schedules down to the lower
    bounds.
    """
    n = problem.n
    by_index = tuple(float(i) for i in range(n))
    by_tail = _by_tail(problem)
    fast = tuple(PARALLEL if problem.can_parallel[i] else SINGLE for i in range(n))
    single = (SINGLE,) * n
    best: Incumbent | None = None
    for generate in (_sgs, parallel_sgs):
        for modes in dict.fromkeys((fast, single)):
            for rank in (by_tail, by_index):
                best = _better(problem, best, generate, modes, rank, bound)
                if best[2] <= bound:
                    return best
    assert best is not None
    return best


def _better(
    problem: Problem,
    best: Incumbent | None,
    generate: Callable[[Problem, Sequence[int], Sequence[float]], tuple[tuple[float, ...], float]],
    modes: Sequence[int],
    rank: Sequence[float],
    bound: float,
) -> Incumbent:
    """``best`` or the (justified) list schedule of ``modes`` and ``rank``, the shorter."""
    s, ms = generate(problem, modes, rank)
    if ms > bound:
        s, ms = justify(problem, modes, s)
    return best if best is not None and best[2] <= ms else (tuple(modes), s, ms)


def _by_tail(problem: Problem) -> tuple[float, ...]:
    """Priority ranks for longest remaining path first (least rank first)."""
    tail = structure(problem).tail
    return tuple(-(problem.min_duration(i) + tail[i]) for i in range(problem.n))


def improve(problem: Problem, incumbent: Incumbent, bound: float) -> Incumbent:
    """``incumbent`` improved by a local search over modes; stops on reaching ``bound``.

    Moves: set every op of the same demands and durations to one mode, then flip one op
    (the group moves first: less time, and more often a shorter result than a longer one),
    re-scheduling in the incumbent's start order and by remaining path, while that shortens
    the makespan (at most :data:`_PASSES` passes and :data:`_TRIALS` schedules, so large
    parts leave their time budget to the search and the MIP); then the same with two ops
    that could overlap flipped at once (at most :data:`_PAIR_TRIALS` more); the result is
    justified once more. Justifying every trial instead finds shorter schedules only with
    several times the schedules built: the mode moves matter more. The parallel SGS in the
    trials did worse within the same budget.

    A single-op or group flip cannot leave a local optimum in which many ops hold the whole
    chip one after another where, single-core, they would run side by side: each flip alone
    only lengthens the schedule. So when the bound is still not met, the list schedules of
    :func:`balanced_modes` (serial and parallel SGS, justified) are tried too, and the local
    search restarts from them when they are shorter than its result; the result is never
    longer than the local search's alone.
    """
    best = _improved(problem, incumbent, bound)
    if best[2] <= bound:
        return best
    balanced = balanced_modes(problem, structure(problem))
    if balanced is None or balanced[0] == incumbent[0] or balanced[1] >= best[2]:
        return best  # no schedule in those modes is shorter
    rank = _by_tail(problem)
    other = None
    for generate in (_sgs, parallel_sgs):
        other = _better(problem, other, generate, balanced[0], rank, bound)
    if other[2] >= best[2]:
        return best
    return other if other[2] <= bound else _improved(problem, other, bound)


def _improved(problem: Problem, incumbent: Incumbent, bound: float) -> Incumbent:
    modes, start, span = _local_search(problem, incumbent, bound)
    if span > bound:
        start, span = justify(problem, modes, start)
    return modes, start, span


def _local_search(problem: Problem, incumbent: Incumbent, bound: float) -> Incumbent:
    st = structure(problem)
    n = problem.n
    best = incumbent
    alike: dict[tuple, list[int]] = {}
    for i in range(n):
        if problem.can_parallel[i]:
            need = (problem.need[SINGLE][i], problem.need[PARALLEL][i])
            key = (need, problem.single_s[i], problem.parallel_s[i])
            alike.setdefault(key, []).append(i)
    moves: list[tuple[tuple[int, ...], int | None]] = []
    for group in alike.values():
        if len(group) > 1:
            moves += [(tuple(group), SINGLE), (tuple(group), PARALLEL)]
    moves += [((i,), None) for i in range(n) if problem.can_parallel[i]]
    # Flipping two ops that could overlap reaches mode mixes no single flip improves towards
    # (one op split frees the time another needs single), on the dense blocks' forward parts
    # among others.
    splittable = [i for i in range(n) if problem.can_parallel[i]]

    def pairs() -> Iterator[tuple[tuple[int, ...], int | None]]:
        # lazily: a large part has ~n^2/2 of them and the search reads at most a few hundred
        for i, j in combinations(splittable, 2):
            if not st.comparable(i, j):
                yield (i, j), None

    by_tail_order = placing_order(problem, _by_tail(problem))
    # A trial is scheduled in the incumbent's start order and by remaining path. Its ops up to
    # the first one it flips keep the incumbent's modes, so they land where they did in the
    # incumbent's schedule under the same order: the SGS resumes from the state it had
    # there (per order: the order, each op's position in it, the states before each op).
    plans: dict[int, tuple[tuple[int, ...], list[int], list[State]]] = {}

    def plan(which: int) -> tuple[tuple[int, ...], list[int], list[State]]:
        if which not in plans:
            order = placing_order(problem, best[1]) if which == 0 else by_tail_order
            states: list[State] = []
            place(problem, best[0], order, record=states, every=_RECORD_EVERY)
            position = [0] * n
            for k, i in enumerate(order):
                position[i] = k
            plans[which] = order, position, states
        return plans[which]

    trials = 0
    for phase, cap in ((lambda: iter(moves), _TRIALS), (pairs, _TRIALS + _PAIR_TRIALS)):
        for _ in range(_PASSES):
            improved = False
            for ops, to in phase():
                if trials >= cap:
                    break
                modes = list(best[0])
                for i in ops:
                    modes[i] = (1 - modes[i]) if to is None else to
                trial = tuple(modes)
                if trial == best[0]:
                    continue
                flipped = [i for i in ops if trial[i] != best[0][i]]
                for which in (0, 1):
                    trials += 1
                    order, position, states = plan(which)
                    first = min(position[i] for i in flipped)
                    cutoff = best[2] * (1 - 1e-12)
                    # from the copy before ``first``: the ops up to it land as recorded
                    at = first // _RECORD_EVERY
                    s, ms = place(
                        problem,
                        trial,
                        order,
                        at * _RECORD_EVERY,
                        states[at],
                        cutoff=cutoff,
                        checked=first,
                    )
                    if ms < cutoff:
                        best, improved = (trial, s, ms), True
                        plans.clear()
                        if ms <= bound:
                            return best
                        break
            if not improved:
                break
    return best
