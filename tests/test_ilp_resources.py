"""Resources as data: a further resource kind (a communication channel some ops hold)
beside the cores, checked against the brute force of ``ilp_oracle`` for the list schedule's
feasibility and the search's and the MIP's optimality."""

from __future__ import annotations

from unittest.mock import patch

import pytest
from budget import budget
from hypothesis import given, settings
from hypothesis import strategies as st
from ilp_oracle import (
    assert_optimal,
    brute_force,
    check_schedule,
    cores,
    dags,
    graph,
    run_exact,
    run_list,
)

from arch_space.presets import preset
from ilp import formulation, schedule, solve_schedule
from ilp.branch import branch_and_bound
from ilp.listsched import makespan, structure
from ilp.problem import PARALLEL, SINGLE, build_problem
from phaze_common.errors import ConfigError


def _channelled(g, units):
    """``g`` with every op's channel demand at most ``units``."""
    for _, a in g.nodes(data=True):
        if "demand" in a:
            a["demand"] = {"channel": min(a["demand"]["channel"], units)}
    return g


cases = st.tuples(
    dags(channel=2), st.integers(1, 3), st.integers(1, 3), st.integers(1, 2), st.booleans()
)


@budget(80, deadline=None)
@given(cases)
def test_list_schedule_with_a_channel_is_feasible(case):
    g, num_tc, num_vc, units, blocks_all = case
    run_list(_channelled(g, units), cores(num_tc, num_vc), blocks_all, {"channel": units})


@budget(80, deadline=None)
@given(cases)
def test_search_with_a_channel_is_exact(case):
    g, num_tc, num_vc, units, blocks_all = case
    run_exact(
        _channelled(g, units), cores(num_tc, num_vc), blocks_all, {"channel": units}, solver="list"
    )


@budget(60, deadline=None)
@given(cases)
def test_search_from_a_serial_schedule_with_a_channel_finds_the_optimum(case):
    g, num_tc, num_vc, units, blocks_all = case
    resources = {"channel": units}
    g = _channelled(g, units)
    problem = build_problem(
        g, cores(num_tc, num_vc), parallel_blocks_all=blocks_all, resources=resources
    ).problem
    start, t = [], 0.0
    for i in range(problem.n):
        start.append(t)
        t += problem.single_s[i]
    serial = ((SINGLE,) * problem.n, tuple(start), t)
    found = branch_and_bound(problem, structure(problem), serial, 1e-9, 10**6)
    assert found.proven
    assert_optimal(found.makespan_s, brute_force(g, cores(num_tc, num_vc), blocks_all, resources))
    assert makespan(problem, found.modes, found.start) == pytest.approx(found.makespan_s)


@budget(40, deadline=None)
@given(cases)
def test_mip_with_a_channel_is_exact(case):
    g, num_tc, num_vc, units, blocks_all = case
    run_exact(
        _channelled(g, units), cores(num_tc, num_vc), blocks_all, {"channel": units}, search_nodes=0
    )


@settings(max_examples=30, deadline=None)
@given(cases)
def test_mip_with_per_unit_assignment_and_a_channel_is_exact(case):
    """Force the z-variable assignment (instead of antichain rows) for every kind."""
    g, num_tc, num_vc, units, blocks_all = case
    schedule.clear_caches()
    with patch.object(formulation, "MAX_ANTICHAINS", -1):
        run_exact(
            _channelled(g, units),
            cores(num_tc, num_vc),
            blocks_all,
            {"channel": units},
            search_nodes=0,
        )
    schedule.clear_caches()


def test_collectives_on_one_channel_run_one_after_another():
    """Two collectives beside two GEMMs: on a one-unit channel they queue (6), on two they
    overlap (3), and the schedule names the channel unit each holds."""
    g = graph([("a", "TC", 1.0, 1.0), ("b", "TC", 1.0, 1.0)])
    for name in ("x", "y"):
        g.add_node(name, latency_s=3.0, demand={"channel": 1})
    one = solve_schedule(g, cores(2, 1), resources={"channel": 1})
    check_schedule(g, one, cores(2, 1), resources={"channel": 1})
    assert one.makespan_s == 6.0 and one.peak_utilisation["channel"] == 1.0
    assert {one.core_ids["x"], one.core_ids["y"]} == {"channel0"}
    two = solve_schedule(g, cores(2, 1), resources={"channel": 2})
    assert two.makespan_s == 3.0
    assert {two.core_ids["x"], two.core_ids["y"]} == {"channel0", "channel1"}
    assert two.utilisation["channel"] == 1.0


def test_a_problem_declares_kinds_and_each_ops_demand():
    """A collective on the channel, a GEMM that blocks everything when split, and one that
    holds only the tensor cores when split ops do not block everything."""
    g = graph([("mm", "TC", 4.0, 1.0)])
    g.add_node("ar", latency_s=2.0, demand={"channel": 1})
    p = build_problem(g, cores(4, 2), resources={"channel": 1}).problem
    assert (p.kinds, p.capacity) == (("TC", "VC", "channel"), (4, 2, 1))
    mm, ar = 0, 1
    assert p.demand(mm, SINGLE) == {"TC": 1, "VC": 0, "channel": 0}
    assert p.demand(mm, PARALLEL) == {"TC": 4, "VC": 2, "channel": 0}
    assert p.demand(ar, SINGLE) == p.demand(ar, PARALLEL) == {"TC": 0, "VC": 0, "channel": 1}
    assert p.holds(ar) and p.can_parallel == (True, False)
    own = build_problem(g, cores(4, 2), parallel_blocks_all=False, resources={"channel": 1}).problem
    assert own.demand(mm, PARALLEL) == {"TC": 4, "VC": 0, "channel": 0}


def test_bad_resources_are_named():
    g = graph([("a", "TC", 1.0, 1.0)])
    g.nodes["a"]["demand"] = {"link": 1}
    with pytest.raises(ConfigError) as e:
        solve_schedule(g, cores(1, 1), resources={"channel": 0})
    msg = str(e.value)
    assert "resources['channel'] = 0 must be an integer >= 1" in msg
    assert "graph node 'a': demand names 'link'; the declared further kinds are: 'channel'" in msg
    g.nodes["a"]["demand"] = {"channel": 2}
    with pytest.raises(ConfigError, match=r"demand\['channel'\] = 2 exceeds the 1 units"):
        solve_schedule(g, cores(1, 1), resources={"channel": 1})
    with pytest.raises(
        ConfigError, match="resources kind 'TC' must be a name other than the cores'"
    ):
        solve_schedule(g, cores(1, 1), resources={"TC": 2})
    with pytest.raises(ConfigError, match="resources = 3 must map kinds to units"):
        solve_schedule(g, cores(1, 1), resources=3)


def test_a_design_declares_its_resources():
    acc = preset("tpuv4")
    assert dict(acc.capacity) == {"TC": acc.num_tc, "VC": acc.num_vc}
    assert [(u.kind, u.count, u.ops_per_cycle) for u in acc.units] == [
        ("TC", acc.num_tc, acc.tc_rows * acc.tc_cols),
        ("VC", acc.num_vc, acc.vc_lanes),
    ]
    with pytest.raises(TypeError):
        acc.capacity["TC"] = 1  # type: ignore[index]
