"""solve_schedule against the independent brute force and schedule checker of
``ilp_oracle``: exactness of the whole pipeline, examples, settings and bad input."""

from __future__ import annotations

import time
from unittest.mock import patch

import networkx as nx
import pytest
from budget import budget
from hypothesis import example, given, settings
from hypothesis import strategies as st
from ilp_oracle import (
    assert_optimal,
    branchy,
    brute_force,
    check_schedule,
    cores,
    dags,
    graph,
    node_units,
    run_exact,
)

from ilp import DEFAULT_MIP_GAP, Method, ScheduleStatus, formulation, schedule, solve_schedule
from ilp.listsched import improve, initial_schedule, structure
from ilp.problem import build_problem
from phaze_common.errors import ConfigError, SolverError


@budget(120, deadline=None)
@given(dags(), st.integers(1, 4), st.integers(1, 4), st.booleans())
def test_makespan_equals_brute_force(g, num_tc, num_vc, blocks_all):
    run_exact(g, cores(num_tc, num_vc), blocks_all)


@pytest.mark.slow
@settings(max_examples=600, deadline=None)
@given(dags(max_ops=7), st.integers(1, 4), st.integers(1, 4), st.booleans())
def test_makespan_equals_brute_force_bigger(g, num_tc, num_vc, blocks_all):
    run_exact(g, cores(num_tc, num_vc), blocks_all)


@budget(60, deadline=None)
@given(dags(), st.integers(1, 4), st.integers(1, 4), st.booleans())
def test_mip_alone_equals_brute_force(g, num_tc, num_vc, blocks_all):
    """Without the branch and bound, every part the bounds leave open goes to the MIP."""
    run_exact(g, cores(num_tc, num_vc), blocks_all, search_nodes=0)


def test_oversubscribed_cores_need_assignment():
    """Four independent single-core TC ops (parallel no faster) on 2 cores: two rounds."""
    g = graph([(f"m{i}", "TC", 3.0, 3.0) for i in range(4)])
    s = solve_schedule(g, cores(2, 1))
    check_schedule(g, s, cores(2, 1))
    assert s.makespan_s == 6.0
    assert s.peak_utilisation["TC"] == 1.0 and s.peak_utilisation["VC"] == 0.0


def test_parallel_blocks_everything_by_default():
    """A parallel TC op may overlap a VC op only when parallel ops do not block all cores."""
    g = graph([("mm", "TC", 8.0, 2.0), ("gelu", "VC", 2.0, 2.0)])
    assert solve_schedule(g, cores(4, 1)).makespan_s == 4.0
    assert solve_schedule(g, cores(4, 1), parallel_blocks_all=False).makespan_s == 2.0


def test_chain_fast_path_takes_fastest_modes():
    spec = [("a", "TC", 4.0, 1.0), ("b", "VC", 1.0, 3.0), ("c", "TCandVC", 5.0, 2.5)]
    g = graph(spec, [("a", "b"), ("b", "c")])
    s = solve_schedule(g, cores(4, 4))
    assert s.method == Method.BOUND and s.makespan_s == 1.0 + 1.0 + 2.5
    assert s.parallel == {"a", "c"} and s.gap == 0.0


def test_nop_latency_delays_successors_and_zero_nops_contract():
    g = graph([("mm", "TC", 2.0, 2.0), ("rest", "VC", 1.0, 1.0)])
    g.add_node("allreduce", latency_s=5.0)
    g.add_node("join", latency_s=0.0)
    g.add_edges_from([("mm", "allreduce"), ("allreduce", "join"), ("join", "rest")])
    s = solve_schedule(g, cores(1, 1))
    check_schedule(g, s, cores(1, 1))
    assert s.start_s["join"] == 7.0 and s.start_s["rest"] == 7.0 and s.makespan_s == 8.0
    assert dict(s.held["allreduce"]) == {} and s.core_ids["allreduce"] == ""


def test_empty_graph_and_results_are_read_only():
    s = solve_schedule(nx.DiGraph(), cores(1, 1))
    assert s.makespan_s == 0.0 and s.method == Method.EMPTY
    g = graph([("a", "TC", 1.0, 1.0)])
    s = solve_schedule(g, cores(1, 1))
    with pytest.raises(TypeError):
        s.start_s["a"] = 5.0  # type: ignore[index]


def test_cbc_agrees_with_highs():
    g = graph(
        [
            ("q", "TC", 4.0, 1.5),
            ("k", "TC", 4.0, 1.5),
            ("v", "TC", 4.0, 1.5),
            ("s", "VC", 1.0, 0.5),
        ],
        [("q", "s"), ("k", "s")],
    )
    a = solve_schedule(g, cores(2, 1), solver="highs", search_nodes=0)
    b = solve_schedule(g, cores(2, 1), solver="cbc", search_nodes=0)
    check_schedule(g, b, cores(2, 1))
    assert b.solver == "cbc" or b.method == Method.BOUND
    assert a.makespan_s == pytest.approx(b.makespan_s, rel=2 * DEFAULT_MIP_GAP)


