"""solve_schedule against an independent brute force and an independent schedule checker.

The brute force enumerates every precedence-feasible order x every mode of every op (also
dominated ones), placing each op at its earliest feasible start (serial schedule
generation, which reaches an optimal schedule over all orders; Kolisch, EJOR 1996), pruning
branches already no better than the best found. It shares no code with ``ilp``.
"""

from __future__ import annotations

import math
import time

import networkx as nx
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from ilp import DEFAULT_MIP_GAP, Method, ScheduleStatus, makespan_lower_bound, solve_schedule
from ilp.branch import _tail_ops, branch_and_bound
from ilp.listsched import (
    _order,
    _parallel_sgs,
    _place,
    improve,
    initial_schedule,
    justify,
    makespan,
    serial_sgs,
    structure,
)
from ilp.lpbound import collapsed_lower_bound
from ilp.problem import PARALLEL, SINGLE, build_problem, demand
from phaze.errors import ConfigError

CORES = ("TC", "VC", "TCandVC", "Nop")
US = 1e-6  # latencies in microseconds, to exercise the solver's scaling


def _holds(core, parallel, num_tc, num_vc, blocks_all):
    if core == "Nop":
        return 0, 0
    if not parallel:
        return int(core in ("TC", "TCandVC")), int(core in ("VC", "TCandVC"))
    if blocks_all or core == "TCandVC":
        return num_tc, num_vc
    return (num_tc, 0) if core == "TC" else (0, num_vc)


def _usage_ok(placed, start, dur, need, cap):
    """Do ops in ``placed`` (start, dur, tc, vc) leave room for ``need`` on [start, start+dur)?"""
    if dur == 0:
        return True
    points = [start] + [s for s, _, _, _ in placed if start < s < start + dur]
    for p in points:
        tc = need[0] + sum(t for s, d, t, _ in placed if s <= p < s + d)
        vc = need[1] + sum(v for s, d, _, v in placed if s <= p < s + d)
        if tc > cap[0] or vc > cap[1]:
            return False
    return True


def brute_force(g, num_tc, num_vc, blocks_all=True):
    """Optimal makespan by exhaustive search over orders x modes (with bound pruning)."""
    nodes = list(g.nodes)
    cap = (num_tc, num_vc)
    modes = {v: ((False,) if g.nodes[v]["core"] == "Nop" else (False, True)) for v in nodes}
    best = [math.inf]

    def dur(v, par):
        a = g.nodes[v]
        return a["parallel_latency_s"] if par else a["latency_s"]

    def rec(done, placed, finish, span):
        if span >= best[0] * (1 - 1e-12) and len(done) < len(nodes):
            return
        if len(done) == len(nodes):
            best[0] = min(best[0], span)
            return
        for v in nodes:
            if v in done or any(p not in done for p in g.predecessors(v)):
                continue
            est = max((finish[p] for p in g.predecessors(v)), default=0.0)
            for par in modes[v]:
                d = dur(v, par)
                need = _holds(g.nodes[v]["core"], par, num_tc, num_vc, blocks_all)
                cands = sorted({est} | {s + dd for s, dd, _, _ in placed if s + dd > est})
                c = next(c for c in cands if _usage_ok(placed, c, d, need, cap))
                rec(
                    done | {v},
                    placed + [(c, d, *need)],
                    {**finish, v: c + d},
                    max(span, c + d),
                )

    rec(frozenset(), [], {}, 0.0)
    return best[0] if nodes else 0.0


def check_schedule(g, s, num_tc, num_vc, blocks_all=True):
    """Independent checks: modes and durations, precedence, cores at every instant,
    per-core labels, makespan, energy."""
    eps = 1e-12
    assert set(s.start_s) == set(g.nodes)
    energy = 0.0
    intervals = []
    for v, a in g.nodes(data=True):
        par = v in s.parallel
        d = s.duration_s[v]
        assert s.start_s[v] >= 0
        if a["core"] == "Nop":
            assert not par and d == a.get("latency_s", 0.0)
        else:
            assert d == (a["parallel_latency_s"] if par else a["latency_s"]) or d == 0.0
        if d > 0:
            need = _holds(a["core"], par, num_tc, num_vc, blocks_all)
            assert s.cores[v] == need, (v, s.cores[v], need)
            intervals.append((s.start_s[v], s.start_s[v] + d, need, s.core_ids[v], par))
        energy += a.get("parallel_energy_j" if par else "energy_j", 0.0)
    for u, v in g.edges:
        assert s.start_s[u] + s.duration_s[u] <= s.start_s[v] + eps, (u, v)
    for t0, _, _, _, _ in intervals:
        tc = sum(n[0] for a, b, n, _, _ in intervals if a <= t0 < b)
        vc = sum(n[1] for a, b, n, _, _ in intervals if a <= t0 < b)
        assert tc <= num_tc and vc <= num_vc, (t0, tc, vc)
    singles = [(a, b, set(lbl.split("+"))) for a, b, _, lbl, par in intervals if not par and lbl]
    for k, (a, b, lab) in enumerate(singles):
        for a2, b2, lab2 in singles[k + 1 :]:
            if lab & lab2:
                assert b <= a2 + eps or b2 <= a + eps, (lab, lab2)
    ends = [s.start_s[v] + s.duration_s[v] for v in g.nodes]
    assert s.makespan_s == pytest.approx(max(ends, default=0.0), rel=1e-12, abs=1e-15)
    assert s.energy_j == pytest.approx(energy, rel=1e-9, abs=1e-15)
    for x in (s.tc_utilisation, s.vc_utilisation, s.tc_peak_utilisation, s.vc_peak_utilisation):
        assert 0.0 <= x <= 1.0 + 1e-9


