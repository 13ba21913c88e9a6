"""Schedule one layer pass's ops on a design's compute units: :func:`solve_schedule`.

The pipeline for one graph (docs/scheduling.md):

1. validate and canonicalise the graph (:mod:`ilp.problem`); identical content hits a cache;
2. split it at ops nothing can run beside (exact: see :func:`_solve`); for each part,
3. list schedules give an upper bound, the critical path and core-seconds a lower bound
   (:mod:`ilp.bounds`), raised for the MIP solvers by an LP over the modes
   (:mod:`ilp.lpbound`), and a local search over modes improves the list schedule where
   they do not meet; when they meet (always for chains, where nothing can overlap) the list
   schedule is optimal;
4. else an exact branch and bound (:mod:`ilp.branch`) improves the list schedule and proves
   it optimal within a node budget (or stops where it meets the lower bound);
5. otherwise solve the MIP without per-core assignment (with the capacity rows of the further
   kinds, such as a channel, from the start), turn its modes and start order into an exact
   schedule with the serial SGS, and accept it if it matches the MIP's makespan (no more
   units of a resource were busy than exist); else re-solve with capacity rows for the
   resource kinds that were over-subscribed (:mod:`ilp.formulation`).

Each part has its own wall-clock budget, shared by the search and the MIP; on timeout the
best feasible schedule is returned with status ``time_limit`` (or ``list_schedule`` when the
MIP found nothing better than the schedule it started from), never an exception.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from types import MappingProxyType
from typing import Final

import networkx as nx

from ilp.branch import branch_and_bound
from ilp.formulation import SOLVERS, check_solver, solve_ilp
from ilp.listsched import (
    Structure,
    improve,
    initial_schedule,
    lower_bound,
    makespan,
    serial_sgs,
    structure,
)
from ilp.lpbound import collapsed_lower_bound
from ilp.problem import PARALLEL, SINGLE, Problem, build_problem
from ilp.symmetry import canonical, symmetry
from ilp.usage import unit_ids, utilisation
from phaze_common.errors import ConfigError, SolverError

__all__ = [
    "ScheduleStatus",
    "Method",
    "Schedule",
    "solve_schedule",
    "DEFAULT_TIME_LIMIT_S",
    "DEFAULT_MIP_GAP",
    "DEFAULT_SEARCH_NODES",
    "HEURISTIC",
    "SCHEDULERS",
    "clear_caches",
]

logger = logging.getLogger(__name__)

DEFAULT_TIME_LIMIT_S: Final = 1.0  # wall seconds per independent part of a graph (sweep-sized)
DEFAULT_MIP_GAP: Final = 1e-4  # relative (HiGHS's default): far below the cost model's error
# Branch-and-bound nodes per part (dominated children are not counted): enough to prove the
# dense blocks' forward parts, and small enough to leave a MIP time within a 1 s limit
# where it does not.
DEFAULT_SEARCH_NODES: Final = 10_000
# The deterministic, MIP-free mode: the list schedule with local search, exact whenever it
# meets the lower bound (chains, and whatever the bound proves), else with its gap recorded.
HEURISTIC: Final = "list"
SCHEDULERS: Final = (*SOLVERS, HEURISTIC)
_TOL: Final = 1e-6  # relative slack when comparing makespans computed two ways


class ScheduleStatus(StrEnum):
    OPTIMAL = "optimal"  # proven optimal within the MIP gap
    TIME_LIMIT = "time_limit"  # the best feasible schedule found in time; gap says how good
    LIST_SCHEDULE = "list_schedule"  # no MIP solution in time: the list schedule is returned


class Method(StrEnum):
    EMPTY = "empty"  # nothing takes time
    BOUND = "bound"  # the list schedule meets the lower bound (chains and the like)
    SEARCH = "search"  # the exact branch and bound finished within its node budget
    LIST = "list"  # solver "list": the heuristic list schedule, no MIP (gap vs the bound)
    ILP = "ilp"  # MIP without per-core assignment
    ILP_CORES = "ilp_cores"  # MIP re-solved with per-core assignment


@dataclass(frozen=True, slots=True)
class Schedule:
    """An exact, feasible schedule of one layer pass.

    ``start_s``/``duration_s`` are per node; ``parallel`` holds the nodes run intra-op
    parallel; ``held[node]`` maps each resource kind the node holds to its units (a parallel
    op holds every unit of its kinds, and every core at all when parallel ops hold the chip);
    ``core_ids[node]`` names the units of the kinds it works on ("A3", "A0+B1", "A0-7"; ""
    for a node holding no unit).
    ``capacity`` is the units of every resource kind, of which ``core_kinds`` are the chip's
    compute units (the rest further kinds, such as channels). Utilisation is the share of a
    kind's units doing work (held by ops of that kind in their single mode's kinds): peak
    over time and average over the makespan, per kind in ``utilisation`` and
    ``peak_utilisation``. ``gap`` is (makespan - best lower bound) / makespan. ``wall_s`` is
    the time the solve took when first computed (schedules are cached by content).
    """

    makespan_s: float
    energy_j: float
    start_s: Mapping[Hashable, float]
    duration_s: Mapping[Hashable, float]
    parallel: frozenset[Hashable]
    held: Mapping[Hashable, Mapping[str, int]]
    core_ids: Mapping[Hashable, str]
    core_kinds: tuple[str, ...]
    capacity: Mapping[str, int]
    utilisation: Mapping[str, float]
    peak_utilisation: Mapping[str, float]
    solver: str
    status: ScheduleStatus
    method: Method
    gap: float
    wall_s: float
    time_limit_s: float

    def finish_s(self, node: Hashable) -> float:
        return self.start_s[node] + self.duration_s[node]


@dataclass(frozen=True, slots=True)
class _Result:
    modes: tuple[int, ...]
    start: tuple[float, ...]
    makespan_s: float
    status: ScheduleStatus
    method: Method
    gap: float
    solver: str
    wall_s: float
    lb_s: float  # proven lower bound on the makespan


def solve_schedule(
    graph: nx.DiGraph,
    units: Mapping[str, int],
    *,
    solver: str = "highs",
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    mip_gap: float = DEFAULT_MIP_GAP,
    parallel_blocks_all: bool = True,
    search_nodes: int = DEFAULT_SEARCH_NODES,
    resources: Mapping[str, int] | None = None,
) -> Schedule:
    """The minimum-makespan schedule of ``graph`` on the cores ``units`` (the chip's kinds
    of compute unit, each with its units) and the further ``resources``.

    Parameters
    ----------
    graph
        DAG whose nodes carry ``units`` (the units of each core kind they hold in their
        single mode, usually one; absent or empty for a node that holds no core, such as a
        network collective or a join), ``latency_s`` (single mode), ``parallel_latency_s``
        (split over every unit of its kinds; not needed without ``units``) and optionally
        ``energy_j``/``parallel_energy_j``.
    units
        The cores: kind -> units (e.g. ``{"A": 4, "B": 1}``), in a fixed order.
    solver
        "highs" (in-process, default), "cbc" (PuLP's bundled binary) or "gurobi" (when
        installed and licensed). If HiGHS fails, CBC is tried before giving up. "list"
        builds no MIP: the heuristic list schedule, deterministic and fast, proven optimal
        only where it meets the lower bound (its ``gap`` says how far it may be).
    time_limit_s, mip_gap
        Wall-clock budget of the solves of each independent part of the graph (the parts
        between ops that nothing can run beside), and the relative MIP gap.
    parallel_blocks_all
        True (default): an intra-op parallel op holds every core of the chip (it may still
        run beside an op holding only further resources, such as a collective on its
        channel). False: it holds only the units of its own kinds.
    search_nodes
        Node budget of the exact branch and bound (:mod:`ilp.branch`) that runs on every
        part the list schedule does not prove optimal, before any MIP (0: none). Within the
        budget it proves the optimum, deterministically; the MIP solvers also stop it at
        ``time_limit_s``.
    resources
        Further resource kinds beside the cores, with their units (e.g.
        ``{"channel:tp": 1}``). A node's optional ``demand`` attribute maps some of them to
        the units it holds while it runs, in either mode. The MIP keeps their capacity
        from its first solve (the cores' only once a solve over-subscribes them).

    Raises
    ------
    ConfigError
        Bad graph attributes, unit counts, solver name or settings (all listed at once).
    SolverError
        Every solver failed (not a timeout), with the solver's status.

    Examples
    --------
    >>> g = nx.DiGraph()
    >>> g.add_node("a", units={"A": 1}, latency_s=4.0, parallel_latency_s=1.0)
    >>> g.add_node("b", units={"B": 1}, latency_s=2.0, parallel_latency_s=2.0)
    >>> solve_schedule(g, {"A": 4, "B": 1}).makespan_s  # a on all 4 units of A, then b
    3.0
    """
    problems = []
    if not isinstance(time_limit_s, int | float) or not time_limit_s > 0:
        problems.append(f"solve_schedule: time_limit_s = {time_limit_s!r} must be > 0 seconds")
    if not isinstance(mip_gap, int | float) or not 0 <= mip_gap < 1:
        problems.append(f"solve_schedule: mip_gap = {mip_gap!r} must be in [0, 1)")
    if isinstance(search_nodes, bool) or not isinstance(search_nodes, int) or search_nodes < 0:
        problems.append(f"solve_schedule: search_nodes = {search_nodes!r} must be an integer >= 0")
    if problems:
        raise ConfigError("; ".join(problems))
    if solver != HEURISTIC:
        check_solver(solver)
    contracted = build_problem(
        graph, units, parallel_blocks_all=parallel_blocks_all, resources=resources
    )
    result = _solve(
        contracted.problem, solver, float(time_limit_s), float(mip_gap), int(search_nodes)
    )
    return _assemble(
        graph, contracted.nodes, contracted.zero, contracted.problem, result, time_limit_s
    )


_STATUS_RANK: Final = (
    ScheduleStatus.OPTIMAL,
    ScheduleStatus.TIME_LIMIT,
    ScheduleStatus.LIST_SCHEDULE,
)
_METHOD_RANK: Final = (
    Method.EMPTY,
    Method.BOUND,
    Method.SEARCH,
    Method.LIST,
    Method.ILP,
    Method.ILP_CORES,
)


@lru_cache(maxsize=16384)
def _solve(
    problem: Problem, solver: str, time_limit_s: float, mip_gap: float, search_nodes: int
) -> _Result:
    """Optimal (or best in time) modes and starts of a canonical problem, by content.

    An op comparable to every other op (a cut: nothing can run beside it) splits the problem
    exactly: it runs alone in its fastest mode, and the parts between cuts are scheduled
    independently, one after the other (each part's ops all follow the cut before it and
    precede the cut after it). Each part is solved, and cached, on its own.
    """
    t0 = time.perf_counter()
    n = problem.n
    st = structure(problem)
    cuts = [i for i in range(n) if (st.desc[i] | st.anc[i]).bit_count() == n - 1]
    if not cuts:
        return _solve_part(problem, solver, time_limit_s, mip_gap, search_nodes)
    modes = [SINGLE] * n
    start = [0.0] * n
    offset = lb = 0.0
    status, method, used = ScheduleStatus.OPTIMAL, Method.BOUND, "none"
    bounds = [*cuts, n]
    lo = 0
    for cut in bounds:
        if cut > lo:
            part = _solve_part(
                _sub_problem(problem, lo, cut), solver, time_limit_s, mip_gap, search_nodes
            )
            for k in range(cut - lo):
                modes[lo + k] = part.modes[k]
                start[lo + k] = offset + part.start[k]
            offset += part.makespan_s
            lb += part.lb_s
            status = max(status, part.status, key=_STATUS_RANK.index)
            method = max(method, part.method, key=_METHOD_RANK.index)
            used = part.solver if part.solver != "none" else used
        if cut < n:
            modes[cut] = PARALLEL if problem.can_parallel[cut] else SINGLE
            start[cut] = offset
            offset += problem.duration(cut, modes[cut])
            lb += problem.duration(cut, modes[cut])
        lo = cut + 1
    # Offsetting each part's times can round a touching pair into a one-ulp overlap;
    # re-deriving the starts with the SGS in the same order gives exact touching times.
    exact = serial_sgs(problem, modes, start)
    span = makespan(problem, modes, exact)
    gap = max(0.0, (span - lb) / span) if span > 0 else 0.0
    return _Result(
        tuple(modes),
        exact,
        span,
        status,
        method,
        gap,
        used,
        time.perf_counter() - t0,
        min(lb, span),
    )


def clear_caches() -> None:
    """Forget every cached solve, so the next ones run cold (benchmarks, tests)."""
    _solve.cache_clear()
    _solve_part.cache_clear()


def _sub_problem(problem: Problem, lo: int, hi: int) -> Problem:
    """Ops lo..hi-1 (a contiguous run in topological order) with the edges among them."""
    return Problem(
        kinds=problem.kinds,
        capacity=problem.capacity,
        core_kinds=problem.core_kinds,
        parallel_blocks_all=problem.parallel_blocks_all,
        need=(problem.need[SINGLE][lo:hi], problem.need[PARALLEL][lo:hi]),
        single_s=problem.single_s[lo:hi],
        parallel_s=problem.parallel_s[lo:hi],
        can_parallel=problem.can_parallel[lo:hi],
        edges=tuple((i - lo, j - lo) for i, j in problem.edges if lo <= i and j < hi),
    )


def _mip(
    problem: Problem,
    st: Structure,
    best: tuple,
    lb: float,
    solver: str,
    deadline: float,
    mip_gap: float,
    close: float,
) -> tuple[tuple, float, ScheduleStatus, Method, str]:
    """The MIP from the ``best`` (modes, start, makespan) schedule so far, by the wall-clock
    ``deadline``: capacity rows first, per-core assignment added for the kinds its schedules
    over-subscribe, until a schedule fits the cores. Returns (best, lower bound, status,
    method, the solver used)."""
    sym = symmetry(problem)
    # A further kind (a channel) is few rows and nearly always over-subscribed without them.
    assign = frozenset(problem.kinds[problem.core_kinds :])
    used = solver
    status = ScheduleStatus.LIST_SCHEDULE
    method = Method.ILP
    while True:
        if time.perf_counter() >= deadline:
            break
        method = (
            Method.ILP_CORES if assign & set(problem.kinds[: problem.core_kinds]) else Method.ILP
        )
        warm = canonical(sym, best[0], best[1])
        out, used = _solve_with_fallback(
            problem, st, (warm[0], warm[1], best[2]), lb, assign, solver, deadline, mip_gap
        )
        lb = max(lb, out.bound_s)
        if out.modes is None or out.start is None:
            break  # out of time before any solution: keep the list schedule
        s = serial_sgs(problem, out.modes, out.start)
        ms = makespan(problem, out.modes, s)
        if ms < best[2]:
            best = (out.modes, s, ms)
        status = ScheduleStatus.OPTIMAL if out.optimal else ScheduleStatus.TIME_LIMIT
        if ms <= out.objective_s * (1 + _TOL) or best[2] <= lb * (1 + close):
            break  # the solver's schedule fits the cores (or the bound proves best optimal)
        status = ScheduleStatus.TIME_LIMIT  # over-subscribed: not a schedule yet
        over = _oversubscribed(problem, out.modes, out.start) - assign
        if not over:
            over = frozenset(problem.kinds) - assign
        if not over:
            # Only solver tolerances can get here: keep the exact schedule, unproven.
            logger.warning(
                "%s: MIP makespan %.6g s but its schedule takes %.6g s with all capacity "
                "rows; returning the best schedule as time_limit",
                used,
                out.objective_s,
                ms,
            )
            break
        assign = assign | over
        logger.debug("re-solving with per-core assignment for %s", sorted(assign))
    return best, lb, status, method, used


@lru_cache(maxsize=16384)
def _solve_part(
    problem: Problem, solver: str, time_limit_s: float, mip_gap: float, search_nodes: int
) -> _Result:
    """Bound check, search, then the MIP with lazy per-core assignment (see the module
    docstring)."""
    t0 = time.perf_counter()
    if problem.n == 0:
        return _Result((), (), 0.0, ScheduleStatus.OPTIMAL, Method.EMPTY, 0.0, "none", 0.0, 0.0)
    st = structure(problem)
    lb = lower_bound(problem)
    close = max(_TOL, mip_gap)  # a schedule this close to a lower bound counts as optimal
    modes, start, ub = initial_schedule(problem, lb * (1 + close))
    if ub > lb * (1 + close) and solver != HEURISTIC:
        # Milliseconds to a few tenths of a second: worth it to spare the local search, a
        # search or a MIP, not in the sweeps' MIP-free mode, where the search's node budget
        # bounds the time. It comes before the local search, which it often makes needless.
        lb = max(lb, collapsed_lower_bound(problem, st, ub, close))
    if ub > lb * (1 + close):
        modes, start, ub = improve(problem, (modes, start, ub), lb * (1 + close))
    searched = False
    if ub > lb * (1 + close) and search_nodes > 0:
        # The solver modes may stop it at their wall-clock budget; "list" stays deterministic.
        deadline = None if solver == HEURISTIC else t0 + time_limit_s
        found = branch_and_bound(
            problem, st, (modes, start, ub), close, search_nodes, deadline, floor_s=lb
        )
        modes, start, ub = found.modes, found.start, found.makespan_s
        searched = True
        if found.proven:
            lb = max(lb, ub / (1 + close))
    if ub <= lb * (1 + close):
        return _partial(
            modes,
            start,
            ub,
            lb,
            ScheduleStatus.OPTIMAL,
            Method.SEARCH if searched else Method.BOUND,
            "search" if searched else "none",
            t0,
        )
    if solver == HEURISTIC:
        return _partial(
            modes, start, ub, lb, ScheduleStatus.LIST_SCHEDULE, Method.LIST, HEURISTIC, t0
        )
    if searched and time.perf_counter() - t0 >= time_limit_s:
        # The search used the whole budget: its best schedule, unproven, with its gap.
        return _partial(
            modes, start, ub, lb, ScheduleStatus.TIME_LIMIT, Method.SEARCH, "search", t0
        )
    best, lb, status, method, used = _mip(
        problem, st, (modes, start, ub), lb, solver, t0 + time_limit_s, mip_gap, close
    )
    if status == ScheduleStatus.OPTIMAL:
        lb = max(lb, best[2] * (1 - mip_gap))
    gap = max(0.0, (best[2] - lb) / best[2]) if best[2] > 0 else 0.0
    return _Result(
        best[0],
        best[1],
        best[2],
        status,
        method,
        gap,
        used,
        time.perf_counter() - t0,
        min(lb, best[2]),
    )


def _partial(
    modes: tuple[int, ...],
    start: tuple[float, ...],
    ub: float,
    lb: float,
    status: ScheduleStatus,
    method: Method,
    used: str,
    t0: float,
) -> _Result:
    """A part's result without a MIP: its gap against the best lower bound ``lb``."""
    gap = max(0.0, (ub - lb) / ub) if ub > 0 else 0.0
    return _Result(
        modes, start, ub, status, method, gap, used, time.perf_counter() - t0, min(lb, ub)
    )


def _solve_with_fallback(problem, st, best, lb, assign, solver, deadline, mip_gap):
    """One MIP solve; if HiGHS fails, retry once with CBC."""
    kwargs = dict(
        ub_s=best[2],
        lb_s=lb,
        assign=assign,
        warm=(best[0], best[1]),
        deadline=deadline,
        mip_gap=mip_gap,
    )
    try:
        return solve_ilp(problem, st, solver=solver, **kwargs), solver
    except SolverError as e:
        if solver != "highs":
            raise
        logger.warning("HiGHS failed (%s); falling back to CBC", e)
        return solve_ilp(problem, st, solver="cbc", **kwargs), "cbc (fallback from highs)"


def _oversubscribed(problem: Problem, modes, start) -> frozenset[str]:
    """Resource kinds with more units held at once than exist, by the MIP's times (overlaps
    shorter than a relative tolerance are ignored)."""
    tol = _TOL * max(
        (start[i] + problem.duration(i, modes[i]) for i in range(problem.n)), default=0
    )
    over = set()
    for k, r in enumerate(problem.kinds):
        events = []
        for i in range(problem.n):
            held = problem.need[modes[i]][i][k]
            # Split ops holding every unit are kept apart by the MIP's ordering rows.
            if held and (modes[i] == SINGLE or held < problem.capacity[k]):
                events.append((start[i] + tol, held))
                events.append((start[i] + problem.duration(i, modes[i]) - tol, -held))
        busy = 0
        for _, step in sorted(events, key=lambda e: (e[0], e[1])):
            busy += step
            if busy > problem.capacity[k]:
                over.add(r)
                break
    return frozenset(over)


def _assemble(
    graph: nx.DiGraph,
    nodes: tuple[Hashable, ...],
    zero: tuple[tuple[Hashable, int, tuple[Hashable, ...]], ...],
    problem: Problem,
    result: _Result,
    time_limit_s: float,
) -> Schedule:
    """Map an index-space result back onto the graph's nodes, with energy and resources."""
    start = {v: result.start[i] for i, v in enumerate(nodes)}
    duration = {v: problem.duration(i, result.modes[i]) for i, v in enumerate(nodes)}
    held = {v: problem.need[result.modes[i]][i] for i, v in enumerate(nodes)}
    own = {v: problem.need[SINGLE][i] for i, v in enumerate(nodes)}
    mode = {v: result.modes[i] for i, v in enumerate(nodes)}
    nothing = (0,) * len(problem.kinds)
    for v, m, preds in zero:  # in topological order: predecessors are already placed
        start[v] = max((start[p] + duration[p] for p in preds), default=0.0)
        duration[v] = 0.0
        held[v] = own[v] = nothing
        mode[v] = m
    attrs = graph.nodes
    energy = 0.0
    for v in graph.nodes:
        key = "parallel_energy_j" if mode[v] == PARALLEL else "energy_j"
        energy += float(attrs[v].get(key, attrs[v].get("energy_j", 0.0)))
    ordered = list(graph.nodes)
    ids = unit_ids(ordered, start, duration, mode, own, held, problem)
    util, peak = utilisation(ordered, start, duration, own, held, problem, result.makespan_s)
    kinds = problem.kinds
    return Schedule(
        makespan_s=result.makespan_s,
        energy_j=energy,
        start_s=MappingProxyType({v: start[v] for v in ordered}),
        duration_s=MappingProxyType({v: duration[v] for v in ordered}),
        parallel=frozenset(v for v in ordered if mode[v] == PARALLEL),
        held=MappingProxyType(
            {
                v: MappingProxyType({k: u for k, u in zip(kinds, held[v], strict=True) if u})
                for v in ordered
            }
        ),
        core_ids=MappingProxyType({v: ids[v] for v in ordered}),
        core_kinds=kinds[: problem.core_kinds],
        capacity=MappingProxyType(dict(zip(problem.kinds, problem.capacity, strict=True))),
        utilisation=MappingProxyType(dict(zip(problem.kinds, util, strict=True))),
        peak_utilisation=MappingProxyType(dict(zip(problem.kinds, peak, strict=True))),
        solver=result.solver,
        status=result.status,
        method=result.method,
        gap=result.gap,
        wall_s=result.wall_s,
        time_limit_s=float(time_limit_s),
    )