@example(0.0)
@given(st.floats(1e-3, 1e3))
def test_scaling_all_latencies_scales_makespan(factor):
    base = graph(
        [
            ("a", "TC", 3.0, 1.0),
            ("b", "TC", 2.0, 1.0),
            ("c", "VC", 2.0, 1.0),
            ("d", "TCandVC", 1.0, 0.4),
        ],
        [("a", "d"), ("c", "d")],
    )
    ref = solve_schedule(base, cores(2, 1)).makespan_s
    g = nx.DiGraph(base)
    for _, attrs in g.nodes(data=True):
        attrs["latency_s"] *= factor
        attrs["parallel_latency_s"] *= factor
    got = solve_schedule(g, cores(2, 1)).makespan_s
    assert got == pytest.approx(ref * factor, rel=2 * DEFAULT_MIP_GAP, abs=1e-12)


def test_timeout_returns_a_feasible_schedule():
    """Many incomparable ops and a tiny budget: a checked schedule with a timeout status."""
    g = graph(
        [(f"o{i}", ("TC", "VC", "TCandVC")[i % 3], 1.0 + i % 5, 0.3 + i % 3) for i in range(40)]
    )
    g.add_edges_from((f"o{i}", f"o{i + 13}") for i in range(0, 27, 2))
    s = solve_schedule(g, cores(3, 2), time_limit_s=0.01)
    check_schedule(g, s, cores(3, 2))
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
    g = graph(
        [(f"o{i}", ("TC", "VC", "TCandVC")[i % 3], 1.0 + i % 5, 0.3 + i % 3) for i in range(40)]
    )
    g.add_edges_from((f"o{i}", f"o{i + 13}") for i in range(0, 27, 2))
    s = solve_schedule(g, cores(3, 2), time_limit_s=0.2, search_nodes=10**9)
    check_schedule(g, s, cores(3, 2))
    assert (s.status, s.method, s.solver) == (ScheduleStatus.TIME_LIMIT, Method.SEARCH, "search")
    assert 0.0 < s.gap < 0.2
    plain = solve_schedule(g, cores(3, 2), solver="list", search_nodes=0)
    assert s.makespan_s <= plain.makespan_s


def test_bad_input_lists_every_problem():
    g = nx.DiGraph()
    g.add_node("a", units={"GPU": 1}, latency_s=1.0)
    g.add_node("b", units=node_units("TC"), latency_s=-1.0)
    g.add_node("c", units={"VC": 2}, latency_s=1.0, parallel_latency_s=1.0)
    g.add_node("d", units=["TC"], latency_s=1.0)
    with pytest.raises(ConfigError) as e:
        solve_schedule(g, cores(0, 1))
    msg = str(e.value)
    assert "units['TC'] = 0 must be an integer >= 1" in msg
    assert "graph node 'a': units names 'GPU'; the declared core kinds are: 'TC', 'VC'" in msg
    assert "graph node 'b': latency_s = -1.0 must be a finite number >= 0" in msg
    assert "graph node 'b': missing attribute 'parallel_latency_s'" in msg
    assert "graph node 'c': units['VC'] = 2 exceeds the 1 units of 'VC'" in msg
    assert "graph node 'd': units = ['TC'] must map core kinds to units" in msg


def test_bad_settings_and_cycles():
    g = graph([("a", "TC", 1.0, 1.0), ("b", "VC", 1.0, 1.0)], [("a", "b"), ("b", "a")])
    with pytest.raises(ConfigError, match="graph has a cycle"):
        solve_schedule(g, cores(1, 1))
    with pytest.raises(ConfigError, match="unknown solver 'higs'; did you mean highs"):
        solve_schedule(g, cores(1, 1), solver="higs")
    with pytest.raises(ConfigError, match=r"time_limit_s = 0 must be > 0 seconds"):
        solve_schedule(g, cores(1, 1), time_limit_s=0)
    with pytest.raises(ConfigError, match=r"mip_gap = 2 must be in \[0, 1\)"):
        solve_schedule(g, cores(1, 1), mip_gap=2)
    for bad in (-1, 2.5, True):
        with pytest.raises(ConfigError, match=rf"search_nodes = {bad!r} must be an integer >= 0"):
            solve_schedule(g, cores(1, 1), search_nodes=bad)