@st.composite
def dags(draw, max_ops=6):
    n = draw(st.integers(1, max_ops))
    g = nx.DiGraph()
    for i in range(n):
        core = draw(st.sampled_from(CORES))
        lat = draw(st.integers(0 if core == "Nop" else 1, 9)) * US
        attrs = {"core": core, "latency_s": lat, "energy_j": float(i + 1)}
        if core != "Nop":
            attrs["parallel_latency_s"] = draw(st.integers(1, 9)) * US
            attrs["parallel_energy_j"] = float(10 * (i + 1))
        g.add_node(f"op{i}", **attrs)
    for i in range(n):
        for j in range(i + 1, n):
            if draw(st.booleans()) and draw(st.booleans()):
                g.add_edge(f"op{i}", f"op{j}")
    return g


def _run(g, num_tc, num_vc, blocks_all, **kw):
    s = solve_schedule(g, num_tc, num_vc, parallel_blocks_all=blocks_all, time_limit_s=60.0, **kw)
    check_schedule(g, s, num_tc, num_vc, blocks_all)
    assert s.status == ScheduleStatus.OPTIMAL
    best = brute_force(g, num_tc, num_vc, blocks_all)
    _assert_optimal(s.makespan_s, best)
    return s


def _assert_optimal(makespan, best):
    """Feasible schedules cannot beat the optimum; the solver stops within its MIP gap."""
    assert best * (1 - 1e-9) <= makespan <= best * (1 + DEFAULT_MIP_GAP) + 1e-15


@settings(max_examples=120, deadline=None)
@given(dags(), st.integers(1, 4), st.integers(1, 4), st.booleans())
def test_makespan_equals_brute_force(g, num_tc, num_vc, blocks_all):
    _run(g, num_tc, num_vc, blocks_all)


@pytest.mark.slow
@settings(max_examples=600, deadline=None)
@given(dags(max_ops=7), st.integers(1, 4), st.integers(1, 4), st.booleans())
def test_makespan_equals_brute_force_bigger(g, num_tc, num_vc, blocks_all):
    _run(g, num_tc, num_vc, blocks_all)


@settings(max_examples=60, deadline=None)
@given(dags(), st.integers(1, 4), st.integers(1, 4), st.booleans())
def test_mip_alone_equals_brute_force(g, num_tc, num_vc, blocks_all):
    """Without the branch and bound, every part the bounds leave open goes to the MIP."""
    _run(g, num_tc, num_vc, blocks_all, search_nodes=0)


def _graph(spec, edges=()):
    g = nx.DiGraph()
    for name, core, lat, par in spec:
        g.add_node(name, core=core, latency_s=lat, parallel_latency_s=par)
    g.add_edges_from(edges)
    return g


def test_oversubscribed_cores_need_assignment():
    """Four independent single-core TC ops (parallel no faster) on 2 cores: two rounds."""
    g = _graph([(f"m{i}", "TC", 3.0, 3.0) for i in range(4)])
    s = solve_schedule(g, 2, 1)
    check_schedule(g, s, 2, 1)
    assert s.makespan_s == 6.0
    assert s.tc_peak_utilisation == 1.0 and s.vc_peak_utilisation == 0.0


def test_parallel_blocks_everything_by_default():
    """A parallel TC op may overlap a VC op only when parallel ops do not block all cores."""
    g = _graph([("mm", "TC", 8.0, 2.0), ("gelu", "VC", 2.0, 2.0)])
    assert solve_schedule(g, 4, 1).makespan_s == 4.0
    assert solve_schedule(g, 4, 1, parallel_blocks_all=False).makespan_s == 2.0


def test_chain_fast_path_takes_fastest_modes():
    spec = [("a", "TC", 4.0, 1.0), ("b", "VC", 1.0, 3.0), ("c", "TCandVC", 5.0, 2.5)]
    g = _graph(spec, [("a", "b"), ("b", "c")])
    s = solve_schedule(g, 4, 4)
    assert s.method == Method.BOUND and s.makespan_s == 1.0 + 1.0 + 2.5
    assert s.parallel == {"a", "c"} and s.gap == 0.0


def test_nop_latency_delays_successors_and_zero_nops_contract():
    g = _graph([("mm", "TC", 2.0, 2.0), ("rest", "VC", 1.0, 1.0)])
    g.add_node("allreduce", core="Nop", latency_s=5.0)
    g.add_node("join", core="Nop", latency_s=0.0)
    g.add_edges_from([("mm", "allreduce"), ("allreduce", "join"), ("join", "rest")])
    s = solve_schedule(g, 1, 1)
    check_schedule(g, s, 1, 1)
    assert s.start_s["join"] == 7.0 and s.start_s["rest"] == 7.0 and s.makespan_s == 8.0
    assert s.cores["allreduce"] == (0, 0) and s.core_ids["allreduce"] == ""


def test_empty_graph_and_results_are_read_only():
    s = solve_schedule(nx.DiGraph(), 1, 1)
    assert s.makespan_s == 0.0 and s.method == Method.EMPTY
    g = _graph([("a", "TC", 1.0, 1.0)])
    s = solve_schedule(g, 1, 1)
    with pytest.raises(TypeError):
        s.start_s["a"] = 5.0  # type: ignore[index]


def test_cbc_agrees_with_highs():
    g = _graph(
        [
            ("q", "TC", 4.0, 1.5),
            ("k", "TC", 4.0, 1.5),
            ("v", "TC", 4.0, 1.5),
            ("s", "VC", 1.0, 0.5),
        ],
        [("q", "s"), ("k", "s")],
    )
    a = solve_schedule(g, 2, 1, solver="highs", search_nodes=0)
    b = solve_schedule(g, 2, 1, solver="cbc", search_nodes=0)
    check_schedule(g, b, 2, 1)
    assert b.solver == "cbc" or b.method == Method.BOUND
    assert a.makespan_s == pytest.approx(b.makespan_s, rel=2 * DEFAULT_MIP_GAP)


