"""The order in which the DP's tasks and data-parallel degrees are solved: lower bounds first.

:func:`solve_many` runs :mod:`placement.dp` on several tasks (graph variants and ZeRO stages)
and their data-parallel degrees. It keeps, per task, a lower bound on the best time at each
(degree, stage count), raised by costlier bounds only where the cheaper ones leave a chance,
and solves the degrees whose bound can still win, best first, each DP stopping at the most
stages that still can. Every bound is a true lower bound, so the answer stays exact.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from placement.dp import (
    DpSolution,
    DpTask,
    candidate_degrees,
    dense_solve,
    solution_key,
    solve_parts,
    sparse_solve,
    with_table,
)
from placement.first_stage import record_lows
from placement.pipelining import micro_batches_per_pipeline, pipeline_s

__all__ = ["solve_many"]

_INF = np.inf
_ROUND = 4  # degrees with their own memory tables solved as one batch


def solve_many(
    tasks: tuple[DpTask, ...], *, prune: bool = False, cutoff_s: float = _INF
) -> list[DpSolution | None]:
    """Solve several graphs; chains of equal length run through one batched DP.

    Batching the grids of several tasks into one array makes each of the ``s`` steps one set
    of numpy calls for all of them. Each task's degrees are solved in rounds, in order of
    their lower bounds (:attr:`DpTask.bound`, raised for the degrees it leaves by
    :attr:`DpTask.sharper`, then by one relaxed DP per graph, :func:`_relaxed_bounds`), the
    degrees of a task that share a memory table in one DP, skipping a degree whose bound
    exceeds the task's best so far; with ``prune``, the best of all tasks so far (then only
    the overall best is exact: a task may get None or a slower solution). A DP stops at the
    most stages whose bound can still win. With ``prune`` the first round is one degree, the
    best-bound one of a task whose memory does not depend on ``d`` (unsharded state, usually
    close to the best) if there is one: a cheap first incumbent. Without it such tasks are
    solved at every degree at once, before the rounds. ``cutoff_s`` skips, like a best so
    far, what cannot be faster than it (a task may then get None). Ties go to the smaller
    ``d``, then fewer stages.
    """
    out: list[DpSolution | None] = [None] * len(tasks)
    bands: dict = {}  # banded stage loads, shared by the memory tables of one task
    rival = functools.partial(_rival, prune=prune, cutoff_s=cutoff_s)
    lows = _Lows(tasks)
    parts = []
    candidates = functools.cache(candidate_degrees)  # tasks of one graph share their degrees
    for i, task in enumerate(tasks):
        top = max(1, min(task.max_devices, task.micro_batches))
        every = candidates(task.micro_batches, 1, top, whole=task.whole_batches)
        every = every[every % task.d_multiple == 0]
        if not every.size:
            continue
        lows.add(i, every)
        if not prune and lows.task(i).max_s_at is None:
            ds = lows.degrees.pop(i)
            if float(lows.table.pop(i).min()) <= cutoff_s:
                parts.append((i, with_table(lows.task(i), lows.task(i).costs.max_s, ds), ds))
    for (i, _, _), sol in zip(parts, solve_parts(parts, bands), strict=True):
        out[i] = sol
    items = _contenders(lows.items(), out, rival)
    if prune and items:
        seed = min(items, key=lambda it: (lows.sharded(it[1]), it))
        ds = np.array([seed[2]])
        part = (seed[1], lows.part(seed[1], ds, rival(out, seed[1])), ds)
        out[seed[1]] = solve_parts([part], bands)[0]
        items.remove(seed)
    items = lows.sharpen(
        items, out, rival, lambda left: lows.sharper(left, {i: rival(out, i) for i in left})
    )
    # one DP per graph, with its loosest memory table, bounds the degrees still left
    items = lows.sharpen(
        items, out, rival, lambda left: _relaxed_bounds(lows, left, bands, out, rival)
    )
    while items:
        # each round solves, as one batch, the degrees whose bound can still win; degrees of
        # one task sharing a memory table share one DP
        todo = _contenders(items, out, rival)
        parts, taken = [], set()
        for _, i, d in todo:
            if len(parts) == _ROUND:
                break
            if (i, d) in taken:
                continue
            mine = lows.memory(i, d)
            same = (e for _, j, e in todo if j == i and (j, e) not in taken)
            ds = np.array(sorted(e for e in same if _same(lows.memory(i, e), mine)))
            taken.update((i, int(e)) for e in ds)
            parts.append((i, lows.part(i, ds, rival(out, i)), ds))
        items = [it for it in todo if (it[1], it[2]) not in taken]
        for (i, _, _), sol in zip(parts, solve_parts(parts, bands), strict=True):
            if sol is not None and (out[i] is None or solution_key(sol) < solution_key(out[i])):
                out[i] = sol
    return out


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a is b or np.array_equal(a, b)


class _Lows:
    """The search's lower bounds: per task, its candidate degrees (sorted) and a bound on the
    best time at each (degree, stage count), raised as sharper bounds come; and the memory
    tables met so far."""

    def __init__(self, tasks: tuple[DpTask, ...]) -> None:
        self.tasks = tasks
        self.degrees: dict[int, np.ndarray] = {}
        self.table: dict[int, np.ndarray] = {}
        self._memory: dict[tuple[int, int], np.ndarray] = {}

    def task(self, i: int) -> DpTask:
        """Task ``i`` in full (:attr:`DpTask.build`)."""
        task = self.tasks[i]
        return task if task.build is None else task.build()

    def sharded(self, i: int) -> bool:
        """Whether task ``i``'s memory depends on ``d``, without building it."""
        task = self.tasks[i]
        return task.sharded if task.build is not None else task.max_s_at is not None

    def add(self, i: int, ds: np.ndarray) -> None:
        task = self.tasks[i]
        self.degrees[i] = ds
        if task.bound is None:
            self.table[i] = np.full((ds.size, task.max_stages), -_INF)
        else:
            self.table[i] = task.bound(ds)

    def items(self) -> list[tuple[float, int, int]]:
        """(bound, task, degree) of every degree that can fit at all."""
        out = []
        for i, ds in self.degrees.items():
            lbs = self.table[i].min(axis=1, initial=_INF)
            out += [
                (lb, i, d) for lb, d in zip(lbs.tolist(), ds.tolist(), strict=True) if lb < _INF
            ]
        return out

    def raise_(self, i: int, ds: np.ndarray, table: np.ndarray) -> None:
        rows = np.searchsorted(self.degrees[i], ds)
        self.table[i][rows] = np.maximum(self.table[i][rows], table)

    def bound_at(self, i: int, ds: np.ndarray) -> np.ndarray:
        return self.table[i][np.searchsorted(self.degrees[i], ds)].min(axis=1, initial=_INF)

    def stages(self, i: int, ds: np.ndarray, bar: float) -> int:
        """The most stages a pipeline of task ``i`` at a degree of ``ds`` can have and still
        not be slower than ``bar``."""
        rows = self.table[i][np.searchsorted(self.degrees[i], ds)]
        ok = np.flatnonzero((rows <= bar).any(axis=0))
        return int(ok[-1]) + 1 if ok.size else 0

    def memory(self, i: int, d: int) -> np.ndarray:
        if (i, d) not in self._memory:
            task = self.task(i)
            self._memory[i, d] = task.costs.max_s if task.max_s_at is None else task.max_s_at(d)
        return self._memory[i, d]

    def part(self, i: int, ds: np.ndarray, bar: float) -> DpTask:
        """Task ``i`` at degrees ``ds`` (sharing one memory table), as a DP to run."""
        task = with_table(self.task(i), self.memory(i, int(ds[0])), ds)
        return replace(task, max_stages=max(1, min(task.max_stages, self.stages(i, ds, bar))))

    def sharper(self, left: dict[int, np.ndarray], bars: dict[int, float]) -> dict[int, np.ndarray]:
        """:attr:`DpTask.sharper` at the degrees ``left`` of each task, in the cells whose
        bound does not exceed the task's ``bars``."""
        out = {}
        for i, ds in left.items():
            if self.tasks[i].sharper is not None:
                rows = self.table[i][np.searchsorted(self.degrees[i], ds)]
                out[i] = self.tasks[i].sharper(ds, rows <= bars[i])
        return out

    def sharpen(
        self,
        items: list[tuple[float, int, int]],
        out: list[DpSolution | None],
        rival: Callable[[list[DpSolution | None], int], float],
        bounds: Callable[[dict[int, np.ndarray]], dict[int, np.ndarray]],
    ) -> list[tuple[float, int, int]]:
        """The (bound, task, degree) items that can still win, in order, their bounds raised
        by ``bounds`` (given the sorted degrees left per task, tables at them per task)."""
        items = _contenders(items, out, rival)
        left: dict[int, list[int]] = {}
        for _, i, d in items:
            left.setdefault(i, []).append(d)
        if not left:
            return items
        todo = {i: np.array(sorted(ds), dtype=np.int64) for i, ds in left.items()}
        for i, table in bounds(todo).items():
            self.raise_(i, todo[i], table)
        now = {
            i: dict(zip(ds.tolist(), self.bound_at(i, ds).tolist(), strict=True))
            for i, ds in todo.items()
        }
        return sorted(_contenders([(now[i][d], i, d) for _, i, d in items], out, rival))


