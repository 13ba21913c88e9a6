"""The serial schedule-generation scheme's inner loop: each op, in a given order, at the
earliest time its resources are free for its whole duration (:func:`place`).

The resource profile is a step function kept as breakpoints, with the packed usage of
:class:`~ilp.listsched.Structure` on each segment. Finding an op's start scans that profile
from its earliest start for a window of segments that all leave room for it; on a chip that
many ops fill (a split op holds every core) most segments have no room, and a scan segment by
segment made a schedule cost O(n^2) Python steps. So the profile also keeps, per distinct
room an op may need (its *room class*), a bitset of the segments with that room: the next
segment with room and the next one without are then found by integer bit operations, and a
scan costs a few steps per window tried, not per segment passed. The starts found are those
of the plain scan, exactly: the windows tried are the same, only the segments in between
are skipped in one step.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from ilp.problem import PARALLEL, SINGLE, Problem
from ilp.structure import structure

__all__ = ["State", "placing_order", "place"]

# The serial SGS's state between two ops: breakpoints of the resource profile, the packed
# usage from each, every op's start and finish (zero until placed), and per room class the
# bitset of segments with that room.
State = tuple[list[float], list[int], list[float], list[float], list[int]]


@dataclass(frozen=True, slots=True)
class _Rooms:
    """The distinct rooms (packed, with guard bits) of the ops that hold a resource, each
    op's room class per mode (-1: it holds nothing), and, filled as usages come up, the room
    classes a segment with a given packed usage has no room for (shared by every schedule
    of the problem: the local search builds hundreds)."""

    rooms: tuple[int, ...]
    cls: tuple[tuple[int, ...], tuple[int, ...]]
    unfit: dict[int, tuple[int, ...]] = field(default_factory=dict, compare=False)


@lru_cache(maxsize=4096)
def _room_classes(problem: Problem) -> _Rooms:
    st = structure(problem)
    rooms: dict[int, int] = {}
    cls = tuple(
        tuple(
            rooms.setdefault(st.room[m][i], len(rooms)) if st.load[m][i] else -1
            for i in range(problem.n)
        )
        for m in (SINGLE, PARALLEL)
    )
    return _Rooms(tuple(rooms), cls)  # type: ignore[arg-type]


def placing_order(problem: Problem, rank: Sequence[float]) -> tuple[int, ...]:
    """The serial SGS's placing order under ``rank``: it depends on the precedence and the
    ranks only, never on modes or times."""
    st = structure(problem)
    missing = [len(p) for p in st.preds]
    ready = [(rank[i], i) for i in range(problem.n) if not missing[i]]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)[1]
        order.append(i)
        for j in st.succs[i]:
            missing[j] -= 1
            if not missing[j]:
                heapq.heappush(ready, (rank[j], j))
    return tuple(order)


def _insert(bits: list[int], k: int) -> None:
    """Open segment ``k`` in every bitset as a copy of segment ``k - 1``."""
    low = (1 << k) - 1
    for r, b in enumerate(bits):
        bits[r] = ((b >> k) << (k + 1)) | (b & low) | (((b >> (k - 1)) & 1) << k)


def place(
    problem: Problem,
    modes: Sequence[int],
    order: Sequence[int],
    first: int = 0,
    state: State | None = None,
    record: list[State] | None = None,
    cutoff: float = math.inf,
    *,
    every: int = 1,
    checked: int = 0,
) -> tuple[tuple[float, ...], float]:
    """(start times, makespan) of the serial SGS placing ``order[first:]`` in ``modes``, from
    ``state`` (the state after ``order[:first]``; an empty chip when None), each op at the
    earliest time its resources are free. With ``record``, a copy of the state before every
    ``every``-th op (positions 0, every, 2 every, ... of ``order``) is appended to it, so a
    schedule that differs only from some op on can resume there (or at the copy before it).
    Once an op at position ``checked`` or later finishes, with its tail (the least time its
    descendants need after it), at ``cutoff`` or later, the makespan can only be at least
    that: it stops there and returns ``((), inf)``.
    """
    st = structure(problem)
    preds, duration, loads, tail, guard = st.preds, st.duration, st.load, st.tail, st.guard
    rc = _room_classes(problem)
    rooms, classes, unfit = rc.rooms, rc.cls, rc.unfit
    if state is None:
        # usage on [times[k], times[k+1]); the last segment is idle
        times, use = [0.0], [0]
        start, finish = [0.0] * problem.n, [0.0] * problem.n
        fits = [int(room & guard == guard) for room in rooms]  # an idle chip fits every op
    else:
        times, use, start, finish, fits = (list(x) for x in state)
    for position in range(first, len(order)):
        i = order[position]
        if record is not None and position % every == 0:
            record.append((times[:], use[:], start[:], finish[:], fits[:]))
        mode = modes[i]
        d = duration[mode][i]
        load = loads[mode][i]
        est = 0.0
        for p in preds[i]:
            if finish[p] > est:
                est = finish[p]
        if load:
            bits = fits[classes[mode][i]]
            k = bisect_right(times, est) - 1
            while True:
                free = bits >> k  # the first segment with room from k on (the idle one is)
                k += (free & -free).bit_length() - 1
                c = times[k] if times[k] > est else est
                end = c + d
                m = bisect_left(times, end, k)  # the window is segments k..m-1
                # the first segment from k on without room: past the trailing ones of
                # ``free`` from k (the segment after the last when every one has room)
                free = bits >> k
                stop = k + (free ^ (free + 1)).bit_length() - 1
                if stop >= m:
                    break
                k = stop + 1
            # times[k] <= c and times[m] is the first breakpoint >= end: split there.
            if times[k] != c:
                k += 1
                m += 1
                times.insert(k, c)
                use.insert(k, use[k - 1])
                _insert(fits, k)
            if m == len(times) or times[m] != end:
                times.insert(m, end)
                use.insert(m, use[m - 1])
                _insert(fits, m)
            for q in range(k, m):
                u = use[q] + load
                use[q] = u
                full = unfit.get(u)
                if full is None:  # the room classes a segment with usage u has no room for
                    full = unfit[u] = tuple(
                        r for r, room in enumerate(rooms) if (room - u) & guard != guard
                    )
                if full:
                    keep = ~(1 << q)
                    for r in full:
                        fits[r] &= keep
        else:
            c = est
        start[i] = c
        finish[i] = c + d
        if (c + d + tail[i]) * (1 - 1e-12) >= cutoff and position >= checked:
            return (), math.inf  # shaded: tails add in another order
    return tuple(start), max(finish, default=0.0)