@example(0.0)
@given(st.floats(1e-3, 1e3))
def test_scaling_all_latencies_scales_makespan(factor):
    base = _graph(
        [
            ("a", "TC", 3.0, 1.0),
            ("b", "TC", 2.0, 1.0),
            ("c", "VC", 2.0, 1.0),
            ("d", "TCandVC", 1.0, 0.4),
        ],
        [("a", "d"), ("c", "d")],
    )
    ref = solve_schedule(base, 2, 1).makespan_s
    g = nx.DiGraph(base)
    for _, attrs in g.nodes(data=True):
        attrs["latency_s"] *= factor
        attrs["parallel_latency_s"] *= factor
    got = solve_schedule(g, 2, 1).makespan_s
    assert got == pytest.approx(ref * factor, rel=2 * DEFAULT_MIP_GAP, abs=1e-12)


def test_timeout_returns_a_feasible_schedule():
    """Many incomparable ops and a tiny budget: a checked schedule with a timeout status."""
    g = _graph(
        [(f"o{i}", ("TC", "VC", "TCandVC")[i % 3], 1.0 + i % 5, 0.3 + i % 3) for i in range(40)]
    )
    g.add_edges_from((f"o{i}", f"o{i + 13}") for i in range(0, 27, 2))
    s = solve_schedule(g, 3, 2, time_limit_s=0.01)
    check_schedule(g, s, 3, 2)
    assert s.status in (
        ScheduleStatus.TIME_LIMIT,
        ScheduleStatus.LIST_SCHEDULE,
        ScheduleStatus.OPTIMAL,
    )
    assert s.time_limit_s == 0.01 and 0.0 <= s.gap < 1.0
    assert s.status != ScheduleStatus.OPTIMAL or s.gap <= DEFAULT_MIP_GAP


def test_a_search_out_of_time_returns_its_best_schedule_unproven():
    """An unlimited node budget on a graph no bound closes: the clock stops the search, and
    its best schedule comes back with the time-limit status and a positive gap."""
    g = _graph(
        [(f"o{i}", ("TC", "VC", "TCandVC")[i % 3], 1.0 + i % 5, 0.3 + i % 3) for i in range(40)]
    )
    g.add_edges_from((f"o{i}", f"o{i + 13}") for i in range(0, 27, 2))
    s = solve_schedule(g, 3, 2, time_limit_s=0.2, search_nodes=10**9)
    check_schedule(g, s, 3, 2)
    assert (s.status, s.method, s.solver) == (ScheduleStatus.TIME_LIMIT, Method.SEARCH, "search")
    assert 0.0 < s.gap < 0.2
    plain = solve_schedule(g, 3, 2, solver="list", search_nodes=0)
    assert s.makespan_s <= plain.makespan_s


def test_bad_input_lists_every_problem():
    g = nx.DiGraph()
    g.add_node("a", core="GPU", latency_s=1.0)
    g.add_node("b", core="TC", latency_s=-1.0)
    with pytest.raises(ConfigError) as e:
        solve_schedule(g, 0, 1)
    msg = str(e.value)
    assert "num_tc = 0 must be an integer >= 1" in msg
    assert "graph node 'a': core = 'GPU' must be one of TC, VC, TCandVC, Nop" in msg
    assert "graph node 'b': latency_s = -1.0 must be a finite number >= 0" in msg
    assert "graph node 'b': missing attribute 'parallel_latency_s'" in msg


def test_bad_settings_and_cycles():
    g = _graph([("a", "TC", 1.0, 1.0), ("b", "VC", 1.0, 1.0)], [("a", "b"), ("b", "a")])
    with pytest.raises(ConfigError, match="graph has a cycle"):
        solve_schedule(g, 1, 1)
    with pytest.raises(ConfigError, match="unknown solver 'higs'; did you mean highs"):
        solve_schedule(g, 1, 1, solver="higs")
    with pytest.raises(ConfigError, match=r"time_limit_s = 0 must be > 0 seconds"):
        solve_schedule(g, 1, 1, time_limit_s=0)
    with pytest.raises(ConfigError, match=r"mip_gap = 2 must be in \[0, 1\)"):
        solve_schedule(g, 1, 1, mip_gap=2)
    for bad in (-1, 2.5, True):
        with pytest.raises(ConfigError, match=rf"search_nodes = {bad!r} must be an integer >= 0"):
            solve_schedule(g, 1, 1, search_nodes=bad)


def test_gurobi_is_checked_up_front():
    try:
        import gurobipy  # noqa: F401
    except ImportError:
        g = _graph([("a", "TC", 1.0, 1.0)])
        with pytest.raises(
            ConfigError, match="solver 'gurobi' cannot run: gurobipy is not installed"
        ):
            solve_schedule(g, 1, 1, solver="gurobi")
    else:
        pytest.skip("gurobipy is installed")


@st.composite
def branchy(draw):
    """A fork, k copies of one random branch (a short chain or a diamond-free pair), a
    join, and maybe a side op: the symmetry-breaking constraints get exercised."""
    g = nx.DiGraph()
    g.add_node("fork", core="VC", latency_s=1 * US, parallel_latency_s=1 * US)
    g.add_node("join", core="VC", latency_s=1 * US, parallel_latency_s=1 * US)
    copies = draw(st.integers(2, 3))
    length = draw(st.integers(1, 2 if copies == 2 else 1))
    spec = [
        (draw(st.sampled_from(CORES[:3])), draw(st.integers(1, 9)), draw(st.integers(1, 9)))
        for _ in range(length)
    ]
    for c in range(copies):
        prev = "fork"
        for k, (core, lat, par) in enumerate(spec):
            name = f"b{c}.{k}"
            g.add_node(name, core=core, latency_s=lat * US, parallel_latency_s=par * US)
            g.add_edge(prev, name)
            prev = name
        g.add_edge(prev, "join")
    if draw(st.booleans()):
        g.add_node(
            "side",
            core="TC",
            latency_s=draw(st.integers(1, 9)) * US,
            parallel_latency_s=draw(st.integers(1, 9)) * US,
        )
        g.add_edge("fork", "side")
    return g