def _relaxed_bounds(
    lows: _Lows,
    degrees: dict[int, np.ndarray],
    bands: dict,
    out: list[DpSolution | None],
    rival: Callable[[list[DpSolution | None], int], float],
) -> dict[int, np.ndarray]:
    """For each task ``i`` of ``degrees`` (its sorted degrees left), a lower bound on its
    best time at each of them and each stage count.

    The tasks of one graph (same stages, other ZeRO stages) share one DP with the loosest of
    their memory tables, that of their largest degree (memory never grows with ``d``), up to
    the most stages that can still win at any of their degrees: any pipeline a degree allows
    is among its candidates, priced at that degree with the task's own tail. Stage counts
    past the DP's are left unbounded.
    """
    tasks = {i: lows.task(i) for i in degrees}
    groups: dict[int, list[int]] = {}
    for i in degrees:
        groups.setdefault(id(tasks[i].costs.load_last), []).append(i)
    runs = []
    for members in groups.values():
        loosest = np.maximum.reduce([lows.memory(i, int(degrees[i][-1])) for i in members])
        fewest = min(int(degrees[i][0]) for i in members)  # allows the most stages
        run = with_table(tasks[members[0]], loosest, np.array([fewest]))
        most = max(lows.stages(i, degrees[i], rival(out, i)) for i in members)
        runs.append(replace(run, max_stages=max(1, min(run.max_stages, most))))
    kept: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    shapes: dict[tuple[int, int], list[int]] = {}
    for j, run in enumerate(runs):
        if run.costs.dense:
            shapes.setdefault((run.costs.n_states, run.c1), []).append(j)
        else:
            one: list = []
            sparse_solve(run, np.ones(1, np.int64), one)
            kept[j] = one[0]
    for idx in shapes.values():
        batch: list = []
        dense_solve([runs[j] for j in idx], [], bands, batch)
        kept.update(zip(idx, batch, strict=True))
    tables = {}
    for j, members in enumerate(groups.values()):
        vals, rows = kept[j]
        lead = tasks[members[0]]
        # as in the final round, only first stages beating every one with fewer parameters
        # (the tied weights' all-reduce, never negative, is left out of the bound)
        order, better = record_lows(vals, lead.costs.params[rows])
        vals = vals[:, order, :]
        si, ki, ci = np.nonzero(better)  # sorted by stage count
        starts = np.flatnonzero(np.r_[True, si[1:] != si[:-1]]) if si.size else si
        devices = (lead.t * (si + 1) - (lead.t - 1) * ci)[:, None]
        load, params = vals[si, ki, ci][:, None], lead.costs.params[rows[order[ki]]][:, None]
        for i in members:
            ds, task = degrees[i][None, :], tasks[i]
            table = np.full((ds.size, task.max_stages), _INF)
            table[:, runs[j].max_stages :] = -_INF
            if si.size:
                per = micro_batches_per_pipeline(task.micro_batches, ds)
                time = pipeline_s(load, per, si[:, None] + 1) + task.tail(ds, params, load)
                time = np.where(devices * ds <= task.max_devices, time, _INF)
                table[:, si[starts]] = np.minimum.reduceat(time, starts, axis=0).T
            tables[i] = table
    return tables


def _contenders(
    items: list[tuple[float, int, int]],
    out: list[DpSolution | None],
    rival: Callable[[list[DpSolution | None], int], float],
) -> list[tuple[float, int, int]]:
    """The (bound, task, degree) items whose bound does not exceed their task's rival (each
    task's rival worked out once)."""
    bar = {i: rival(out, i) for i in {it[1] for it in items}}
    return [it for it in items if it[0] <= bar[it[1]]]


def _rival(out: list[DpSolution | None], i: int, *, prune: bool, cutoff_s: float) -> float:
    """The time a degree of task ``i`` must match: its task's best, or with ``prune`` the
    best of all, and at most ``cutoff_s``."""
    best = (sol.time_s for sol in (out if prune else out[i : i + 1]) if sol is not None)
    return min(cutoff_s, min(best, default=_INF))
