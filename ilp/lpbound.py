"""A linear-programming lower bound on the makespan when intra-op parallel ops hold the chip.

The argument (valid only with ``parallel_blocks_all``, where a split op holds every core):
take any schedule and cut out of the time axis every interval in which a parallel op runs.
Nothing that holds a core runs then, so what is left holds every core-holding single-mode op
whole, still in precedence order and within the capacities; an op that holds no core (a
join, or a collective holding only its channel) may lose the part of its time that
overlapped parallel ops, so it keeps at least its latency minus the parallel time of the ops
it is incomparable with. Hence, with ``x_i`` = 1 when op i runs parallel,

    makespan = sum_i x_i p_i + C,

where C, the length of the collapsed schedule, is at least every path of collapsed durations
((1 - x_i) s_i for ops that hold a core), per core kind the single-mode unit-seconds of that
kind over its units, and per further kind (a channel) the units times collapsed durations
over its units (the pieces of its ops left after the cut still never hold more units at
once than exist). Relaxing x_i to [0, 1] gives a small LP (three
variables and two rows per op, one row per edge) whose optimum is a lower bound; near the
list schedule the same rows with integral x_i (a small MIP without big-M rows) bound it
closer. It adds what the combinatorial bounds of
:mod:`ilp.bounds` miss: every parallel op's time is paid outside the single ops' schedule,
not only along one path. (The same rows over the MIP's mode variables, tried as cuts in
:mod:`ilp.formulation`, proved no more parts optimal.)
"""

from __future__ import annotations

from typing import Final

import highspy
import numpy as np

from ilp._native import native_stdout_silenced
from ilp.listsched import Structure
from ilp.problem import SINGLE, Problem

__all__ = ["collapsed_lower_bound"]

# The optimum is computed to the solver's tolerances (1e-7 for the LP, 1e-6 for the MIP, on
# rows of O(1) coefficients after scaling); the bound returned is shaded by this much so it
# stays valid.
_SAFETY: Final = 1e-5
# Integral modes are tried when the list schedule is within this of the LP bound: they prove
# about twice as many list schedules optimal as the LP alone, and none beyond such a gap
# (where the MIP's time would be wasted).
_INTEGER_WITHIN: Final = 0.10

_PRIMAL_HEURISTICS: Final = (
    "mip_heuristic_run_feasibility_jump",
    "mip_heuristic_run_rins",
    "mip_heuristic_run_rens",
    "mip_heuristic_run_root_reduced_cost",
)

# A column of the rows: ("x", i) op i's split share, ("e", i) its collapsed start, ("d", i)
# its collapsed duration, ("C", 0) the collapsed length, ("T", 0) the makespan.
_Column = tuple[str, int]


def _rows(
    problem: Problem, st: Structure, scale: float
) -> list[tuple[list[_Column], list[float], float]]:
    """The rows ``sum(coef * column) >= rhs`` of the module docstring, times multiplied by
    ``scale``. ("x", i) appears only for ops that can split; other ops run single-core."""
    n = problem.n
    single = [s * scale for s in problem.single_s]
    split = [
        p * scale if ok else 0.0
        for p, ok in zip(problem.parallel_s, problem.can_parallel, strict=True)
    ]
    can = problem.can_parallel
    rows: list[tuple[list[_Column], list[float], float]] = []
    for i in range(n):
        if not problem.holds_core(i):
            # d_i >= s_i - sum of x_j p_j over ops j that may split beside i
            beside = [j for j in range(n) if can[j] and not st.comparable(i, j) and j != i]
            rows.append(
                (
                    [("d", i), *(("x", j) for j in beside)],
                    [1.0, *(split[j] for j in beside)],
                    single[i],
                )
            )
        elif can[i]:
            rows.append(([("d", i), ("x", i)], [1.0, single[i]], single[i]))  # (1 - x_i) s_i
        else:
            rows.append(([("d", i)], [1.0], single[i]))
        rows.append(([("C", 0), ("e", i), ("d", i)], [1.0, -1.0, -1.0], 0.0))  # C >= e_i + d_i
    for i, j in problem.edges:
        rows.append(([("e", j), ("e", i), ("d", i)], [1.0, -1.0, -1.0], 0.0))  # e_j >= e_i + d_i
    for k, cap in enumerate(problem.capacity):
        units = [u[k] for u in problem.need[SINGLE]]
        if k >= problem.core_kinds:
            # C >= sum u_i d_i / cap: a further kind's ops keep their collapsed time
            ops = [i for i in range(n) if units[i]]
            if ops:
                rows.append(
                    (
                        [("C", 0), *(("d", i) for i in ops)],
                        [1.0, *(-units[i] / cap for i in ops)],
                        0.0,
                    )
                )
            continue
        w = [single[i] * units[i] / cap if units[i] else 0.0 for i in range(n)]
        if any(w):  # C >= sum (1 - x_i) w_i
            ops = [i for i in range(n) if w[i] and can[i]]
            rows.append(([("C", 0), *(("x", i) for i in ops)], [1.0, *(w[i] for i in ops)], sum(w)))
    splits = [i for i in range(n) if can[i]]
    # T >= sum x_i p_i + C
    rows.append(
        (
            [("T", 0), ("C", 0), *(("x", i) for i in splits)],
            [1.0, -1.0, *(-split[i] for i in splits)],
            0.0,
        )
    )
    return rows