@settings(max_examples=30, deadline=None)
@given(branchy(), st.integers(1, 3), st.integers(1, 3), st.booleans())
def test_symmetric_branches_keep_the_optimum(g, num_tc, num_vc, blocks_all):
    _run(g, num_tc, num_vc, blocks_all)


@settings(max_examples=8, deadline=None)
@given(dags(max_ops=5), st.integers(1, 3), st.integers(1, 3))
def test_cbc_is_exact_too(g, num_tc, num_vc):
    s = solve_schedule(g, num_tc, num_vc, solver="cbc", time_limit_s=60.0, search_nodes=0)
    check_schedule(g, s, num_tc, num_vc)
    _assert_optimal(s.makespan_s, brute_force(g, num_tc, num_vc))


def test_parts_between_cuts_add_up():
    """An op nothing can overlap splits the graph: the makespan is the sum of the parts."""
    part = [("a", "TC", 3.0, 2.0), ("b", "TC", 3.0, 2.0), ("c", "VC", 2.0, 1.5)]
    g = _graph(
        [(f"1{n}", c, x, y) for n, c, x, y in part]
        + [("mid", "TCandVC", 1.0, 0.5)]
        + [(f"2{n}", c, x, y) for n, c, x, y in part]
    )
    g.add_edges_from((f"1{n}", "mid") for n in "abc")
    g.add_edges_from(("mid", f"2{n}") for n in "abc")
    one = _graph(part)
    s, p = solve_schedule(g, 2, 1), solve_schedule(one, 2, 1)
    check_schedule(g, s, 2, 1)
    assert s.makespan_s == pytest.approx(2 * p.makespan_s + 0.5, rel=1e-12)
    assert s.start_s["mid"] == pytest.approx(p.makespan_s, rel=1e-12)


@settings(max_examples=80, deadline=None)
@given(dags(), st.integers(1, 3), st.integers(1, 3), st.booleans())
def test_per_core_assignment_variables_are_exact(g, num_tc, num_vc, blocks_all):
    """Force the z-variable assignment (instead of antichain rows) and compare again."""
    from unittest.mock import patch

    from ilp import formulation, schedule

    with patch.object(formulation, "_MAX_CLIQUES", -1):
        schedule._solve.cache_clear()
        schedule._solve_part.cache_clear()
        _run(g, num_tc, num_vc, blocks_all, search_nodes=0)
    schedule._solve.cache_clear()
    schedule._solve_part.cache_clear()


def _list_schedule(problem):
    """The list scheduler's best schedule (modes, starts, makespan), with no bound to stop at."""
    return improve(problem, initial_schedule(problem, 0.0), 0.0)


def _needs_mip():
    """Seven ops on two tensor cores and one vector core (found by random search) whose list
    schedule neither the combinatorial bounds nor the LP bound over the modes prove optimal."""
    return _graph(
        [
            ("o0", "VC", 5.0, 1.0),
            ("o1", "TC", 2.0, 1.0),
            ("o2", "TC", 2.0, 1.0),
            ("o3", "TC", 6.0, 5.0),
            ("o4", "TC", 4.0, 1.0),
            ("o5", "TC", 7.0, 3.0),
            ("o6", "TC", 8.0, 7.0),
        ],
        [("o1", "o6"), ("o3", "o4"), ("o4", "o5")],
    )


def test_a_mip_out_of_time_while_built_is_not_solved():
    """The deadline counts the model's construction: past it, no solver is started (a
    97-op part's model took half a second to build with per-core variables, and the
    solve ran its full time limit on top)."""
    from unittest.mock import patch

    from ilp import formulation

    problem = build_problem(_needs_mip(), 2, 1).problem
    st_ = structure(problem)
    modes, start, ub = _list_schedule(problem)
    kw = dict(ub_s=ub, lb_s=0.0, warm=(modes, start), solver="highs", mip_gap=1e-4)

    def never(*args, **kwargs):
        raise AssertionError("a solver was started after the deadline")

    with patch.object(formulation, "_make_solver", never):
        for assign in (frozenset(), frozenset(("TC", "VC"))):
            out = formulation.solve_ilp(
                problem, st_, assign=assign, deadline=time.perf_counter() - 1.0, **kw
            )
            assert out.modes is None and out.start is None and not out.optimal
            assert out.solver_status == "time limit while building"
    solved = formulation.solve_ilp(
        problem, st_, assign=frozenset(), deadline=time.perf_counter() + 30.0, **kw
    )
    assert solved.optimal and solved.modes is not None


def test_highs_failure_falls_back_to_cbc_then_raises():
    from unittest.mock import patch

    from ilp import schedule
    from phaze.errors import SolverError

    real = schedule.solve_ilp

    def broken(problem, st, *, solver, **kw):
        if solver == "highs":
            raise SolverError("highs: boom", "kSolveError")
        return real(problem, st, solver=solver, **kw)

    g = _needs_mip()
    schedule._solve.cache_clear()
    schedule._solve_part.cache_clear()
    with patch.object(schedule, "solve_ilp", broken):
        s = solve_schedule(g, 2, 1, time_limit_s=30.0, search_nodes=0)
    assert s.method in (Method.ILP, Method.ILP_CORES)
    assert s.solver == "cbc (fallback from highs)"
    cbc = solve_schedule(g, 2, 1, solver="cbc", search_nodes=0).makespan_s
    assert s.makespan_s == pytest.approx(cbc, rel=2 * DEFAULT_MIP_GAP)

    def always(problem, st, *, solver, **kw):
        raise SolverError(f"{solver}: boom", "error")

    schedule._solve.cache_clear()
    schedule._solve_part.cache_clear()
    with patch.object(schedule, "solve_ilp", always), pytest.raises(SolverError) as e:
        solve_schedule(g, 2, 1, search_nodes=0)
    assert e.value.status == "error" and "cbc: boom" in str(e.value)
    schedule._solve.cache_clear()
    schedule._solve_part.cache_clear()


