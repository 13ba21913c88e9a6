"""A mode choice for the list schedules that does not starve the critical chain:
:func:`balanced_modes`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import add
from typing import TYPE_CHECKING

from ilp.problem import PARALLEL, SINGLE, Problem

if TYPE_CHECKING:
    from ilp.listsched import Structure

__all__ = ["balanced_modes"]


def balanced_modes(problem: Problem, st: Structure) -> tuple[tuple[int, ...], float] | None:
    """(modes, estimate): modes that split an op only where that lowers an estimate of the
    makespan, found greedily from all single-core; None without ``parallel_blocks_all``.

    With ``parallel_blocks_all`` a split op runs beside no core holder, so the estimate is
    the split ops' summed time plus the longer of the longest path of the single-core core
    holders and the busiest core kind's unit-seconds per unit of them (the collapsed
    schedule of :mod:`ilp.lpbound`), or the busiest further kind's unit-seconds per unit if
    more (at the fastest modes' durations): a lower bound on every schedule in those modes.
    The fastest modes ignore it and split every op, so ops that a split barely speeds up
    (a weight-gradient GEMM on a chip of many matrix units) hold the whole chip one after
    another, where single-core, side by side and beside the critical chain, they would take
    about as long as one of them; the local search cannot leave that
    optimum one flip at a time. A move splits one op or a group of identical ops (parallel
    siblings, which only shorten the path together) with an op on a longest path; each step
    takes the first move, in order of the least estimate it could reach, that lowers the
    estimate (one longest-path pass each), until none does. ``st`` is the problem's
    :func:`ilp.listsched.structure`.
    """
    n = problem.n
    if not problem.parallel_blocks_all or not any(problem.can_parallel):
        return None
    single_s, parallel_s = problem.single_s, problem.parallel_s
    cores = problem.core_kinds
    per_unit = [
        [s * u / cap for u, cap in zip(need[:cores], problem.capacity[:cores], strict=True)]
        for s, need in zip(single_s, problem.need[SINGLE], strict=True)
    ]
    work = [sum(w[k] for w in per_unit) for k in range(cores)]
    # An op holding no core (a collective on its channel) may run beside split ops: it
    # counts only in its further kinds' unit-seconds (at the fastest modes' durations).
    further = max(
        (
            sum(problem.min_duration(i) * problem.need[SINGLE][i][k] for i in range(n)) / cap
            for k, cap in enumerate(problem.capacity[cores:], cores)
        ),
        default=0.0,
    )
    moves, within = _moves(problem)
    d = [s if problem.holds_core(i) else 0.0 for i, s in enumerate(single_s)]  # 0 once split
    modes = [SINGLE] * n
    paid = 0.0  # the split ops' summed time
    # Splitting ops changes the heads of their descendants only, and the tails of their
    # ancestors: each step recomputes just those, by the same formulas in the same order.
    head, path = _heads(st.preds, d, [0.0] * n, range(n))
    sums: dict[int, tuple] = {}  # per move, :func:`_move_sums` until one of its ops splits
    tail = _tails(st.succs, d, [0.0] * n, range(n - 1, -1, -1))
    estimate = max(further, path, *work)
    while True:
        near = path * (1 - 1e-12)
        candidates = sorted(
            {
                m
                for i in range(n)
                if modes[i] == SINGLE and head[i] + d[i] + tail[i] >= near
                for m in within[i]
            }
        )
        tried = []
        for m in candidates:
            if m not in sums:
                sums[m] = _move_sums(moves[m], modes, per_unit, parallel_s, d, cores)
            ops, units, split_s, single = sums[m]
            rest = [w - u for w, u in zip(work, units, strict=True)]
            cost = paid + split_s
            # the longest path shortens by at most the ops' single-core times
            floor = max(further, cost + max(path - single, *rest))
            tried.append((floor, cost, rest, ops))
        tried.sort(key=lambda t: t[0])
        chosen = None
        for floor, cost, rest, ops in tried:
            if floor >= estimate * (1 - 1e-12):
                break
            trial = d[:]
            for i in ops:
                trial[i] = 0.0
            span = _heads(st.preds, trial, head, _ones(_union(st.desc, ops)))[1]
            cost = max(further, cost + max(span, *rest))
            if cost < estimate * (1 - 1e-12):
                chosen, estimate = ops, cost
                break
        if chosen is None:
            return tuple(modes), estimate
        for i in chosen:
            for m in within[i]:
                sums.pop(m, None)
            modes[i] = PARALLEL
            d[i] = 0.0
            paid += parallel_s[i]
            work = [w - u for w, u in zip(work, per_unit[i], strict=True)]
        head, path = _heads(st.preds, d, head, _ones(_union(st.desc, chosen)))
        tail = _tails(st.succs, d, tail, reversed(_ones(_union(st.anc, chosen))))


def _moves(problem: Problem) -> tuple[list[list[int]], list[list[int]]]:
    """The moves of :func:`balanced_modes` (each group of identical parallel siblings, then
    each op that may split alone) and, per op, the moves holding it."""
    n, single_s, parallel_s = problem.n, problem.single_s, problem.parallel_s
    alike: dict[tuple, list[int]] = {}
    for i in range(n):
        if problem.can_parallel[i]:
            key = (problem.need[SINGLE][i], problem.need[PARALLEL][i], single_s[i], parallel_s[i])
            alike.setdefault(key, []).append(i)
    moves = [g for g in alike.values() if len(g) > 1]
    moves += [[i] for i in range(n) if problem.can_parallel[i]]
    within: list[list[int]] = [[] for _ in range(n)]
    for m, move in enumerate(moves):
        for i in move:
            within[i].append(m)
    return moves, within


def _move_sums(
    move: Sequence[int],
    modes: Sequence[int],
    per_unit: Sequence[Sequence[float]],
    parallel_s: Sequence[float],
    d: Sequence[float],
    cores: int,
) -> tuple[list[int], list[float], float, float]:
    """A move's ops not yet split, with their summed unit-seconds per unit of each core kind,
    split times and current durations."""
    ops = [i for i in move if modes[i] == SINGLE]
    units = [sum(per_unit[i][k] for i in ops) for k in range(cores)]
    return ops, units, sum(parallel_s[i] for i in ops), sum(d[i] for i in ops)


def _union(sets: Sequence[int], ops: Iterable[int]) -> int:
    """The union of the bitsets ``sets[i]`` of the ops ``ops``."""
    u = 0
    for i in ops:
        u |= sets[i]
    return u


def _ones(bits: int) -> list[int]:
    """The positions of the set bits of ``bits``, in increasing order."""
    text = bin(bits)[:1:-1]  # bit k at index k
    found = []
    k = text.find("1")
    while k >= 0:
        found.append(k)
        k = text.find("1", k + 1)
    return found


def _heads(
    preds: Sequence[Sequence[int]], d: Sequence[float], head: Sequence[float], redo: Iterable[int]
) -> tuple[list[float], float]:
    """(earliest starts, longest path) under durations ``d``: the ops ``redo`` (in
    topological order) get their earliest starts anew, the others keep theirs from ``head``
    (those ``d`` did not change below)."""
    head = list(head)
    for j in redo:
        h = 0.0
        for p in preds[j]:
            if head[p] + d[p] > h:
                h = head[p] + d[p]
        head[j] = h
    return head, max(0.0, max(map(add, head, d), default=0.0))


def _tails(
    succs: Sequence[Sequence[int]], d: Sequence[float], tail: Sequence[float], redo: Iterable[int]
) -> list[float]:
    """The least time after each op's finish to the end under durations ``d``: the ops
    ``redo`` (in reverse topological order) anew, the others as in ``tail``."""
    tail = list(tail)
    for i in redo:
        t = 0.0
        for q in succs[i]:
            if d[q] + tail[q] > t:
                t = d[q] + tail[q]
        tail[i] = t
    return tail
