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
``L * (ceil(m/d) + s - 1) + tail(d, P_first, L)`` (the data-parallel collectives and the
optimizer step, see :class:`DpTask`), plus the all-reduce of the tied weights the first stage
shares with later ones (:mod:`placement.first_stage`).

Memory may depend on ``d`` (state sharded over the replicas): then the DP runs once per
memory table. Degrees are solved in order of lower bounds on their time, per degree and
stage count, skipping the degrees that cannot beat the best found and stopping each DP at
the most stages that still can (:func:`placement.dp_order.solve_many`).

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

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from placement.first_stage import final_round

__all__ = [
    "SegmentCosts",
    "DpSolution",
    "DpTask",
    "candidate_degrees",
    "dense_solve",
    "solution_key",
    "solve_parts",
    "sparse_solve",
    "with_table",
]

_INF = np.inf


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

    ``tail(d, params, load)`` is the exposed time after the pipeline (the data-parallel
    collectives and the optimizer step) for arrays of degrees, first-stage parameters and
    bottleneck loads per micro-batch; it must not decrease with ``params`` (the final round
    keeps only record-low loads) and may fall by at most ``ceil(m / d)`` times a rise of the
    load (sharded collectives hidden behind it), so that the time never falls as the load
    rises. With
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
    tail: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
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


def with_table(task: DpTask, max_s: np.ndarray, ds: np.ndarray) -> DpTask:
    """``task`` with memory table ``max_s`` for degrees ``ds``, and no more stages than a
    pipeline on ``max_devices / d`` devices can have (t each, but one for a stage without a
    tensor-parallel layer)."""
    costs = task.costs if max_s is task.costs.max_s else replace(task.costs, max_s=max_s)
    per = task.max_devices // max(1, int(ds[0]))
    one = task.costs.n_one_layers if task.t > 1 else per
    s_max = min(task.max_stages, per if per <= one else one + (per - one) // task.t)
    return replace(task, costs=costs, max_stages=max(1, s_max))


def solve_parts(
    parts: list[tuple[int, DpTask, np.ndarray]], bands: dict
) -> list[DpSolution | None]:
    """Each part's best over its degrees; dense parts of one shape run as one batched DP."""
    sols: list[DpSolution | None] = [None] * len(parts)
    groups: dict[tuple[int, int], list[int]] = {}
    for j, (_, task, ds) in enumerate(parts):
        if task.costs.dense:
            groups.setdefault((task.costs.n_states, task.c1), []).append(j)
        else:
            sols[j] = sparse_solve(task, ds)
    for idx in groups.values():
        solved = dense_solve([parts[j][1] for j in idx], [parts[j][2] for j in idx], bands)
        for j, sol in zip(idx, solved, strict=True):
            sols[j] = sol
    return sols


def solution_key(sol: DpSolution) -> tuple[float, int, int]:
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


def dense_solve(
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
    bands_g = (ms_b, last_b, mid_all, one_b, windows, big_w)
    for g, task in enumerate(tasks):
        best = final_round(task, finals[:deepest, g], rows, degrees[g])
        sols.append(None if best is None else _dense_backtrack(task, g, best, bands_g))
    return sols


def _dense_backtrack(task: DpTask, g: int, best: tuple, bands: tuple) -> DpSolution:
    """The stages of task ``g``'s ``best`` (the final round's pick), walking the banded
    tables back: at each position the first band column attaining the table's value, as the
    DP step took it."""
    ms_b, last_b, mid_all, one_b, windows, big_w = bands
    size = task.costs.n_states
    time_s, load_s, d, s, c, q = best
    pairs, one = [q], _one(task)
    state, c = int(task.costs.inner[q]), c - int(one[q])
    for pos in range(s - 1, 0, -1):
        loads = np.where(ms_b[g, state] >= pos, (last_b if pos == 1 else mid_all)[g, state], _INF)
        below = windows[pos - 1, g, state, c - 1] if c else _INF  # a one-device stage
        prev = np.where(one_b[g, state], below, windows[pos - 1, g, state, c])
        inner = state - big_w + int(np.maximum(loads, prev).argmin())  # band column -> k'
        q = state * size + inner
        pairs.append(q)
        state, c = inner, c - int(one[q])
    assert state == 0 and c == 0, "reconstruction must end at the empty downset"
    return DpSolution(time_s, load_s, d, s, tuple(pairs))


def sparse_solve(task: DpTask, ds: np.ndarray, keep: list | None = None) -> DpSolution | None:
    """The DP over explicit downset pairs (general DAGs); ``keep`` as for :func:`dense_solve`."""
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
