"""The branch and bound (:mod:`ilp.branch`) against the brute-force optimum: completeness
from any incumbent, node budgets, known bounds, and the pruning rules on examples."""

from __future__ import annotations

import networkx as nx
import pytest
from budget import budget
from hypothesis import given, settings
from hypothesis import strategies as st
from ilp_oracle import (
    CORES,
    US,
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

from ilp import Method, ScheduleStatus, schedule, solve_schedule
from ilp.branch import branch_and_bound
from ilp.listsched import improve, initial_schedule, makespan, structure
from ilp.problem import SINGLE, build_problem
from ilp.search_tables import split_sinks


def _list_schedule(problem):
    """The list scheduler's best schedule (modes, starts, makespan), with no bound to stop at."""
    return improve(problem, initial_schedule(problem, 0.0), 0.0)


@st.composite
def fanned(draw):
    """Twin sources feeding every one of k copies of a chain, and a third source feeding
    every chain's last op, all in one part (like Q and K projections feeding the attention
    head groups, and V their ends): branch symmetry behind hubs, found as the state of the
    search evolves."""
    g = nx.DiGraph()
    twin = (draw(st.sampled_from(CORES[:3])), draw(st.integers(1, 9)), draw(st.integers(1, 9)))
    for name in ("q", "k"):
        g.add_node(
            name, units=node_units(twin[0]), latency_s=twin[1] * US, parallel_latency_s=twin[2] * US
        )
    g.add_node(
        "v",
        units=node_units("TC"),
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
            g.add_node(
                f"h{c}.{k}", units=node_units(core), latency_s=lat * US, parallel_latency_s=par * US
            )
            if k:
                g.add_edge(f"h{c}.{k - 1}", f"h{c}.{k}")
        g.add_edges_from((src, f"h{c}.0") for src in ("q", "k"))
        g.add_edge("v", f"h{c}.{length - 1}")
    return g


@budget(40, deadline=None)
@given(fanned(), st.integers(1, 3), st.integers(1, 2), st.booleans())
def test_search_is_exact_on_branches_behind_hubs(g, num_tc, num_vc, blocks_all):
    run_exact(g, cores(num_tc, num_vc), blocks_all, solver="list")


@budget(40, deadline=None)
@given(dags(max_ops=7), st.integers(1, 3), st.integers(1, 3), st.integers(1, 30))
def test_search_out_of_nodes_keeps_its_best_schedule(g, num_tc, num_vc, nodes):
    """A tiny node budget still returns a checked schedule, no longer than the list
    schedule, and the same one every time (no clock involved)."""
    runs = []
    for _ in range(2):
        schedule.clear_caches()
        runs.append(solve_schedule(g, cores(num_tc, num_vc), solver="list", search_nodes=nodes))
    s = runs[0]
    check_schedule(g, s, cores(num_tc, num_vc))
    assert (s.makespan_s, dict(s.start_s), s.parallel) == (
        runs[1].makespan_s,
        dict(runs[1].start_s),
        runs[1].parallel,
    )
    plain = solve_schedule(g, cores(num_tc, num_vc), solver="list", search_nodes=0)
    assert s.makespan_s <= plain.makespan_s * (1 + 1e-12)
    assert s.makespan_s >= brute_force(g, cores(num_tc, num_vc)) * (1 - 1e-9)
    if s.method == Method.SEARCH:
        assert s.status == ScheduleStatus.OPTIMAL


@budget(40, deadline=None)
@given(dags(max_ops=7), st.integers(1, 3), st.integers(1, 3), st.booleans())
def test_search_stops_where_its_schedule_meets_a_known_bound(g, num_tc, num_vc, blocks_all):
    """Given the optimum as a lower bound, the search stops at a schedule that meets it,
    proven, no later than the search that has to exhaust its tree."""
    problem = build_problem(g, cores(num_tc, num_vc), parallel_blocks_all=blocks_all).problem
    st_ = structure(problem)
    start = _list_schedule(problem)
    close = 1e-6
    full = branch_and_bound(problem, st_, start, close, 10**6)
    assert full.proven
    best = brute_force(g, cores(num_tc, num_vc), blocks_all)
    assert_optimal(full.makespan_s, best)
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


def _search_from_serial(g, num_tc, num_vc, blocks_all, resources=None):
    """Started from every op single-core, one after another (not the list schedule, which
    is often optimal already), the search alone must reach the brute-force optimum: its
    pruning rules (split sinks last among them) may cut schedules, never every optimal one."""
    problem = build_problem(
        g, cores(num_tc, num_vc), parallel_blocks_all=blocks_all, resources=resources
    ).problem
    serial = _one_after_another(problem)
    found = branch_and_bound(problem, structure(problem), serial, 1e-9, 10**6)
    assert found.proven
    assert_optimal(found.makespan_s, brute_force(g, cores(num_tc, num_vc), blocks_all, resources))
    assert makespan(problem, found.modes, found.start) == pytest.approx(found.makespan_s)


@budget(100, deadline=None)
@given(dags(), st.integers(1, 3), st.integers(1, 3), st.booleans())
def test_search_from_a_serial_schedule_finds_the_optimum(g, num_tc, num_vc, blocks_all):
    _search_from_serial(g, num_tc, num_vc, blocks_all)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(dags(max_ops=7), st.integers(1, 3), st.integers(1, 3), st.booleans())
def test_search_from_a_serial_schedule_finds_the_optimum_bigger(g, num_tc, num_vc, blocks_all):
    _search_from_serial(g, num_tc, num_vc, blocks_all)


def test_split_sinks_end_the_schedule_unless_a_nop_may_run_beside_them():
    """A split op with no successors can move to the end, where it blocks nothing; not
    when a ``Nop`` op it does not follow could run beside it, as cutting its time out would
    shorten that op, nor when split ops hold only their own cores."""

    def tail_names(g, blocks_all=True):
        c = build_problem(g, cores(4, 1), parallel_blocks_all=blocks_all)
        mask = split_sinks(c.problem, structure(c.problem))
        return {v for k, v in enumerate(c.nodes) if (mask >> k) & 1}

    g = graph(
        [("a", "TC", 8.0, 2.0), ("w", "TC", 8.0, 2.0), ("x", "VC", 1.0, 1.0)],
        [("a", "w"), ("a", "x")],
    )
    assert tail_names(g) == {"w"}  # x cannot split faster
    assert tail_names(g, blocks_all=False) == set()
    g.add_node("n", latency_s=5.0)
    g.add_edge("a", "n")
    assert tail_names(g) == set()
    g.add_edge("n", "w")
    assert tail_names(g) == {"w"}


def test_an_op_that_must_split_waits_for_the_running_ops():
    """o3 -> o4 on the vector cores takes 16 with o3 single-core, so below 10 o3 must split,
    and a split op holds the whole chip. Once the search starts any single-core op first
    (o1 for 5 on a tensor core), o3 cannot split before that op finishes: 5 + 1 + 7 > 10.
    The node bound sees it at once, so the list schedule's 10 is proven optimal one level
    down."""
    g = graph(
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
    assert brute_force(g, cores(3, 2)) == pytest.approx(10 * US)
    problem = build_problem(g, cores(3, 2)).problem
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
    root, where each path alone (5) and each core type's work leave it open."""
    g = graph(
        [
            ("a0", "TC", 4 * US, 2 * US),
            ("b0", "VC", 7 * US, 3 * US),
            ("a1", "TC", 4 * US, 2 * US),
            ("b1", "VC", 7 * US, 3 * US),
        ],
        [("a0", "b0"), ("a1", "b1")],
    )
    assert brute_force(g, cores(4, 2)) == pytest.approx(10 * US)
    problem = build_problem(g, cores(4, 2)).problem
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
    return graph([(name, core, s * US, p * US) for name, core, s, p in ops], edges)


@budget(150, deadline=None)
@given(
    st.one_of(chains(), branchy(), fanned()), st.integers(1, 4), st.integers(1, 4), st.booleans()
)
def test_search_beats_an_incumbent_just_above_the_optimum_on_branches(
    g, num_tc, num_vc, blocks_all
):
    """On graphs with interchangeable branches, where the node bound spreads a path over the
    branches, the search must find the optimum below an incumbent just above it: a bound
    above the best completion of any node on the way would leave that incumbent."""
    problem = build_problem(g, cores(num_tc, num_vc), parallel_blocks_all=blocks_all).problem
    best = brute_force(g, cores(num_tc, num_vc), blocks_all)
    modes, start, _ = _one_after_another(problem)
    above = (modes, start, best * (1 + 1e-6))
    found = branch_and_bound(problem, structure(problem), above, 1e-9, 10**6)
    assert found.proven
    assert_optimal(found.makespan_s, best)
    assert makespan(problem, found.modes, found.start) == pytest.approx(found.makespan_s)


def test_a_known_bound_spares_the_proof():
    """Here the starting list schedule (14) is one off the optimum (13): once the search
    finds 13 the bound ends it, where without it the tree must be searched to prove 13."""
    g = graph(
        [
            ("o0", "VC", 4 * US, 3 * US),
            ("o1", "VC", 3 * US, 9 * US),
            ("o2", "TC", 5 * US, 5 * US),
            ("o3", "TCandVC", 5 * US, 8 * US),
            ("o4", "TC", 9 * US, 6 * US),
        ],
        [("o1", "o4"), ("o2", "o4")],
    )
    assert brute_force(g, cores(3, 2)) == pytest.approx(13 * US)
    problem = build_problem(g, cores(3, 2)).problem
    st_ = structure(problem)
    start = initial_schedule(problem, 0.0)
    assert start[2] == pytest.approx(14 * US)
    full = branch_and_bound(problem, st_, start, 1e-6, 10**6)
    met = branch_and_bound(problem, st_, start, 1e-6, 10**6, floor_s=13 * US)
    assert full.proven and met.proven
    assert full.makespan_s == pytest.approx(13 * US) == met.makespan_s
    assert met.nodes < full.nodes