def _bound(g, num_tc, num_vc, blocks_all):
    order = list(nx.topological_sort(g))
    pos = {v: k for k, v in enumerate(order)}
    a = g.nodes
    return makespan_lower_bound(
        [a[v]["core"] for v in order],
        [a[v]["latency_s"] for v in order],
        [a[v].get("parallel_latency_s", a[v]["latency_s"]) for v in order],
        [[pos[p] for p in g.predecessors(v)] for v in order],
        num_tc,
        num_vc,
        parallel_blocks_all=blocks_all,
    )


@settings(max_examples=300, deadline=None)
@given(dags(), st.integers(1, 4), st.integers(1, 4), st.booleans())
def test_lower_bound_never_exceeds_the_optimum(g, num_tc, num_vc, blocks_all):
    best = brute_force(g, num_tc, num_vc, blocks_all)
    assert _bound(g, num_tc, num_vc, blocks_all) <= best * (1 + 1e-12)


def test_forced_split_ops_are_serialised_by_the_bound():
    """Two independent ops far slower on one core than split: each must split, and split ops
    hold the whole chip, so they run one after the other. The critical path (1) and the
    per-type core-seconds (4 / 4 = 1) both miss that; the destructive bound finds 2."""
    g = nx.DiGraph()
    g.add_node("a", core="TC", latency_s=10.0, parallel_latency_s=1.0)
    g.add_node("b", core="VC", latency_s=10.0, parallel_latency_s=1.0)
    assert brute_force(g, 4, 4) == 2.0
    assert _bound(g, 4, 4, True) == 2.0
    assert _bound(g, 4, 4, False) == 1.0  # split ops of different types may overlap then
    assert brute_force(g, 4, 4, blocks_all=False) == 1.0


def _check_problem_schedule(problem, modes, start):
    """Precedence and core capacity of an index-space schedule, checked at every start."""
    dur = [problem.duration(i, modes[i]) for i in range(problem.n)]
    for i, j in problem.edges:
        assert start[i] + dur[i] <= start[j] * (1 + 1e-12) + 1e-15, (i, j)
    for t in start:
        busy = [
            demand(problem, i, modes[i])
            for i in range(problem.n)
            if dur[i] > 0 and start[i] <= t < start[i] + dur[i]
        ]
        assert sum(b[0] for b in busy) <= problem.num_tc
        assert sum(b[1] for b in busy) <= problem.num_vc


@st.composite
def moded_problems(draw):
    """A problem of up to 7 ops on 1-4 cores of each type, with random modes and a random
    priority per op."""
    g = draw(dags(max_ops=7))
    num_tc, num_vc = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    problem = build_problem(g, num_tc, num_vc, parallel_blocks_all=draw(st.booleans())).problem
    rnd = draw(st.randoms(use_true_random=False))
    modes = tuple(
        PARALLEL if problem.can_parallel[i] and rnd.random() < 0.5 else SINGLE
        for i in range(problem.n)
    )
    return problem, modes, tuple(rnd.random() for _ in range(problem.n))


@settings(max_examples=200, deadline=None)
@given(moded_problems())
def test_justification_keeps_schedules_feasible_and_never_longer(drawn):
    problem, modes, rank = drawn
    start = serial_sgs(problem, modes, rank)
    justified, span = justify(problem, modes, start)
    _check_problem_schedule(problem, modes, justified)
    assert span == makespan(problem, modes, justified)
    assert span <= makespan(problem, modes, start) * (1 + 1e-12)


def test_justification_closes_a_list_schedules_gap():
    """Ops of 1, 2 and 3 s on two cores, listed shortest first: 1 and 2 start at 0, 3 waits
    for the first core (makespan 4). Right-justified, 3 goes first; left again, the ops pack
    into 3 s."""
    g = _graph([("a", "TC", 1.0, 1.0), ("b", "TC", 2.0, 2.0), ("c", "TC", 3.0, 3.0)])
    problem = build_problem(g, 2, 1).problem
    modes = (SINGLE,) * 3
    start = serial_sgs(problem, modes, problem.single_s)
    assert makespan(problem, modes, start) == 4.0
    justified, span = justify(problem, modes, start)
    assert span == 3.0
    _check_problem_schedule(problem, modes, justified)


@settings(max_examples=200, deadline=None)
@given(moded_problems(), st.randoms(use_true_random=False))
def test_serial_sgs_resumed_midway_equals_a_full_run(drawn, rnd):
    """The local search re-schedules a trial from the state the incumbent's schedule had
    before the first op whose mode the trial flips; that must be the trial's whole schedule."""
    problem, modes, rank = drawn
    assume(problem.n > 0)
    order = _order(problem, rank)
    states = []
    _place(problem, modes, order, record=states)
    flipped = list(modes)
    first = rnd.randrange(problem.n)
    for k in range(first, problem.n):
        i = order[k]
        if problem.can_parallel[i] and rnd.random() < 0.5:
            flipped[i] = 1 - flipped[i]
    whole = _place(problem, flipped, order)
    assert whole[0] == serial_sgs(problem, flipped, rank)
    for _ in range(2):  # resuming leaves the recorded state as it was
        assert _place(problem, flipped, order, first, states[first]) == whole


