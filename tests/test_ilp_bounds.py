"""Lower bounds against the brute-force optimum: the combinatorial bounds of
:mod:`ilp.bounds` (public :func:`ilp.makespan_lower_bound` and over resources as data) and
the collapsed LP bound of :mod:`ilp.lpbound`."""

from __future__ import annotations

import networkx as nx
import pytest
from budget import budget
from hypothesis import given, settings
from hypothesis import strategies as st
from ilp_oracle import brute_force, cores, cost_bound, dags, graph, node_units

from ilp.listsched import lower_bound, structure
from ilp.lpbound import collapsed_lower_bound
from ilp.problem import build_problem


def _bound(g, num_tc, num_vc, blocks_all):
    return cost_bound(g, cores(num_tc, num_vc), blocks_all)


@budget(300, deadline=None)
@given(dags(), st.integers(1, 4), st.integers(1, 4), st.booleans())
def test_lower_bound_never_exceeds_the_optimum(g, num_tc, num_vc, blocks_all):
    best = brute_force(g, cores(num_tc, num_vc), blocks_all)
    assert _bound(g, num_tc, num_vc, blocks_all) <= best * (1 + 1e-12)


def test_forced_split_ops_are_serialised_by_the_bound():
    """Two independent ops far slower on one core than split: each must split, and split ops
    hold the whole chip, so they run one after the other. The critical path (1) and the
    per-type core-seconds (4 / 4 = 1) both miss that; the destructive bound finds 2."""
    g = nx.DiGraph()
    g.add_node("a", units=node_units("TC"), latency_s=10.0, parallel_latency_s=1.0)
    g.add_node("b", units=node_units("VC"), latency_s=10.0, parallel_latency_s=1.0)
    assert brute_force(g, cores(4, 4)) == 2.0
    assert _bound(g, 4, 4, True) == 2.0
    assert _bound(g, 4, 4, False) == 1.0  # split ops of different types may overlap then
    assert brute_force(g, cores(4, 4), blocks_all=False) == 1.0


def _check_collapsed_bound(g, num_tc, num_vc):
    problem = build_problem(g, cores(num_tc, num_vc)).problem
    best = brute_force(g, cores(num_tc, num_vc))
    st_ = structure(problem)
    # with the optimum as the feasible makespan given (the most ops forced to split) and
    # with a loose one (all ops one after another on one core)
    for ub in (best, sum(problem.single_s)):
        assert collapsed_lower_bound(problem, st_, ub) <= best * (1 + 1e-9)


@budget(60, deadline=None)
@given(dags(), st.integers(1, 4), st.integers(1, 4))
def test_collapsed_lp_bound_never_exceeds_the_optimum(g, num_tc, num_vc):
    _check_collapsed_bound(g, num_tc, num_vc)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(dags(max_ops=7), st.integers(1, 4), st.integers(1, 4))
def test_collapsed_lp_bound_never_exceeds_the_optimum_bigger(g, num_tc, num_vc):
    _check_collapsed_bound(g, num_tc, num_vc)


def test_collapsed_lp_bound_pays_every_parallel_op_outside_the_rest():
    """Four tensor ops of 3.9 s on the one tensor core (1 s split, which holds the chip)
    beside a 4 s vector chain. Splitting k of them costs k s of the chip; the rest queue on
    the core: the best is k = 3, 3 + max(4, 3.9) = 7 s. Every path is at most 4 s and the
    core-seconds 4 s; the LP pays each split second outside the rest and finds 6.97 s."""
    spec = [(f"t{k}", "TC", 3.9, 1.0) for k in range(4)]
    g = graph([*spec, ("v1", "VC", 2.0, 2.0), ("v2", "VC", 2.0, 2.0)], [("v1", "v2")])
    problem = build_problem(g, cores(1, 1)).problem
    assert brute_force(g, cores(1, 1)) == pytest.approx(7.0)
    old = _bound(g, 1, 1, True)
    new = collapsed_lower_bound(problem, structure(problem), 7.0)
    assert old < 6.5 < 6.97 < new <= 7.0


@budget(150, deadline=None)
@given(dags(channel=2), st.integers(1, 3), st.integers(1, 3), st.integers(1, 2), st.booleans())
def test_bounds_over_a_further_resource_never_exceed_the_optimum(
    g, num_tc, num_vc, channel, blocks_all
):
    """With a channel some ops hold, the bounds over resources as data (and the collapsed
    LP bound, where parallel ops block everything) stay below the brute-force optimum."""
    for _, a in g.nodes(data=True):
        if "demand" in a:
            a["demand"] = {"channel": min(a["demand"]["channel"], channel)}
    resources = {"channel": channel}
    best = brute_force(g, cores(num_tc, num_vc), blocks_all, resources)
    c = build_problem(g, cores(num_tc, num_vc), parallel_blocks_all=blocks_all, resources=resources)
    problem = c.problem
    assert lower_bound(problem) <= best * (1 + 1e-12)
    for ub in (best, sum(problem.single_s)):
        assert collapsed_lower_bound(problem, structure(problem), ub) <= best * (1 + 1e-9)


def test_a_channel_serialises_what_the_cores_would_overlap():
    """Two collectives on a one-unit channel and two GEMMs on four tensor cores: the
    channel's work (3 + 3) bounds the makespan, which no core count sees."""
    g = graph([("a", "TC", 1.0, 1.0), ("b", "TC", 1.0, 1.0)])
    for name in ("x", "y"):
        g.add_node(name, latency_s=3.0, demand={"channel": 1})
    c = build_problem(g, cores(4, 1), resources={"channel": 1})
    assert lower_bound(c.problem) == 6.0 == brute_force(g, cores(4, 1), resources={"channel": 1})
    g2 = nx.DiGraph(g)
    for name in ("x", "y"):
        del g2.nodes[name]["demand"]
    assert lower_bound(build_problem(g2, cores(4, 1)).problem) == 3.0