def collapsed_lower_bound(
    problem: Problem, st: Structure, ub_s: float, close: float = _SAFETY
) -> float:
    """A lower bound on the optimal makespan by the LP of the module docstring, in seconds
    (0 when it does not apply), never above ``ub_s``.

    ``ub_s`` is the makespan of a feasible schedule (the list schedule's). An optimal schedule
    is no longer, so an op whose single-core path (head + single + tail) exceeds it runs split
    there: such ops are fixed to the split mode. Times are scaled by ``ub_s`` inside the LP.
    When the LP leaves ``ub_s`` more than ``close`` (relative) but at most
    :data:`_INTEGER_WITHIN` above its bound, the modes are made integral and HiGHS's MIP dual
    bound is taken: fractional modes are most of what the LP gives away.
    """
    n = problem.n
    if not problem.parallel_blocks_all or not any(problem.can_parallel) or ub_s <= 0:
        return 0.0
    rows = _rows(problem, st, 1.0 / ub_s)
    index: dict[_Column, int] = {}
    for cols, _, _ in rows:
        for c in cols:
            index.setdefault(c, len(index))
    lower = np.zeros(len(index))
    upper = np.full(len(index), highspy.kHighsInf)
    for i in range(n):
        if ("x", i) in index:
            upper[index["x", i]] = 1.0
            if st.head[i] + problem.single_s[i] + st.tail[i] > ub_s:
                lower[index["x", i]] = 1.0  # cannot run single-core in an optimal schedule
    cost = np.zeros(len(index))
    cost[index["T", 0]] = 1.0

    with native_stdout_silenced():
        h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    # Presolve stays off for the LP (small and sparse: it costs more than it saves) and for the
    # MIP below: HiGHS 1.16's MIP presolve has claimed a suboptimal layer schedule optimal
    # (tests/test_ilp_channels.py), and a dual bound raised that way would not be a bound.
    h.setOptionValue("presolve", "off")
    h.addVars(len(index), lower, upper)
    h.changeColsCost(len(index), np.arange(len(index), dtype=np.int32), cost)
    h.addRows(
        len(rows),
        np.array([r[2] for r in rows]),
        np.full(len(rows), highspy.kHighsInf),
        sum(len(r[0]) for r in rows),
        np.cumsum([0] + [len(r[0]) for r in rows[:-1]]).astype(np.int32),
        np.array([index[c] for r in rows for c in r[0]], dtype=np.int32),
        np.array([v for r in rows for v in r[1]]),
    )
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return 0.0
    bound = h.getInfo().objective_function_value * (1 - _SAFETY)
    if bound * (1 + close) < 1.0 <= bound * (1 + _INTEGER_WITHIN):
        modes = np.array([index[c] for c in index if c[0] == "x"], dtype=np.int32)
        h.changeColsIntegrality(
            modes.size, modes, np.full(modes.size, highspy.HighsVarType.kInteger)
        )
        h.setOptionValue("mip_rel_gap", _SAFETY)
        # Only the dual bound is wanted (the list schedule is the primal side), so HiGHS's
        # primal heuristics and restarts are switched off: the MIPs take a fraction of the
        # time and prove the same list schedules optimal.
        for option in _PRIMAL_HEURISTICS:
            h.setOptionValue(option, False)
        h.setOptionValue("mip_heuristic_effort", 0.0)
        h.setOptionValue("mip_allow_restart", False)
        h.run()  # no node or time limit: single-threaded, so deterministic
        bound = max(bound, h.getInfo().mip_dual_bound * (1 - _SAFETY))
    return min(1.0, max(0.0, bound)) * ub_s