@settings(max_examples=200, deadline=None)
@given(moded_problems(), st.sampled_from((0.5, 1 - 1e-9, 1.0, 1 + 1e-9, 1.5)))
def test_serial_sgs_with_a_cutoff_stops_only_schedules_that_reach_it(drawn, share):
    """The local search passes its incumbent's makespan as a cutoff: a schedule shorter
    than the cutoff comes out whole, and one that reaches it comes out as ``((), inf)``."""
    problem, modes, rank = drawn
    assume(problem.n > 0)
    order = _order(problem, rank)
    whole = _place(problem, modes, order)
    cutoff = whole[1] * share
    cut = _place(problem, modes, order, cutoff=cutoff)
    if whole[1] < cutoff:
        assert cut == whole
    elif whole[1] * (1 - 1e-12) >= cutoff:  # the check is shaded by rounding's worth
        assert cut == ((), math.inf)


@settings(max_examples=200, deadline=None)
@given(moded_problems())
def test_parallel_sgs_builds_feasible_non_delay_schedules(drawn):
    """Feasible, and no op waits while its predecessors are done and its cores are free: at
    its earliest start and at every start or finish before its own start, the cores in use
    then leave too few for it."""
    problem, modes, rank = drawn
    start, span = _parallel_sgs(problem, modes, rank)
    _check_problem_schedule(problem, modes, start)
    assert span == makespan(problem, modes, start)
    dur = [problem.duration(i, modes[i]) for i in range(problem.n)]
    events = {t for i in range(problem.n) for t in (start[i], start[i] + dur[i])}
    for j in range(problem.n):
        ready = max((start[i] + dur[i] for i, k in problem.edges if k == j), default=0.0)
        need = demand(problem, j, modes[j])
        for t in {ready} | {t for t in events if ready < t < start[j]}:
            if t >= start[j]:
                continue
            used = [
                demand(problem, i, modes[i])
                for i in range(problem.n)
                if start[i] <= t < start[i] + dur[i]
            ]
            assert (
                sum(u[0] for u in used) + need[0] > problem.num_tc
                or sum(u[1] for u in used) + need[1] > problem.num_vc
            ), (j, t)


def test_parallel_sgs_keeps_the_bottleneck_busy():
    """One tensor and one vector core: a (VC, 1 s) feeds b (TC, 5 s); c (TC, 4 s) is free.
    Longest path first, the serial SGS places a, then b after it, and c (too long for the
    1 s gap before b) after b: 10 s. The parallel SGS starts c beside a at 0 and b when the
    tensor core frees: 9 s, the tensor core's work, so the list schedule is proven optimal
    without a search."""
    g = _graph([("a", "VC", 1.0, 1.0), ("b", "TC", 5.0, 5.0), ("c", "TC", 4.0, 4.0)], [("a", "b")])
    problem = build_problem(g, 1, 1).problem
    st_ = structure(problem)
    by_tail = tuple(-(problem.single_s[i] + st_.tail[i]) for i in range(problem.n))
    modes = (SINGLE,) * 3
    assert makespan(problem, modes, serial_sgs(problem, modes, by_tail)) == 10.0
    assert _parallel_sgs(problem, modes, by_tail)[1] == 9.0
    assert initial_schedule(problem, 0.0)[2] == 9.0
    s = solve_schedule(g, 1, 1, solver="list", search_nodes=0)
    assert s.makespan_s == 9.0 and s.method == Method.BOUND
    assert s.status == ScheduleStatus.OPTIMAL
    check_schedule(g, s, 1, 1)


@settings(max_examples=300, deadline=None)
@given(dags(max_ops=7), st.integers(1, 4), st.integers(1, 4))
def test_collapsed_lp_bound_never_exceeds_the_optimum(g, num_tc, num_vc):
    problem = build_problem(g, num_tc, num_vc).problem
    best = brute_force(g, num_tc, num_vc)
    st_ = structure(problem)
    # with the optimum as the feasible makespan given (the most ops forced to split) and
    # with a loose one (all ops one after another on one core)
    for ub in (best, sum(problem.single_s)):
        assert collapsed_lower_bound(problem, st_, ub) <= best * (1 + 1e-9)


def test_collapsed_lp_bound_pays_every_parallel_op_outside_the_rest():
    """Four tensor ops of 3.9 s on the one tensor core (1 s split, which holds the chip)
    beside a 4 s vector chain. Splitting k of them costs k s of the chip; the rest queue on
    the core: the best is k = 3, 3 + max(4, 3.9) = 7 s. Every path is at most 4 s and the
    core-seconds 4 s; the LP pays each split second outside the rest and finds 6.97 s."""
    spec = [(f"t{k}", "TC", 3.9, 1.0) for k in range(4)]
    g = _graph([*spec, ("v1", "VC", 2.0, 2.0), ("v2", "VC", 2.0, 2.0)], [("v1", "v2")])
    problem = build_problem(g, 1, 1).problem
    assert brute_force(g, 1, 1) == pytest.approx(7.0)
    old = _bound(g, 1, 1, True)
    new = collapsed_lower_bound(problem, structure(problem), 7.0)
    assert old < 6.5 < 6.97 < new <= 7.0


