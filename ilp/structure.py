"""Precomputed graph facts of a scheduling :class:`~ilp.problem.Problem` that every list
schedule, bound and search reads (:func:`structure`, cached by content)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from ilp.problem import PARALLEL, SINGLE, Problem

__all__ = ["Structure", "structure", "pack"]


@dataclass(frozen=True, slots=True)
class Structure:
    """Precomputed graph facts of a problem.

    ``desc[i]``/``anc[i]`` are the bitsets of i's strict descendants and ancestors;
    ``head[i]`` the earliest start and ``tail[i]`` the least time after i's finish to the
    end, both with fastest modes.
    ``duration[m][i]`` is op i's time in mode m, tabulated for the list schedule's inner
    loop, and ``load[m][i]`` the units it holds of every resource kind packed into one
    integer (a field of :attr:`width` bits per kind, kind 0 lowest): summing loads sums
    usage per kind. The inner loops test capacity with one integer operation,
    ``(room[m][i] - usage) & guard == guard``: ``room`` packs the units left beside the op
    with each field's top bit (``guard``) set, and a field keeps that bit exactly when the
    usage of its kind fits (usage never exceeds capacity, so no field borrows).
    """

    preds: tuple[tuple[int, ...], ...]
    succs: tuple[tuple[int, ...], ...]
    desc: tuple[int, ...]
    anc: tuple[int, ...]
    head: tuple[float, ...]
    tail: tuple[float, ...]
    duration: tuple[tuple[float, ...], tuple[float, ...]]
    load: tuple[tuple[int, ...], tuple[int, ...]]
    room: tuple[tuple[int, ...], tuple[int, ...]]
    guard: int
    width: int

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
    anc = [0] * n
    for j in range(n):
        head[j] = max((head[i] + problem.min_duration(i) for i in preds[j]), default=0.0)
        for i in preds[j]:
            anc[j] |= (1 << i) | anc[i]
    width = max(problem.capacity, default=0).bit_length() + 1
    guard = pack((1 << (width - 1),) * len(problem.capacity), width)
    need = problem.need
    return Structure(
        preds=tuple(map(tuple, preds)),
        succs=tuple(map(tuple, succs)),
        desc=tuple(desc),
        anc=tuple(anc),
        head=tuple(head),
        tail=tuple(tail),
        duration=(problem.single_s, problem.parallel_s),
        load=(
            tuple(pack(u, width) for u in need[SINGLE]),
            tuple(pack(u, width) for u in need[PARALLEL]),
        ),
        room=tuple(
            tuple(pack(_left(problem.capacity, u), width) | guard for u in need[m])
            for m in (SINGLE, PARALLEL)
        ),
        guard=guard,
        width=width,
    )


def pack(units: Sequence[int], width: int) -> int:
    """Units of each kind as one integer, ``width`` bits per kind (see :class:`Structure`)."""
    return sum(u << (k * width) for k, u in enumerate(units))


def _left(capacity: Sequence[int], units: Sequence[int]) -> tuple[int, ...]:
    return tuple(c - u for c, u in zip(capacity, units, strict=True))