def test_gurobi_is_checked_up_front():
    try:
        import gurobipy  # noqa: F401
    except ImportError:
        g = graph([("a", "TC", 1.0, 1.0)])
        with pytest.raises(
            ConfigError, match="solver 'gurobi' cannot run: gurobipy is not installed"
        ):
            solve_schedule(g, cores(1, 1), solver="gurobi")
    else:
        pytest.skip("gurobipy is installed")


@settings(max_examples=30, deadline=None)
@given(branchy(), st.integers(1, 3), st.integers(1, 3), st.booleans())
def test_symmetric_branches_keep_the_optimum(g, num_tc, num_vc, blocks_all):
    run_exact(g, cores(num_tc, num_vc), blocks_all)


@settings(max_examples=8, deadline=None)
@given(dags(max_ops=5), st.integers(1, 3), st.integers(1, 3))
def test_cbc_is_exact_too(g, num_tc, num_vc):
    s = solve_schedule(g, cores(num_tc, num_vc), solver="cbc", time_limit_s=60.0, search_nodes=0)
    check_schedule(g, s, cores(num_tc, num_vc))
    assert_optimal(s.makespan_s, brute_force(g, cores(num_tc, num_vc)))


def test_parts_between_cuts_add_up():
    """An op nothing can overlap splits the graph: the makespan is the sum of the parts."""
    part = [("a", "TC", 3.0, 2.0), ("b", "TC", 3.0, 2.0), ("c", "VC", 2.0, 1.5)]
    g = graph(
        [(f"1{n}", c, x, y) for n, c, x, y in part]
        + [("mid", "TCandVC", 1.0, 0.5)]
        + [(f"2{n}", c, x, y) for n, c, x, y in part]
    )
    g.add_edges_from((f"1{n}", "mid") for n in "abc")
    g.add_edges_from(("mid", f"2{n}") for n in "abc")
    one = graph(part)
    s, p = solve_schedule(g, cores(2, 1)), solve_schedule(one, cores(2, 1))
    check_schedule(g, s, cores(2, 1))
    assert s.makespan_s == pytest.approx(2 * p.makespan_s + 0.5, rel=1e-12)
    assert s.start_s["mid"] == pytest.approx(p.makespan_s, rel=1e-12)


@budget(80, deadline=None)
@given(dags(), st.integers(1, 3), st.integers(1, 3), st.booleans())
def test_per_core_assignment_variables_are_exact(g, num_tc, num_vc, blocks_all):
    """Force the z-variable assignment (instead of antichain rows) and compare again."""
    schedule.clear_caches()
    with patch.object(formulation, "MAX_ANTICHAINS", -1):
        run_exact(g, cores(num_tc, num_vc), blocks_all, search_nodes=0)
    schedule.clear_caches()


def _needs_mip():
    """Seven ops on two tensor cores and one vector core (found by random search) whose list
    schedule neither the combinatorial bounds nor the LP bound over the modes prove optimal."""
    return graph(
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
    """The deadline counts the model's construction: past it, no solver is started (large
    parts' models take long to build, and the solve would run its full time limit on top)."""
    problem = build_problem(_needs_mip(), cores(2, 1)).problem
    st_ = structure(problem)
    modes, start, ub = improve(problem, initial_schedule(problem, 0.0), 0.0)
    kw = dict(ub_s=ub, lb_s=0.0, warm=(modes, start), solver="highs", mip_gap=1e-4)

    def never(*args, **kwargs):
        raise AssertionError("a solver was started after the deadline")

    with patch.object(formulation, "make_solver", never):
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
    real = schedule.solve_ilp

    def broken(problem, st, *, solver, **kw):
        if solver == "highs":
            raise SolverError("highs: boom", "kSolveError")
        return real(problem, st, solver=solver, **kw)

    g = _needs_mip()
    schedule.clear_caches()
    with patch.object(schedule, "solve_ilp", broken):
        s = solve_schedule(g, cores(2, 1), time_limit_s=30.0, search_nodes=0)
    assert s.method in (Method.ILP, Method.ILP_CORES)
    assert s.solver == "cbc (fallback from highs)"
    cbc = solve_schedule(g, cores(2, 1), solver="cbc", search_nodes=0).makespan_s
    assert s.makespan_s == pytest.approx(cbc, rel=2 * DEFAULT_MIP_GAP)

    def always(problem, st, *, solver, **kw):
        raise SolverError(f"{solver}: boom", "error")

    schedule.clear_caches()
    with patch.object(schedule, "solve_ilp", always), pytest.raises(SolverError) as e:
        solve_schedule(g, cores(2, 1), search_nodes=0)
    assert e.value.status == "error" and "cbc: boom" in str(e.value)
    schedule.clear_caches()
