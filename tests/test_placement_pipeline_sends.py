"""Pipeline sends that run one at a time (DeepSpeed's engine) against paired ones (Megatron).

The oracle is an event simulation of DeepSpeed's ``TrainSchedule`` (microsoft/DeepSpeed
559c4ce11, deepspeed/runtime/pipe/schedule.py l.189-290): each stage runs its commands in
order; a transfer is a blocking broadcast both neighbours join (p2p.py l.48-86), so it
starts when the later of the two reaches it and holds both for its time.
"""

from __future__ import annotations

import math

import pytest

from placement import (
    Cluster,
    Layout,
    PlacementProblem,
    StageEdge,
    StageGraph,
    StageLayer,
    evaluate_fixed,
)
from placement import network as net
from placement.pipelining import pipeline_s
from workloads.framework import framework_profile


def _train_schedule(stage: int, p: int, m: int) -> list[tuple]:
    """DeepSpeed's TrainSchedule.steps() for ``stage``: ("F"|"B",) or ("x", kind, lower
    stage of the pair, micro-batch), each transfer its own command."""

    def micro_batch(step: int) -> tuple[int, bool]:
        even_step, even_stage = step % 2 == 0, stage % 2 == 0
        if even_step and even_stage:
            return step // 2 - stage // 2, True
        if not even_step and not even_stage:
            return (step - 1) // 2 - stage // 2, True
        if even_step:
            return step // 2 - p + (stage + 1) // 2, False
        return (step - 1) // 2 - p + 1 + stage // 2, False

    cmds, prev = [], -1
    for step in range(2 * (m + p - 1)):
        mb, forward = micro_batch(step)
        valid, was = 0 <= mb < m, 0 <= prev < m
        if forward and stage > 0:
            cmds += [("x", "act", stage - 1, mb)] if valid else []
            cmds += [("x", "grad", stage - 1, prev)] if was else []
        elif not forward and stage < p - 1:
            cmds += [("x", "act", stage, prev)] if was else []
            cmds += [("x", "grad", stage, mb)] if valid else []
        if valid:
            cmds.append(("F",) if forward else ("B",))
        prev = mb
    return cmds


def _simulate(p: int, m: int, f: float, b: float, transfer_s: float) -> float:
    """Makespan of the schedule with every transfer a rendezvous of ``transfer_s``."""
    cmds = [_train_schedule(s, p, m) for s in range(p)]
    at, clock = [0] * p, [0.0] * p
    while any(at[s] < len(cmds[s]) for s in range(p)):
        moved = False
        for s in range(p):
            while at[s] < len(cmds[s]):
                cmd = cmds[s][at[s]]
                if cmd[0] != "x":
                    clock[s] += f if cmd[0] == "F" else b
                    at[s] += 1
                    moved = True
                    continue
                peer = cmd[2] + 1 if s == cmd[2] else cmd[2]
                if at[peer] >= len(cmds[peer]) or cmds[peer][at[peer]] != cmd:
                    break
                clock[s] = clock[peer] = max(clock[s], clock[peer]) + transfer_s
                at[s] += 1
                at[peer] += 1
                moved = True
        assert moved, "the schedule deadlocks"
    return max(clock)


def test_train_schedule_without_transfers_is_1f1b():
    """With free transfers the engine's lock-step schedule is the 1F1B closed form."""
    for p, m in ((4, 8), (5, 3), (8, 32)):
        assert math.isclose(_simulate(p, m, 1.0, 3.0, 0.0), pipeline_s(4.0, m, p))


@pytest.mark.parametrize(("p", "m"), [(8, 32), (12, 48)])
def test_one_at_a_time_sends_cost_two_transfers_per_boundary(p, m):
    """Each stage of the simulated engine spends close to four transfers per micro-batch: the
    closed form with two per boundary bounds it within 2 %, the paired count (one per
    boundary) falls short of it."""
    f, b, c = 1.0, 2.0, 0.05
    simulated = _simulate(p, m, f, b, c)
    serial = pipeline_s(f + b + 2 * 2 * c, m, p)
    paired = pipeline_s(f + b + 2 * 1 * c, m, p)
    assert paired < simulated <= serial < simulated * 1.02


def _chain(n: int, t: int, nbytes: float) -> StageGraph:
    layers = tuple(
        StageLayer(f"b{i}", 1.0, 2.0, parameters=10, stash_bytes=1.0, tensor_parallel=t > 1)
        for i in range(n)
    )
    return StageGraph(layers, tuple(StageEdge(i, i + 1, nbytes) for i in range(n - 1)), Layout(t=t))


def _links(sends: float, gathers: float, t: int) -> tuple[PlacementProblem, float]:
    cluster = Cluster(
        devices=4 * t,
        devices_per_node=t,
        intra_node_bandwidth_bytes_per_s=300e9,
        inter_node_bandwidth_bytes_per_s=25e9,
    )
    problem = PlacementProblem(
        (_chain(8, t, 1e9),),
        cluster,
        hbm_bytes=1e12,
        global_batch=8,
        p2p_sends=sends,
        p2p_gathers=gathers,
    )
    return problem, evaluate_fixed(problem, Layout(t=t, p=4)).breakdown.pp_comm_exposed_s


def test_serial_sends_and_gathers_price_each_transfer_of_a_boundary():
    """A boundary message costs ``sends`` sends of its slice and ``gathers`` all-gathers."""
    netw = Cluster(devices=64, devices_per_node=8)
    one = net.boundary_link(netw, 64, 8, False)
    send_bw, send_lat = net.group_link(netw, 64)
    tp_bw, tp_lat = net.group_link(netw, 8)
    bw, lat = net.boundary_link(netw, 64, 8, False, sends=2, gathers=1.5)
    assert math.isclose(1 / bw, 2 / (8 * send_bw) + 1.5 * 7 / (8 * tp_bw))
    assert math.isclose(lat, 2 * send_lat + 1.5 * tp_lat)
    assert net.p2p_s(1e9, (bw, lat)) > 1.5 * net.p2p_s(1e9, one)
    # without a tensor-parallel split the whole tensor goes, twice
    whole = net.boundary_link(netw, 64, 1, False, sends=2, gathers=1.5)
    assert math.isclose(net.p2p_s(1e9, whole), 2 * net.p2p_s(1e9, net.group_link(netw, 64)))
    # a fixed layout's exposed pipeline time follows: twice the sends of a t = 1 chain
    _, paired = _links(1.0, 1.0, 1)
    _, serial = _links(2.0, 1.0, 1)
    assert paired > 0 and math.isclose(serial, 2 * paired)


def test_deepspeed_profile_sends_one_at_a_time():
    ds, megatron = framework_profile("deepspeed-2022"), framework_profile("megatron-2022")
    assert (ds.p2p_sends, ds.p2p_gathers) == (2.0, 1.5)
    assert (megatron.p2p_sends, megatron.p2p_gathers) == (1.0, 1.0)
    # Megatron-DeepSpeed's layers reduce every tensor-parallel gradient synchronously
    assert ds.tp_overlap == set()
    with pytest.raises(ValueError, match="p2p_sends = 0.5 must be >= 1"):
        _links(0.5, 1.0, 1)
