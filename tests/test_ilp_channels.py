"""Collectives on a communication channel beside compute, against the brute force of
``ilp_oracle``: every collective holds the one unit of its group's channel, split ops hold
every core but not the channel. The list schedule is feasible (no two collectives overlap,
no capacity exceeded), every lower bound stays below the optimum, and the search and the MIP
reach it where they claim optimality."""

from __future__ import annotations

import pytest
from budget import budget
from hypothesis import assume, given
from hypothesis import strategies as st
from ilp_oracle import (
    CHANNEL,
    US,
    assert_optimal,
    brute_force,
    check_schedule,
    collective_dags,
    cores,
    cost_bound,
    graph,
    run_exact,
    run_list,
)

from ilp import solve_schedule
from ilp.branch import branch_and_bound
from ilp.listsched import initial_schedule, lower_bound, makespan, structure
from ilp.lpbound import collapsed_lower_bound
from ilp.problem import PARALLEL, build_problem

RESOURCES = {CHANNEL: 1}
cases = st.tuples(collective_dags(), st.integers(1, 3), st.integers(1, 2), st.booleans())


def _collectives(g):
    return [v for v, d in g.nodes(data="demand") if d and CHANNEL in d]


def _overlap(s, a, b):
    return s.start_s[a] < s.finish_s(b) and s.start_s[b] < s.finish_s(a)


@budget(40, deadline=None)
@given(cases)
def test_list_schedule_runs_collectives_one_at_a_time(case):
    g, num_tc, num_vc, blocks_all = case
    colls = _collectives(g)
    assume(len(colls) >= 2)
    s = run_list(g, cores(num_tc, num_vc), blocks_all, RESOURCES)
    for k, a in enumerate(colls):
        for b in colls[k + 1 :]:
            assert not _overlap(s, a, b), (a, b)


@budget(50, deadline=None)
@given(cases)
def test_bounds_with_collectives_never_exceed_the_optimum(case):
    g, num_tc, num_vc, blocks_all = case
    best = brute_force(g, cores(num_tc, num_vc), blocks_all, RESOURCES)
    problem = build_problem(
        g, cores(num_tc, num_vc), parallel_blocks_all=blocks_all, resources=RESOURCES
    ).problem
    st_ = structure(problem)
    assert lower_bound(problem) <= best * (1 + 1e-12)
    _, _, ub = initial_schedule(problem, 0.0)
    for cap in (best, ub, sum(problem.single_s)):
        assert collapsed_lower_bound(problem, st_, cap) <= best * (1 + 1e-9)


@budget(50, deadline=None)
@given(cases)
def test_the_sweeps_bound_with_channels_never_exceeds_the_optimum(case):
    """:func:`ilp.makespan_lower_bound` from core types, times and each op's channel (what
    the sweep's pruning reads) stays below the optimum, and sees the channel's work."""
    g, num_tc, num_vc, blocks_all = case
    bound = cost_bound(g, cores(num_tc, num_vc), blocks_all, CHANNEL)
    a = g.nodes
    assert bound <= brute_force(g, cores(num_tc, num_vc), blocks_all, RESOURCES) * (1 + 1e-12)
    assert bound >= sum(a[v]["latency_s"] for v in _collectives(g)) * (1 - 1e-12)


@budget(30, deadline=None)
@given(cases)
def test_search_with_collectives_is_exact(case):
    g, num_tc, num_vc, blocks_all = case
    assume(len(_collectives(g)) >= 2)
    run_exact(g, cores(num_tc, num_vc), blocks_all, RESOURCES, solver="list")


@budget(30, deadline=None)
@given(cases)
def test_search_from_the_list_schedule_with_collectives_proves_the_optimum(case):
    g, num_tc, num_vc, blocks_all = case
    problem = build_problem(
        g, cores(num_tc, num_vc), parallel_blocks_all=blocks_all, resources=RESOURCES
    ).problem
    found = branch_and_bound(
        problem, structure(problem), initial_schedule(problem, 0.0), 1e-9, 10**6
    )
    assert found.proven
    best = brute_force(g, cores(num_tc, num_vc), blocks_all, RESOURCES)
    assert_optimal(found.makespan_s, best)
    assert makespan(problem, found.modes, found.start) == pytest.approx(found.makespan_s)


@budget(20, deadline=None)
@given(cases)
def test_mip_with_collectives_is_exact(case):
    g, num_tc, num_vc, blocks_all = case
    assume(len(_collectives(g)) >= 2)
    run_exact(g, cores(num_tc, num_vc), blocks_all, RESOURCES, search_nodes=0)


def test_a_split_gemm_runs_beside_a_collective():
    """A GEMM split over the tensor cores (1 us) beside an independent collective (1 us):
    the split GEMM holds every core but not the channel, so the two overlap."""
    g = graph([("mm", "TC", 4 * US, 1 * US)])
    g.add_node("ar", latency_s=1 * US, demand={CHANNEL: 1})
    s = solve_schedule(g, cores(4, 1), resources=RESOURCES)
    check_schedule(g, s, cores(4, 1), resources=RESOURCES)
    assert s.makespan_s == pytest.approx(1 * US) and "mm" in s.parallel
    problem = build_problem(g, cores(4, 1), resources=RESOURCES).problem
    assert problem.need[PARALLEL][0] == (4, 1, 0)


def test_the_scheduler_orders_collectives_on_the_channel():
    """Two collectives in no fixed order, each gating one long GEMM: the one before the
    long GEMM goes first (3 + 9 = 12 us), which the issue order (short GEMM's first) misses
    (3 + 3 + 9 = 15 us)."""
    g = graph([("short", "TC", 1 * US, 1 * US), ("long", "TC", 9 * US, 9 * US)])
    for name, after in (("c_short", "short"), ("c_long", "long")):
        g.add_node(name, latency_s=3 * US, demand={CHANNEL: 1})
        g.add_edge(name, after)
    s = solve_schedule(g, cores(2, 1), resources=RESOURCES)
    check_schedule(g, s, cores(2, 1), resources=RESOURCES)
    assert s.makespan_s == pytest.approx(12 * US)
    assert s.start_s["c_long"] < s.start_s["c_short"]
