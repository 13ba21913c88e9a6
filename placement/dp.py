"""The min-max pipeline DP over nested downsets, shared by every objective and both paths.

``dp_s[D, c]`` is the smallest possible maximum stage load when the layers of downset ``D``
form exactly ``s`` stages, ``c`` of which run on one device (no tensor-parallel layer) and the
rest on ``t`` devices each; the stage at position ``s`` from the end must fit its memory
(``s <= max_s``). The device count of such a partition is ``t*s - (t-1)*c``, so this is the
DP of docs/placement.md ("at most k devices") with ``k`` replaced by the few values of ``c``
that can occur: ``c`` is 0 when every layer is tensor-parallel (or ``t = 1``), and at most the
number of non-tensor-parallel layers otherwise.

The DP iterates over ``s``: ``dp_s = min over stages (D \\ D') of max(load, dp_(s-1)[D'])``,
one vectorised numpy step over all candidate stages. The final round places the first stage
(whose parameters set the exposed data-parallel all-reduce) and, for the data-parallel
degrees ``d`` that can win (those dividing the ``m`` micro-batches in Phaze's model), prices
``L * (ceil(m/d) + s - 1) + tail(d, P_first)`` (the data-parallel collectives and the
optimizer step, see :class:`DpTask`), plus the all-reduce of the tied weights the first stage
shares with later ones (:mod:`placement.first_stage`).

Memory may depend on ``d`` (state sharded over the replicas): then the DP runs once per
memory table. Degrees are solved in order of lower bounds on their time, per degree and
stage count, skipping the degrees that cannot beat the best found and stopping each DP at
the most stages that still can (:func:`solve_many`).

Notes
-----
Work is O(S * pairs * c) for a general DAG (pairs = nested downset pairs) and
O(S * n * W * c) for a chain, ``W`` being the most layers a stage can hold in memory;
``S <= min(layers, devices / d)``, per memory table. The final round keeps, per (s, c), only
first stages whose load beats every first stage with fewer parameters, then tries the
``O(sqrt(m))`` degrees that can win (:func:`candidate_degrees`), never every degree up to
the device count.

References
----------
Tarnawski et al., "Piper: Multidimensional Planner for DNN Parallelization", NeurIPS 2021.
Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM", SC21.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from placement.first_stage import final_round, record_lows

__all__ = ["SegmentCosts", "DpSolution", "DpTask", "candidate_degrees", "solve_many"]

_INF = np.inf
_ROUND = 4  # degrees with their own memory tables solved as one batch


@dataclass(frozen=True, slots=True)
class SegmentCosts:
    """Candidate stages (pairs of nested downsets) with their figures, as flat arrays.

    State 0 is the empty downset and ``full`` the whole graph. With ``dense`` the pairs are
    the full ``n_states x n_states`` grid in row-major order (outer = row, inner = column)
    and invalid pairs carry ``max_s = 0``; otherwise pairs are sorted by ``outer``.
    ``load_last`` applies to the last stage (s = 1), ``load_mid`` to the others; ``params``
    feeds the data-parallel all-reduce when the stage comes first, and ``tied_s`` (None: 0)
    is then the all-reduce of the tied weights other stages copy.
    """

    n_states: int
    full: int
    outer: np.ndarray
    inner: np.ndarray
    dense: bool
    load_last: np.ndarray
    load_mid: np.ndarray
    max_s: np.ndarray
    one: np.ndarray
    params: np.ndarray
    n_one_layers: int
    tied_s: np.ndarray | None = None


@dataclass(frozen=True, slots=True)
class DpSolution:
    """The best pipeline for one graph: pairs from the first stage to the last."""

    time_s: float
    load_s: float
    d: int
    s: int
    pairs: tuple[int, ...]


def _masks_by_s(max_s: np.ndarray, s_max: int) -> list[np.ndarray]:
    """For each s in 1..s_max, the pair indices whose memory allows s - 1 but not s."""
    # values past s_max never drop; clipped, small integers sort in linear time (radix)
    keys = np.minimum(max_s, s_max + 1).astype(np.int16 if s_max < 1 << 14 else np.int64)
    order = np.argsort(keys, kind="stable")
    cuts = np.searchsorted(keys[order], np.arange(s_max + 1), side="left")
    # pairs with max_s == s - 1 become infeasible at step s
    return [order[cuts[s - 1] : cuts[s]] for s in range(1, s_max + 1)]


def _sparse_step(
    costs: SegmentCosts,
    one: np.ndarray,
    loads: np.ndarray,
    prev: np.ndarray,
    starts: np.ndarray,
    owners: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """One DP step over all pairs: candidate values per pair and their minimum per state."""
    n, c1 = prev.shape
    if c1 == 1:
        vals = np.maximum(loads, prev[costs.inner, 0])[:, None]
    else:
        g = prev[costs.inner]
        shifted = np.full_like(g, _INF)
        shifted[:, 1:] = g[:, :-1]
        vals = np.maximum(loads[:, None], np.where(one[:, None], shifted, g))
    cur = np.full((n, c1), _INF)
    cur[owners] = np.minimum.reduceat(vals, starts, axis=0)
    return vals, cur


@dataclass(frozen=True, slots=True)
class DpTask:
    """One graph's DP: its stages, tensor-parallel width and batch/device figures.

    ``tail(d, params)`` is the exposed time after the pipeline (the data-parallel
    collectives and the optimizer step) for arrays of degrees and first-stage parameters; it
    must not decrease with ``params`` (the final round keeps only record-low loads). With
    ``whole_batches`` only degrees dividing the micro-batches are allowed and the tail may be
    any function of ``d``; without, any degree is (``ceil(m / d)`` micro-batches per
    pipeline) and the tail must not decrease with ``d`` (:func:`candidate_degrees`).

    Memory may depend on ``d``: ``max_s_at(d)`` gives the ``max_s`` array of ``costs`` for
    degree ``d`` and must not decrease with ``d`` (more replicas never need more memory per
    device). None means ``costs.max_s`` holds for every ``d``. ``bound(ds)`` is a lower bound
    on the best time at each degree of ``ds`` and each stage count ``s`` (column ``s - 1`` of
    a ``len(ds) x max_stages`` array; None: no bound), to skip degrees and stage counts that
    cannot win; ``sharper(ds, live)`` another, costlier, worked out only in the cells the
    boolean array ``live`` marks (-inf in the others) and tried on those ``bound`` leaves.
    Only multiples of ``d_multiple`` are degrees (expert parallelism's ``ep`` divides ``d``).

    With ``build``, ``costs`` and ``max_s_at`` are worked out only when the DP needs them:
    ``build()`` returns the task in full (the bounds do without them), and ``sharded`` says
    beforehand whether memory depends on ``d``.
    """

    costs: SegmentCosts | None
    t: int
    max_stages: int
    max_devices: int
    micro_batches: int
    tail: Callable[[np.ndarray, np.ndarray], np.ndarray]
    max_s_at: Callable[[int], np.ndarray] | None = None
    whole_batches: bool = True
    bound: Callable[[np.ndarray], np.ndarray] | None = None
    d_multiple: int = 1
    sharper: Callable[..., np.ndarray] | None = None
    build: Callable[[], DpTask] | None = None
    sharded: bool = False

    @property
    def c1(self) -> int:
        """How many one-device stage counts c the DP tracks (1 when c is always 0)."""
        return min(self.costs.n_one_layers if self.t > 1 else 0, self.max_stages) + 1


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
                parts.append((i, _with_table(lows.task(i), lows.task(i).costs.max_s, ds), ds))
    for (i, _, _), sol in zip(parts, _solve_parts(parts, bands), strict=True):
        out[i] = sol
    items = _contenders(lows.items(), out, rival)
    if prune and items:
        seed = min(items, key=lambda it: (lows.sharded(it[1]), it))
        ds = np.array([seed[2]])
        part = (seed[1], lows.part(seed[1], ds, rival(out, seed[1])), ds)
        out[seed[1]] = _solve_parts([part], bands)[0]
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
        for (i, _, _), sol in zip(parts, _solve_parts(parts, bands), strict=True):
            if sol is not None and (out[i] is None or _key(sol) < _key(out[i])):
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
        task = _with_table(self.task(i), self.memory(i, int(ds[0])), ds)
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
        run = _with_table(tasks[members[0]], loosest, np.array([fewest]))
        most = max(lows.stages(i, degrees[i], rival(out, i)) for i in members)
        runs.append(replace(run, max_stages=max(1, min(run.max_stages, most))))
    kept: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    shapes: dict[tuple[int, int], list[int]] = {}
    for j, run in enumerate(runs):
        if run.costs.dense:
            shapes.setdefault((run.costs.n_states, run.c1), []).append(j)
        else:
            one: list = []
            _sparse_solve(run, np.ones(1, np.int64), one)
            kept[j] = one[0]
    for idx in shapes.values():
        batch: list = []
        _dense_solve([runs[j] for j in idx], [], bands, batch)
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
                time = load * (-(-task.micro_batches // ds) + si[:, None]) + task.tail(ds, params)
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


def _with_table(task: DpTask, max_s: np.ndarray, ds: np.ndarray) -> DpTask:
    """``task`` with memory table ``max_s`` for degrees ``ds``, and no more stages than a
    pipeline on ``max_devices / d`` devices can have (t each, but one for a stage without a
    tensor-parallel layer)."""
    costs = task.costs if max_s is task.costs.max_s else replace(task.costs, max_s=max_s)
    per = task.max_devices // max(1, int(ds[0]))
    one = task.costs.n_one_layers if task.t > 1 else per
    s_max = min(task.max_stages, per if per <= one else one + (per - one) // task.t)
    return replace(task, costs=costs, max_stages=max(1, s_max))


def _solve_parts(
    parts: list[tuple[int, DpTask, np.ndarray]], bands: dict
) -> list[DpSolution | None]:
    """Each part's best over its degrees; dense parts of one shape run as one batched DP."""
    sols: list[DpSolution | None] = [None] * len(parts)
    groups: dict[tuple[int, int], list[int]] = {}
    for j, (_, task, ds) in enumerate(parts):
        if task.costs.dense:
            groups.setdefault((task.costs.n_states, task.c1), []).append(j)
        else:
            sols[j] = _sparse_solve(task, ds)
    for idx in groups.values():
        solved = _dense_solve([parts[j][1] for j in idx], [parts[j][2] for j in idx], bands)
        for j, sol in zip(idx, solved, strict=True):
            sols[j] = sol
    return sols


def _key(sol: DpSolution) -> tuple[float, int, int]:
    return sol.time_s, sol.d, sol.s


def candidate_degrees(m: int, lo: int, hi: int, *, whole: bool = True) -> np.ndarray:
    """The data-parallel degrees in ``lo..hi`` the final round prices for ``m`` micro-batches.

    With ``whole`` (Phaze's model), the divisors of ``m``: frameworks (Megatron-LM among
    them) require ``d * micro_batch`` to divide the global batch, so each pipeline runs
    ``m / d`` micro-batches, and as every such degree is priced the tail may be any function
    of ``d``. Otherwise (the reference format, which allows ``ceil(m / d)``), the first degree
    of each class sharing ``ceil(m / d)``: the only ones that can win when the tail does not
    decrease with ``d``. Either way at most about ``2 sqrt(m)`` degrees, whatever the devices.

    >>> candidate_degrees(12, 2, 8).tolist(), candidate_degrees(12, 2, 8, whole=False).tolist()
    ([2, 3, 4, 6], [2, 3, 4, 6])
    """
    q = np.arange(1, math.isqrt(m) + 2, dtype=np.int64)
    if whole:
        q = q[m % q == 0]
        ds = np.concatenate((q, m // q))
    else:
        ds = np.concatenate(([lo], q, -(-m // q)))
    ds = np.unique(ds)
    return ds[(ds >= lo) & (ds <= hi)]


def _one(task: DpTask) -> np.ndarray:
    return task.costs.one if task.c1 > 1 else np.zeros_like(task.costs.one)


def _dense_solve(
    tasks: list[DpTask], degrees: list[np.ndarray], bands: dict, keep: list | None = None
) -> list[DpSolution | None]:
    """The DP on stacked interval grids (all tasks share n_states and c1), in band form.

    A stage is an interval of width ``w = k - k'``; memory bounds the width of a stage that
    fits at position ``s`` (``W_s``, non-increasing in ``s``), so each row ``k`` only looks at
    ``k' = k - W_s .. k - 1``. Column ``j`` of the band holds ``k' = k - W + j``. The previous
    table is read through a sliding window, so a step costs O(G * n * W_s) with no gather.
    With ``keep``, only the final round's inputs (each task's first-stage values and rows)
    are appended to it.
    """
    g_count = len(tasks)
    size, c1 = tasks[0].costs.n_states, tasks[0].c1
    n = size - 1
    s_max = max(task.max_stages for task in tasks)
    # the widest stage that fits anywhere sets the band
    k = np.arange(size)
    width = (k[:, None] - k[None, :]).ravel()
    big_w = max(int(width[t.costs.max_s >= 1].max(initial=1)) for t in tasks)
    col = k[:, None] - big_w + np.arange(big_w)[None, :]
    inside = col >= 0
    at = (k[:, None] * size + np.where(inside, col, 0)).ravel()  # flat grid index per cell

    def band(a: np.ndarray, fill) -> np.ndarray:
        return np.where(inside, a[at].reshape(size, big_w), fill)

    def loads(task: DpTask) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # the same stages recur with other memory tables (other degrees): band them once
        key = (id(task.costs.load_last), id(task.costs.load_mid), big_w, task.c1)
        if key not in bands:
            c = task.costs
            bands[key] = (band(c.load_last, _INF), band(c.load_mid, _INF), band(_one(task), False))
        return bands[key]

    ms_b = np.stack([band(t.costs.max_s, 0) for t in tasks])
    last_r, mid_r, one_r = (np.stack(x) for x in zip(*(loads(t) for t in tasks), strict=True))
    last_b = np.where(ms_b >= 1, last_r, _INF)
    # C order, so that the flat view below aliases it (np.where may pick another order)
    mid_b = np.ascontiguousarray(np.where(ms_b >= 2, mid_r, _INF))
    one_b = one_r
    mid_flat = mid_b.reshape(-1)
    assert np.shares_memory(mid_flat, mid_b), "the stage mask must write into mid_b"
    drop = _masks_by_s(ms_b.reshape(-1), s_max)
    # W_s = widest band column still feasible at position s
    reach = ms_b.max(axis=(0, 1))  # per column j (width big_w - j)
    # dp[s, g, k, c] lives at padded[s, g, big_w + k, c]; windows[s, g, k, c, j] reads
    # dp[s, g, k - big_w + j, c] (inf left of state 0), one strided view for the whole run
    padded = np.full((s_max + 1, g_count, big_w + size, c1), _INF)
    dp = padded[:, :, big_w:]
    dp[0, :, 0, 0] = 0.0
    windows = np.lib.stride_tricks.sliding_window_view(padded, big_w, axis=2)
    finals = np.full((s_max, g_count, size, c1), _INF)
    mid_all = mid_b.copy()  # before the per-position memory masks, for the backtrack
    # first band column feasible at each position s (W_s = big_w - j0); none past the last
    deepest = min(s_max, int(reach.max(initial=0)))
    j0s = np.searchsorted(np.maximum.accumulate(reach), np.arange(1, deepest + 1)).tolist()
    for s in range(1, deepest + 1):
        j0 = j0s[s - 1]
        if s > 1:
            mid_flat[drop[s - 1]] = _INF  # stages whose memory allows s - 1 but not s
        loads = (last_b if s == 1 else mid_b)[:, s:, j0:]  # (G, R, Ws)
        window = windows[s - 1, :, s:size, :, j0:]  # (G, R, c1, Ws)
        first = max(0, n - (big_w - j0))  # inner states of the full row's band
        if c1 == 1:
            vals = np.maximum(loads, window[:, :, 0, :])
            np.minimum.reduce(vals, axis=2, out=dp[s, :, s:, 0])
            finals[s - 1, :, first:n, 0] = vals[:, -1, big_w - j0 - (n - first) :]
            continue
        prev = np.moveaxis(window, 2, 3)  # (G, R, Ws, c1)
        shifted = np.full_like(prev, _INF)
        shifted[..., 1:] = prev[..., :-1]
        vals = np.maximum(loads[..., None], np.where(one_b[:, s:, j0:, None], shifted, prev))
        np.minimum.reduce(vals, axis=2, out=dp[s, :, s:])
        finals[s - 1, :, first:n] = vals[:, -1, big_w - j0 - (n - first) :]
    sols: list[DpSolution | None] = []
    rows = np.arange(n * size, size * size)  # pairs (full, k')
    if keep is not None:
        keep += [(finals[:deepest, g], rows) for g in range(g_count)]
        return sols
    for g, task in enumerate(tasks):
        best = final_round(task, finals[:deepest, g], rows, degrees[g])
        if best is None:
            sols.append(None)
            continue
        time_s, load_s, d, s, c, q = best
        pairs, one = [q], _one(task)
        state, c = int(task.costs.inner[q]), c - int(one[q])
        for pos in range(s - 1, 0, -1):
            # the first band column attaining dp[pos, g, state, c], as the DP step took it
            loads = np.where(
                ms_b[g, state] >= pos, (last_b if pos == 1 else mid_all)[g, state], _INF
            )
            below = windows[pos - 1, g, state, c - 1] if c else _INF  # a one-device stage
            prev = np.where(one_b[g, state], below, windows[pos - 1, g, state, c])
            inner = state - big_w + int(np.maximum(loads, prev).argmin())  # band column -> k'
            q = state * size + inner
            pairs.append(q)
            state, c = inner, c - int(one[q])
        assert state == 0 and c == 0, "reconstruction must end at the empty downset"
        sols.append(DpSolution(time_s, load_s, d, s, tuple(pairs)))
    return sols


def _sparse_solve(task: DpTask, ds: np.ndarray, keep: list | None = None) -> DpSolution | None:
    """The DP over explicit downset pairs (general DAGs); ``keep`` as for :func:`_dense_solve`."""
    costs = task.costs
    n, c1, s_max = costs.n_states, task.c1, task.max_stages
    one = _one(task)
    drop = _masks_by_s(costs.max_s, s_max)
    mid = costs.load_mid.copy()
    mid[costs.max_s < 2] = _INF
    last = np.where(costs.max_s >= 1, costs.load_last, _INF)
    starts = np.flatnonzero(np.r_[True, costs.outer[1:] != costs.outer[:-1]])
    owners = costs.outer[starts]
    rows = np.flatnonzero(costs.outer == costs.full)
    prev = np.full((n, c1), _INF)
    prev[0, 0] = 0.0
    tables = [prev]
    finals = []
    for s in range(1, s_max + 1):
        if s > 1:
            mid[drop[s - 1]] = _INF
        vals, cur = _sparse_step(costs, one, last if s == 1 else mid, prev, starts, owners)
        finals.append(vals[rows])
        tables.append(cur)
        if not np.isfinite(cur).any():
            break
        prev = cur
    if keep is not None:
        keep.append((np.stack(finals), rows))
        return None
    best = final_round(task, np.stack(finals), rows, ds)
    if best is None:
        return None
    time_s, load_s, d, s, c, q = best
    pairs = [q]
    state, c = int(costs.inner[q]), c - int(one[q])
    for pos in range(s - 1, 0, -1):
        q = _backtrack(costs, one, state, pos, c, tables, last, costs.load_mid)
        pairs.append(q)
        state, c = int(costs.inner[q]), c - int(one[q])
    assert state == 0 and c == 0, "reconstruction must end at the empty downset"
    return DpSolution(time_s, load_s, d, s, tuple(pairs))


def _backtrack(
    costs: SegmentCosts,
    one: np.ndarray,
    state: int,
    s: int,
    c: int,
    tables: list[np.ndarray],
    last: np.ndarray,
    mid: np.ndarray,
) -> int:
    """A pair (stage) that attains ``dp_s[state, c]`` (sparse layout): the first in order."""
    target = tables[s][state, c]
    lo, hi = np.searchsorted(costs.outer, [state, state + 1])
    qs = np.arange(lo, hi)
    ok = costs.max_s[qs] >= s
    loads = last[qs] if s == 1 else mid[qs]
    cc = c - one[qs].astype(np.int64)
    prev = tables[s - 1]
    valid = ok & (cc >= 0) & (cc < prev.shape[1])
    sub = np.where(valid, prev[costs.inner[qs], np.clip(cc, 0, prev.shape[1] - 1)], np.inf)
    val = np.maximum(loads, sub)
    hit = np.flatnonzero(valid & (val == target))
    assert hit.size, "the DP value must be attained by some stage"
    return int(qs[hit[0]])
