"""The mixed-integer program of docs/scheduling.md, built and solved through PuLP.

Variables (times scaled so the heuristic makespan is :data:`_SCALE`, which keeps every
coefficient well inside the solvers' tolerances): makespan ``T``; start ``t_i``; ``y_i`` = 1
if op i runs intra-op parallel (only where that mode is not dominated); ``x_ij`` = 1 if i
finishes before j starts, only for incomparable pairs that can compete for resources
(comparable pairs are fixed by the DAG, so they get no variable); ``z_ic`` = 1 if op i holds
unit c of a resource kind whose capacity the previous solve exceeded.

Resources are the problem's data (:class:`ilp.problem.Problem`): kinds with capacities and
each op's units per mode. The model relies on one property :func:`ilp.problem.unit_demand`
guarantees: per kind, an op's split mode holds either the units of its single mode or every
unit of the kind (a full holder runs beside nothing else that holds the kind, by the
``x_ij + x_ji >= y_i`` rows). A split op holds every core but no more of a further kind (a
communication channel) than its single mode does.

Constraints: ``T >= t_i + p_i`` at sinks; ``t_i + p_i <= t_j`` on (transitively reduced)
edges; ``x_ij + x_ji <= 1``; big-M ordering ``t_i + p_i - M_ij (1 - x_ij) <= t_j``;
``x_ij + x_ji >= y_i`` when i's parallel mode conflicts with j; and with assignment
``sum_c z_ic = u_i (1 - y_i)`` (u_i the units op i holds single; without the ``y_i`` term
when its split mode keeps them) and ``x_ij + x_ji >= z_ic + z_jc - 1``. The usual
transitivity rows ``x_ik >= x_ij + x_jk - 1`` are left out: the big-M rows already imply
them for the times (``x_ij = x_jk = 1`` gives ``t_i + p_i <= t_j <= t_k``), and on
attention blocks they made HiGHS much slower. Tightening, all valid for some optimal
schedule:

* ``T <= UB`` (a list schedule's makespan), so ``t_i + p_i <= UB - tail_i`` and ``t_j >=
  head_j`` give ``M_ij = UB - tail_i - head_j`` instead of the sum of all latencies;
* units are interchangeable: the ops of a kind, in the warm start's start order, may only
  use the units the ops up to them could first use (relabel units by first use);
* interchangeable ops and branches start in index order (:mod:`ilp.symmetry`);
* unit-seconds per kind and, when parallel ops hold every core, path-plus-parallel-time
  inequalities, linear in the modes (see ``_work_cuts`` and ``_path_cuts``): without them
  the LP bound ignores that a parallel op cannot overlap any core-holding op;
* an op holding several kinds (a GEMM with a fused epilogue) gets units of each kind of its own,
  which is exactly "at most the capacity of each kind busy at any instant" (interval
  graphs are perfect, so such a schedule always has a per-unit assignment).

References
----------
Phaze reference, Solver/ilp.py (msr-fiddle/phaze) for the original model.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

import pulp

from ilp._native import native_stdout_silenced
from ilp.listsched import Structure
from ilp.problem import PARALLEL, SINGLE, Problem
from ilp.symmetry import symmetry
from phaze_common.errors import ConfigError, SolverError, unknown_name

__all__ = [
    "MAX_ANTICHAINS",
    "SOLVERS",
    "IlpOutcome",
    "check_solver",
    "make_solver",
    "solve_ilp",
]

logger = logging.getLogger(__name__)

SOLVERS: Final = ("highs", "cbc", "gurobi")
_SCALE: Final = 100.0  # the heuristic makespan in model units (dimensionless)
_SLACK: Final = 1e-7  # model units added to upper bounds so the warm start stays feasible
MAX_ANTICHAINS: Final = 400  # capacity as antichain rows up to this many, else z variables
_MAX_PATHS: Final = 256  # path cuts are added only when the DAG has at most this many paths
_MIN_LIMIT_S: Final = 1e-3  # the least time limit handed to a solver


class _OutOfTime(Exception):
    """The deadline passed while the model was being built."""


@dataclass(frozen=True, slots=True)
class IlpOutcome:
    """What one solve returned, in seconds. ``start``/``modes`` are None without a solution.

    ``bound_s`` is a proven lower bound on the makespan of this model (0 when unknown).
    """

    optimal: bool
    modes: tuple[int, ...] | None
    start: tuple[float, ...] | None
    objective_s: float
    bound_s: float
    solver_status: str


@lru_cache(maxsize=1)
def _gurobi_problem() -> str:
    """Empty if Gurobi can solve here, else why not (checked once: import and license)."""
    try:
        import gurobipy
    except ImportError:
        return "gurobipy is not installed (pip install gurobipy)"
    try:
        with gurobipy.Env(params={"OutputFlag": 0}):
            pass
    except gurobipy.GurobiError as e:
        return f"Gurobi has no usable license ({e})"
    return ""


def check_solver(name: str) -> None:
    """Raise a ConfigError unless ``name`` is a known solver that can run here."""
    if name not in SOLVERS:
        raise unknown_name("solver", name, SOLVERS)
    if name == "highs" and not pulp.HiGHS(msg=False).available():
        raise ConfigError(
            "solver 'highs' needs highspy (pip install highspy), or pass solver='cbc'"
        )
    if name == "cbc" and not make_solver("cbc", 1.0, 0.0).available():
        raise ConfigError("solver 'cbc' needs PuLP's bundled CBC binary (reinstall pulp)")
    if name == "gurobi" and (why := _gurobi_problem()):
        raise ConfigError(f"solver 'gurobi' cannot run: {why}; use solver='highs' or 'cbc'")


@lru_cache(maxsize=1)
def _highs_class() -> type:
    """pulp.HiGHS that passes the variables' initial values to HiGHS as a MIP start and,
    given a ``deadline``, sets HiGHS's time limit to what is left of it when HiGHS starts
    (PuLP's copy of a large model into HiGHS takes a tenth of a second or more); without
    presolve, which HiGHS gets wrong on some of these models."""
    import highspy

    class _WarmHiGHS(pulp.HiGHS):
        deadline: float | None = None

        def callSolver(self, lp):
            variables = lp.variables()
            if all(v.varValue is not None for v in variables):
                sol = highspy.HighsSolution()
                sol.col_value = [float(v.varValue) for v in variables]
                sol.value_valid = True
                lp.solverModel.setSolution(sol)
            if self.deadline is not None:
                left = max(self.deadline - time.perf_counter(), _MIN_LIMIT_S)
                lp.solverModel.setOptionValue("time_limit", left)
            # HiGHS's MIP presolve (1.16.0 here) can report a suboptimal point as optimal on
            # these models, a collective on a channel beside a split GEMM among them
            # (tests/test_ilp_channels.py); without presolve the same models solve right.
            lp.solverModel.setOptionValue("presolve", "off")
            lp.solverModel.run()

    return _WarmHiGHS


class _Model:
    """The PuLP problem for one (problem, upper bound, resource kinds with assignment)."""

    def __init__(
        self,
        problem: Problem,
        st: Structure,
        ub_s: float,
        lb_s: float,
        assign: frozenset[str],
        warm_modes: Sequence[int],
        warm_start: Sequence[float],
        deadline: float | None = None,
    ) -> None:
        self.problem = problem
        self.scale = _SCALE / ub_s
        n = problem.n
        sc = self.scale
        ub = _SCALE + _SLACK
        lp = pulp.LpProblem("layer_schedule", pulp.LpMinimize)
        self.lp = lp
        single = [problem.single_s[i] * sc for i in range(n)]
        gain = [(problem.parallel_s[i] - problem.single_s[i]) * sc for i in range(n)]
        dmin = [problem.min_duration(i) * sc for i in range(n)]
        head = [h * sc for h in st.head]
        tail = [t * sc for t in st.tail]
        var = lp.add_variable
        self.T = var("T", max(0.0, min(lb_s * sc, _SCALE) - _SLACK), ub)
        self.t = [var(f"t{i}", head[i], max(head[i], ub - tail[i] - dmin[i])) for i in range(n)]
        self.y = {i: var(f"y{i}", 0, 1, pulp.LpBinary) for i in range(n) if problem.can_parallel[i]}
        lp += pulp.LpAffineExpression([(self.T, 1.0)])

        def end(i: int) -> list[tuple[pulp.LpVariable, float]]:
            terms = [(self.t[i], 1.0)]
            if i in self.y:
                terms.append((self.y[i], gain[i]))
            return terms

        rows = [0]

        def add(terms: list[tuple[pulp.LpVariable, float]], sense: int, rhs: float) -> None:
            lp.addConstraint(pulp.LpConstraint(pulp.LpAffineExpression(terms), sense, rhs=rhs))
            rows[0] += 1
            if deadline is not None and not rows[0] % 256 and time.perf_counter() > deadline:
                raise _OutOfTime  # large parts' models take a tenth of a second or more

        le, ge, eq = pulp.LpConstraintLE, pulp.LpConstraintGE, pulp.LpConstraintEQ
        for i in range(n):
            if not st.succs[i]:
                add([*end(i), (self.T, -1.0)], le, -single[i])
            for j in st.succs[i]:
                add([*end(i), (self.t[j], -1.0)], le, -single[i])

        # Which incomparable pairs need ordering variables, and why.
        blocks: dict[tuple[int, int], list[int]] = {}
        share: dict[str, list[tuple[int, int]]] = {r: [] for r in assign}
        for i in range(n):
            for j in range(i + 1, n):
                if st.comparable(i, j) or not problem.holds(i) or not problem.holds(j):
                    continue
                why = [k for k, o in ((i, j), (j, i)) if k in self.y and _conflict(problem, k, o)]
                if why:
                    blocks[i, j] = why
                for r in assign:
                    k_r = problem.kinds.index(r)
                    if problem.need[SINGLE][i][k_r] and problem.need[SINGLE][j][k_r]:
                        share[r].append((i, j))
        pairs = sorted(set(blocks) | {p for ps in share.values() for p in ps})
        self.x: dict[tuple[int, int], pulp.LpVariable] = {}
        for i, j in pairs:
            self.x[i, j] = var(f"x{i}_{j}", 0, 1, pulp.LpBinary)
            self.x[j, i] = var(f"x{j}_{i}", 0, 1, pulp.LpBinary)
            add([(self.x[i, j], 1.0), (self.x[j, i], 1.0)], le, 1.0)
            for a, b in ((i, j), (j, i)):
                big_m = max(0.0, ub - tail[a] - head[b])
                add([*end(a), (self.t[b], -1.0), (self.x[a, b], big_m)], le, big_m - single[a])
            for k in blocks.get((i, j), ()):
                add([(self.x[i, j], 1.0), (self.x[j, i], 1.0), (self.y[k], -1.0)], ge, 0.0)
        self._work_cuts(head, tail, single, gain, add, ge)
        self._path_cuts(st, single, gain, add, ge)
        for a, b in symmetry(problem).orderings():
            add([(self.t[a], 1.0), (self.t[b], -1.0)], le, 0.0)

        self._assignment_rows(st, assign, share, warm_start, add, ge, eq)
        self._warm(warm_modes, warm_start, assign)

    def _assignment_rows(self, st, assign, share, warm_start, add, ge, eq) -> None:
        """Per-unit assignment of the kinds in ``assign`` (``z``: op i on unit c), or, where
        at most ``cap`` units' holders can overlap by antichains, rows that keep them apart;
        ``share`` lists each kind's incomparable pairs of holders."""
        problem, var = self.problem, self.lp.add_variable
        n = problem.n
        self.z: dict[tuple[str, int, int], pulp.LpVariable] = {}
        order = sorted(range(n), key=lambda i: (warm_start[i], i))
        for r in sorted(assign):
            k_r = problem.kinds.index(r)
            cap = problem.capacity[k_r]
            units = [u[k_r] for u in problem.need[SINGLE]]
            users = [i for i in order if units[i]]
            groups = _antichains(st, sorted(users), units, cap)
            if groups is not None:
                # No ops holding more than cap units may all overlap (intervals that
                # pairwise overlap share an instant, so this is exactly the capacity rule).
                for group in groups:
                    terms = [(self.x[a, b], 1.0) for a in group for b in group if a != b]
                    add(terms, ge, 1.0)
                continue
            first_use = 0
            for i in users:
                first_use += units[i]
                for c in range(min(cap, first_use)):
                    self.z[r, i, c] = var(f"z{r}{i}_{c}", 0, 1, pulp.LpBinary)
                terms = [(self.z[r, i, c], 1.0) for c in range(min(cap, first_use))]
                if i in self.y and problem.need[PARALLEL][i][k_r] == cap:
                    terms.append((self.y[i], float(units[i])))
                add(terms, eq, float(units[i]))
            for i, j in share[r]:
                for c in range(cap):
                    if (r, i, c) in self.z and (r, j, c) in self.z:
                        add(
                            [
                                (self.x[i, j], 1.0),
                                (self.x[j, i], 1.0),
                                (self.z[r, i, c], -1.0),
                                (self.z[r, j, c], -1.0),
                            ],
                            ge,
                            -1.0,
                        )

    def _work_cuts(self, head, tail, single, gain, add, ge) -> None:
        """Unit-seconds per kind, as valid inequalities linear in the modes:
        ``T >= min head + sum_i (unit-seconds of i in its mode) / units + min tail``.

        All ops holding units of a kind run between the least head and the makespan less
        the least tail, and the kind gives ``units`` unit-seconds per second. Under
        ``parallel_blocks_all`` a parallel op holds every core, so this charges its full
        latency to every core kind: the LP then sees that parallel ops cannot overlap
        single-core work, which the big-M rows alone hide from it. On a channel (one unit)
        it charges every collective's time.
        """
        p = self.problem
        for k, cap in enumerate(p.capacity):
            terms: list[tuple[pulp.LpVariable, float]] = []
            const = 0.0
            first = last = float("inf")
            for i in range(p.n):
                one = p.need[SINGLE][i][k] / cap
                par = p.need[PARALLEL][i][k] / cap if i in self.y else one
                if not (one or par):
                    continue
                first, last = min(first, head[i]), min(last, tail[i])
                const += single[i] * one
                if i in self.y:
                    terms.append((self.y[i], (single[i] + gain[i]) * par - single[i] * one))
            if const or terms:
                add([(self.T, 1.0), *((v, -c) for v, c in terms)], ge, const + first + last)

    def _path_cuts(self, st: Structure, single, gain, add, ge) -> None:
        """Under ``parallel_blocks_all``, for each source-to-sink path P:
        ``T >= sum_{i in P} p_i + sum_{j not in P} L_j y_j`` over ops holding a core.

        The ops of a path run one after another, and a parallel op runs beside nothing that
        holds a core, so their busy intervals are pairwise disjoint (an op holding no core,
        such as a collective on its channel, may run beside a split op: it counts for
        nothing). Added for up to :data:`_MAX_PATHS` paths.
        """
        p = self.problem
        if not p.parallel_blocks_all or not self.y:
            return
        core = [p.holds_core(i) for i in range(p.n)]
        paths: list[list[int]] = []

        def walk(i: int, path: list[int]) -> None:
            if len(paths) > _MAX_PATHS:
                return
            path.append(i)
            if not st.succs[i]:
                paths.append(list(path))
            for j in st.succs[i]:
                walk(j, path)
            path.pop()

        for i in range(p.n):
            if not st.preds[i]:
                walk(i, [])
        if len(paths) > _MAX_PATHS:
            return
        for path in paths:
            on = set(path)
            terms: list[tuple[pulp.LpVariable, float]] = []
            const = 0.0
            for i in path:
                if core[i]:
                    const += single[i]
                    if i in self.y:
                        terms.append((self.y[i], gain[i]))
            for j, y in self.y.items():
                if j not in on:
                    terms.append((y, single[j] + gain[j]))
            add([(self.T, 1.0), *((v, -c) for v, c in terms)], ge, const)

    def _warm(self, modes: Sequence[int], start: Sequence[float], assign: frozenset[str]) -> None:
        """Set the list schedule as every variable's initial value (a feasible MIP start)."""
        p, sc = self.problem, self.scale
        finish = [start[i] + p.duration(i, modes[i]) for i in range(p.n)]
        self.T.setInitialValue(max(finish, default=0.0) * sc)
        for i in range(p.n):
            self.t[i].setInitialValue(start[i] * sc)
            if i in self.y:
                self.y[i].setInitialValue(float(modes[i] == PARALLEL))
        for (i, j), var in self.x.items():
            var.setInitialValue(float(finish[i] <= start[j]))
        for r in sorted(assign):
            k_r = p.kinds.index(r)
            busy_until: list[float] = []
            for i in sorted(range(p.n), key=lambda i: (start[i], i)):
                held = p.need[modes[i]][i][k_r]
                if not p.need[SINGLE][i][k_r] or (modes[i] == PARALLEL and held == p.capacity[k_r]):
                    continue
                for _ in range(held):
                    c = next(
                        (c for c, f in enumerate(busy_until) if f <= start[i]), len(busy_until)
                    )
                    if c == len(busy_until):
                        busy_until.append(finish[i])
                    busy_until[c] = finish[i]
                    var = self.z.get((r, i, c))
                    if var is not None:
                        var.setInitialValue(1.0)
        for var in self.z.values():
            if var.varValue is None:
                var.setInitialValue(0.0)

    def values(self) -> tuple[tuple[int, ...], tuple[float, ...], float]:
        modes = tuple(
            PARALLEL if i in self.y and (self.y[i].varValue or 0.0) > 0.5 else SINGLE
            for i in range(self.problem.n)
        )
        start = tuple(max(0.0, (v.varValue or 0.0) / self.scale) for v in self.t)
        return modes, start, (self.T.varValue or 0.0) / self.scale


def _antichains(
    st: Structure, users: list[int], units: Sequence[int], cap: int
) -> list[tuple[int, ...]] | None:
    """All sets of pairwise incomparable ops among ``users`` that hold more than ``cap``
    ``units`` together and no fewer would (each op added in index order takes the total
    over ``cap``), or None if there are more than :data:`MAX_ANTICHAINS` (then per-unit
    assignment variables are used instead)."""
    out: list[tuple[int, ...]] = []

    def grow(chosen: tuple[int, ...], total: int, rest: list[int]) -> bool:
        if total > cap:
            out.append(chosen)
            return len(out) <= MAX_ANTICHAINS
        left = sum(units[j] for j in rest)
        for i in rest:
            if total + left <= cap:
                break
            left -= units[i]
            nxt = [j for j in rest if j > i and not st.comparable(i, j)]
            if not grow((*chosen, i), total + units[i], nxt):
                return False
        return True

    return out if grow((), 0, users) else None


def _conflict(problem: Problem, i: int, j: int) -> bool:
    """Can op i in parallel mode not run beside op j in its single mode (together they
    hold more than some kind's units)?"""
    return any(
        a + b > cap
        for a, b, cap in zip(
            problem.need[PARALLEL][i], problem.need[SINGLE][j], problem.capacity, strict=True
        )
    )


def make_solver(
    name: str, time_limit_s: float, mip_gap: float, deadline: float | None = None
) -> pulp.LpSolver:
    limit = max(time_limit_s, _MIN_LIMIT_S)
    if name == "highs":
        highs = _highs_class()(msg=False, timeLimit=limit, gapRel=mip_gap, threads=1)
        highs.deadline = deadline
        return highs
    if name == "cbc":
        with warnings.catch_warnings():  # PuLP 3 deprecates its bundled CBC, still shipped
            warnings.simplefilter("ignore", DeprecationWarning)
            return pulp.PULP_CBC_CMD(
                msg=False, timeLimit=limit, gapRel=mip_gap, warmStart=True, threads=1
            )
    return pulp.GUROBI(msg=False, timeLimit=limit, gapRel=mip_gap, warmStart=True, Threads=1)


def _outcome(name: str, model: _Model, mip_gap: float) -> IlpOutcome:
    lp = model.lp
    if name == "highs":
        import highspy

        h = lp.solverModel
        status = h.getModelStatus()
        info = h.getInfo()
        text = h.modelStatusToString(status)
        has = info.primal_solution_status == 2  # kSolutionStatusFeasible
        optimal = status == highspy.HighsModelStatus.kOptimal
        bound = info.mip_dual_bound if info.mip_dual_bound > -1e30 else 0.0
    elif name == "gurobi":
        m = lp.solverModel
        text = f"gurobi status {m.Status}"
        has = m.SolCount >= 1
        optimal = m.Status == 2  # GRB.OPTIMAL
        bound = float(m.ObjBound) if has else 0.0
    else:
        text = pulp.LpSolution[lp.sol_status]
        has = lp.sol_status in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible)
        optimal = lp.sol_status == pulp.LpSolutionOptimal
        bound = (model.T.varValue or 0.0) * (1.0 - mip_gap) if optimal else 0.0
    if not has:
        if "nfeasible" in text:
            raise SolverError(f"{name}: the schedule MIP has no solution ({text})", text)
        return IlpOutcome(False, None, None, float("inf"), bound / model.scale, text)
    modes, start, objective = model.values()
    return IlpOutcome(optimal, modes, start, objective, bound / model.scale, text)


def solve_ilp(
    problem: Problem,
    st: Structure,
    *,
    ub_s: float,
    lb_s: float,
    assign: frozenset[str],
    warm: tuple[Sequence[int], Sequence[float]],
    solver: str,
    deadline: float,
    mip_gap: float,
) -> IlpOutcome:
    """Build and solve the model once, stopping at ``deadline`` (a ``time.perf_counter()``
    value; building the model counts against it).

    Raises
    ------
    SolverError
        The solver failed or called the model infeasible (it never is: the warm start is a
        feasible point), with the solver's status.
    """
    try:
        model = _Model(problem, st, ub_s, lb_s, assign, warm[0], warm[1], deadline)
        left = deadline - time.perf_counter()  # building the model counts too
        if left <= 0:
            raise _OutOfTime
    except _OutOfTime:
        return IlpOutcome(False, None, None, float("inf"), 0.0, "time limit while building")
    try:
        with native_stdout_silenced():
            model.lp.solve(make_solver(solver, left, mip_gap, deadline))
    except pulp.PulpSolverError as e:
        raise SolverError(f"{solver}: {e}", "error") from e
    return _outcome(solver, model, mip_gap)