@st.composite
def fanned(draw):
    """Twin sources feeding every one of k copies of a chain, and a third source feeding
    every chain's last op, all in one part (like Q and K projections feeding the attention
    head groups, and V their ends): branch symmetry behind hubs, found as the state of the
    search evolves."""
    g = nx.DiGraph()
    twin = (draw(st.sampled_from(CORES[:3])), draw(st.integers(1, 9)), draw(st.integers(1, 9)))
    for name in ("q", "k"):
        g.add_node(name, core=twin[0], latency_s=twin[1] * US, parallel_latency_s=twin[2] * US)
    g.add_node(
        "v",
        core="TC",
        latency_s=draw(st.integers(1, 9)) * US,
        parallel_latency_s=draw(st.integers(1, 9)) * US,
    )
    copies = draw(st.integers(2, 4))
    length = draw(st.integers(1, 4 // copies))
    spec = [
        (draw(st.sampled_from(CORES[:3])), draw(st.integers(1, 9)), draw(st.integers(1, 9)))
        for _ in range(length)
    ]
    for c in range(copies):
        for k, (core, lat, par) in enumerate(spec):
            g.add_node(f"h{c}.{k}", core=core, latency_s=lat * US, parallel_latency_s=par * US)
            if k:
                g.add_edge(f"h{c}.{k - 1}", f"h{c}.{k}")
        g.add_edges_from((src, f"h{c}.0") for src in ("q", "k"))
        g.add_edge("v", f"h{c}.{length - 1}")
    return g


@settings(max_examples=40, deadline=None)
@given(fanned(), st.integers(1, 3), st.integers(1, 2), st.booleans())
def test_search_is_exact_on_branches_behind_hubs(g, num_tc, num_vc, blocks_all):
    _run(g, num_tc, num_vc, blocks_all, solver="list")


@settings(max_examples=40, deadline=None)
@given(dags(max_ops=7), st.integers(1, 3), st.integers(1, 3), st.integers(1, 30))
def test_search_out_of_nodes_keeps_its_best_schedule(g, num_tc, num_vc, nodes):
    """A tiny node budget still returns a checked schedule, no longer than the list
    schedule, and the same one every time (no clock involved)."""
    from ilp import schedule

    runs = []
    for _ in range(2):
        schedule._solve.cache_clear()
        schedule._solve_part.cache_clear()
        runs.append(solve_schedule(g, num_tc, num_vc, solver="list", search_nodes=nodes))
    s = runs[0]
    check_schedule(g, s, num_tc, num_vc)
    assert (s.makespan_s, dict(s.start_s), s.parallel) == (
        runs[1].makespan_s,
        dict(runs[1].start_s),
        runs[1].parallel,
    )
    plain = solve_schedule(g, num_tc, num_vc, solver="list", search_nodes=0)
    assert s.makespan_s <= plain.makespan_s * (1 + 1e-12)
    assert s.makespan_s >= brute_force(g, num_tc, num_vc) * (1 - 1e-9)
    if s.method == Method.SEARCH:
        assert s.status == ScheduleStatus.OPTIMAL


@settings(max_examples=40, deadline=None)
@given(dags(max_ops=7), st.integers(1, 3), st.integers(1, 3), st.booleans())
def test_search_stops_where_its_schedule_meets_a_known_bound(g, num_tc, num_vc, blocks_all):
    """Given the optimum as a lower bound, the search stops at a schedule that meets it,
    proven, no later than the search that has to exhaust its tree."""
    problem = build_problem(g, num_tc, num_vc, parallel_blocks_all=blocks_all).problem
    st_ = structure(problem)
    start = _list_schedule(problem)
    close = 1e-6
    full = branch_and_bound(problem, st_, start, close, 10**6)
    assert full.proven
    best = brute_force(g, num_tc, num_vc, blocks_all)
    _assert_optimal(full.makespan_s, best)
    met = branch_and_bound(problem, st_, start, close, 10**6, floor_s=best)
    assert met.proven and met.nodes <= full.nodes
    assert met.makespan_s <= best * (1 + close)
    assert makespan(problem, met.modes, met.start) == pytest.approx(met.makespan_s)


def _one_after_another(problem):
    """Every op single-core, one after another in index order: (modes, starts, makespan)."""
    start, t = [], 0.0
    for i in range(problem.n):
        start.append(t)
        t += problem.single_s[i]
    return (SINGLE,) * problem.n, tuple(start), t


@settings(max_examples=300, deadline=None)
@given(dags(max_ops=7), st.integers(1, 3), st.integers(1, 3), st.booleans())
def test_search_from_a_serial_schedule_finds_the_optimum(g, num_tc, num_vc, blocks_all):
    """Started from every op single-core, one after another (not the list schedule, which
    is often optimal already), the search alone must reach the brute-force optimum: its
    pruning rules (split sinks last among them) may cut schedules, never every optimal one."""
    problem = build_problem(g, num_tc, num_vc, parallel_blocks_all=blocks_all).problem
    serial = _one_after_another(problem)
    found = branch_and_bound(problem, structure(problem), serial, 1e-9, 10**6)
    assert found.proven
    _assert_optimal(found.makespan_s, brute_force(g, num_tc, num_vc, blocks_all))
    assert makespan(problem, found.modes, found.start) == pytest.approx(found.makespan_s)


def test_split_sinks_end_the_schedule_unless_a_nop_may_run_beside_them():
    """A split op with no successors can move to the end, where it blocks nothing; not
    when a ``Nop`` op it does not follow could run beside it, as cutting its time out would
    shorten that op, nor when split ops hold only their own cores."""

    def tail_names(g, blocks_all=True):
        c = build_problem(g, 4, 1, parallel_blocks_all=blocks_all)
        mask = _tail_ops(c.problem, structure(c.problem))
        return {v for k, v in enumerate(c.nodes) if (mask >> k) & 1}

    g = _graph(
        [("a", "TC", 8.0, 2.0), ("w", "TC", 8.0, 2.0), ("x", "VC", 1.0, 1.0)],
        [("a", "w"), ("a", "x")],
    )
    assert tail_names(g) == {"w"}  # x cannot split faster
    assert tail_names(g, blocks_all=False) == set()
    g.add_node("n", core="Nop", latency_s=5.0)
    g.add_edge("a", "n")
    assert tail_names(g) == set()
    g.add_edge("n", "w")
    assert tail_names(g) == {"w"}


def test_an_op_that_must_split_waits_for_the_running_ops():
    """o3 -> o4 on the vector cores takes 16 with o3 single-core, so below 10 o3 must split,
    and a split op holds the whole chip. Once the search starts any single-core op first
    (o1 for 5 on a tensor core), o3 cannot split before that op finishes: 5 + 1 + 7 > 10.
    The node bound sees it at once, so the list schedule's 10 is proven optimal one level
    down; taking o3's earliest start as 0 there left five of those nodes open."""
    g = _graph(
        [
            ("o0", "TC", 9 * US, 4 * US),
            ("o1", "TC", 5 * US, 6 * US),
            ("o2", "TC", 5 * US, 2 * US),
            ("o3", "VC", 9 * US, 1 * US),
            ("o4", "VC", 7 * US, 7 * US),
            ("o5", "TC", 3 * US, 8 * US),
        ],
        [("o3", "o4")],
    )
    assert brute_force(g, 3, 2) == pytest.approx(10 * US)
    problem = build_problem(g, 3, 2).problem
    start = _list_schedule(problem)
    assert start[2] == pytest.approx(10 * US)
    found = branch_and_bound(problem, structure(problem), start, 1e-6, 10**6)
    assert found.proven and found.makespan_s == pytest.approx(10 * US)
    assert found.nodes == 6  # the root and its five children, each pruned by the bound


def test_interchangeable_chains_split_one_after_another():
    """Two copies of a -> b (a: 4 single, 2 split on the tensor cores; b: 7 single, 3 split
    on the vector cores), on 4 tensor and 2 vector cores. All four split take 10, each op
    alone on the chip; any single-core b takes 7 beside at most one more, so 11 or more. The
    node bound spreads one path's worth evenly over the two chains: each op adds
    min(split, single / 2), 2 + 3 per chain, 10 in all, and proves the list schedule at the
    root. Each path alone (5) and each core type's work left the root open, with six more
    nodes below it."""
    g = _graph(
        [
            ("a0", "TC", 4 * US, 2 * US),
            ("b0", "VC", 7 * US, 3 * US),
            ("a1", "TC", 4 * US, 2 * US),
            ("b1", "VC", 7 * US, 3 * US),
        ],
        [("a0", "b0"), ("a1", "b1")],
    )
    assert brute_force(g, 4, 2) == pytest.approx(10 * US)
    problem = build_problem(g, 4, 2).problem
    start = _list_schedule(problem)
    assert start[2] == pytest.approx(10 * US)
    found = branch_and_bound(problem, structure(problem), start, 1e-6, 10**6)
    assert found.proven and found.nodes == 1


@st.composite
def chains(draw):
    """k copies of one random chain of one to three ops, nothing else: interchangeable
    branches with nothing around them to hide the node bound's branch term."""
    copies = draw(st.integers(2, 3))
    spec = [
        (draw(st.sampled_from(CORES[:3])), draw(st.integers(1, 9)), draw(st.integers(1, 9)))
        for _ in range(draw(st.integers(1, 3 if copies == 2 else 2)))
    ]
    ops = [(f"c{c}.{k}", *op) for c in range(copies) for k, op in enumerate(spec)]
    edges = [(f"c{c}.{k - 1}", f"c{c}.{k}") for c in range(copies) for k in range(1, len(spec))]
    return _graph([(name, core, s * US, p * US) for name, core, s, p in ops], edges)


@settings(max_examples=150, deadline=None)
@given(
    st.one_of(chains(), branchy(), fanned()), st.integers(1, 4), st.integers(1, 4), st.booleans()
)
def test_search_beats_an_incumbent_just_above_the_optimum_on_branches(
    g, num_tc, num_vc, blocks_all
):
    """On graphs with interchangeable branches, where the node bound spreads a path over the
    branches, the search must find the optimum below an incumbent just above it: a bound
    above the best completion of any node on the way would leave that incumbent."""
    problem = build_problem(g, num_tc, num_vc, parallel_blocks_all=blocks_all).problem
    best = brute_force(g, num_tc, num_vc, blocks_all)
    modes, start, _ = _one_after_another(problem)
    above = (modes, start, best * (1 + 1e-6))
    found = branch_and_bound(problem, structure(problem), above, 1e-9, 10**6)
    assert found.proven
    _assert_optimal(found.makespan_s, best)
    assert makespan(problem, found.modes, found.start) == pytest.approx(found.makespan_s)


def test_a_known_bound_spares_the_proof():
    """Here the list schedule (14) is one off the optimum (13): once the search finds 13 the
    bound ends it, where without it the tree must be searched to prove 13."""
    g = _graph(
        [
            ("o0", "VC", 4 * US, 3 * US),
            ("o1", "VC", 3 * US, 9 * US),
            ("o2", "TC", 5 * US, 5 * US),
            ("o3", "TCandVC", 5 * US, 8 * US),
            ("o4", "TC", 9 * US, 6 * US),
        ],
        [("o1", "o4"), ("o2", "o4")],
    )
    assert brute_force(g, 3, 2) == pytest.approx(13 * US)
    problem = build_problem(g, 3, 2).problem
    st_ = structure(problem)
    start = _list_schedule(problem)
    assert start[2] == pytest.approx(14 * US)
    full = branch_and_bound(problem, st_, start, 1e-6, 10**6)
    met = branch_and_bound(problem, st_, start, 1e-6, 10**6, floor_s=13 * US)
    assert full.proven and met.proven
    assert full.makespan_s == pytest.approx(13 * US) == met.makespan_s
    assert met.nodes < full.nodes
