"""Closed forms, invariants and error messages of the placement model."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from budget import budget
from hypothesis import given
from hypothesis import strategies as st

from arch_space.perf.device import preset_profile
from arch_space.perf.multinode import nic_busbw_fraction
from phaze_common.errors import ConfigError, Infeasible
from placement import (
    Cluster,
    Layout,
    Links,
    PlacementProblem,
    StageEdge,
    StageGraph,
    StageLayer,
    evaluate_fixed,
    megatron_chunks,
    parse_reference_instance,
    parse_strategy,
    place,
    solve_reference,
)
from placement import network as net
from placement.costs import max_stages_fitting
from placement.synthetic import GptShape, gpt_stage_graph


def _ref_doc(**over):
    doc = {
        "maxMemoryPerDevice": 6,
        "maxDevices": 2,
        "bandwidth": 1.0,
        "mbsInBatch": 4,
        "activationRecomputation": True,
        "optimizerAlgorithm": "SGD",
        "nodes": {
            "1": [
                {
                    "id": 7,
                    "parameterSize": 0,
                    "activationSize": 5,
                    "optimalLatencyFw": 1,
                    "optimalLatencyBw": 20,
                    "isTensorParallelized": False,
                },
                {
                    "id": 9,
                    "parameterSize": 0,
                    "activationSize": 5,
                    "optimalLatencyFw": 1,
                    "optimalLatencyBw": 2,
                    "isTensorParallelized": False,
                },
            ]
        },
        "edges": {"1": [{"sourceId": 7, "destId": 9, "communicationCost": 8}]},
    }
    doc.update(over)
    return doc


def test_reference_objective_by_hand():
    # One stage needs 5 + 5 > 6 bytes, so two stages on two devices and d = 1.
    # First stage (s = 2, recompute): forward 1, combined pass max(1, 8/1) + 20 = 28 -> 29.
    # Last stage: forward 8 + 1, backward 2 -> 11. Time 29 * (4 + 2 - 1) = 145.
    got = solve_reference(parse_reference_instance(_ref_doc()))
    assert got.final_time_per_batch == 145
    assert [s.nodes for s in got.stages] == [(7,), (9,)]
    assert (got.tensor_parallel_degree, got.data_parallel_degree) == (1, 1)


def test_reference_data_parallel_term_by_hand():
    # Plenty of memory and 4 devices: one stage of load 1+1 + 20+2 = 24 on each of d devices,
    # time 24 * ceil(4 / d) + 4 (d - 1) P / (bandwidth d) with P = 3 bytes: d = 4 gives
    # 24 + 9 = 33 (d = 2: 48 + 6; d = 1: 96).
    doc = _ref_doc(maxMemoryPerDevice=1000, maxDevices=4, activationRecomputation=False)
    doc["nodes"]["1"][0]["parameterSize"] = 3
    got = solve_reference(parse_reference_instance(doc))
    assert got.final_time_per_batch == 33
    assert got.data_parallel_degree == 4
    assert len(got.stages) == 1


def test_reference_infeasible_says_why():
    doc = _ref_doc(maxMemoryPerDevice=4)
    with pytest.raises(Infeasible, match=r"needs 5 B per device .* has maxMemoryPerDevice = 4 B"):
        solve_reference(parse_reference_instance(doc))


def test_reference_files_as_the_reference_writes_them():
    # Solver/solver.py writes mbsInBatch as a float, an energy per node and the fixed baseline
    doc = _ref_doc(mbsInBatch=4.0, fixedPP=1, fixedTMPC=1, fixedDP=1, numTransformerLayers=2)
    for node in doc["nodes"]["1"]:
        node["energy"] = 1.5
    assert solve_reference(parse_reference_instance(doc)).final_time_per_batch == 145
    with pytest.raises(ConfigError, match=r"mbsInBatch = 4\.5 must be an integer"):
        parse_reference_instance(_ref_doc(mbsInBatch=4.5))


def test_reference_errors_are_reported_together():
    doc = _ref_doc(optimizerAlgorithm="adam", maxDevice=3)
    doc["nodes"]["1"][0]["optimalLatencyFW"] = 1
    with pytest.raises(ConfigError) as e:
        parse_reference_instance(doc, source="x.json")
    msg = str(e.value)
    assert "unknown key 'maxDevice'; did you mean 'maxDevices'?" in msg
    assert "optimizerAlgorithm = 'adam' must be one of SGD, Adam" in msg
    assert "unknown key 'optimalLatencyFW'; did you mean 'optimalLatencyFw'?" in msg


def test_reference_rejects_missing_keys_and_cycles():
    doc = _ref_doc()
    del doc["bandwidth"]
    with pytest.raises(ConfigError, match="missing required keys bandwidth"):
        parse_reference_instance(doc)
    doc = _ref_doc()
    doc["edges"]["1"].append({"sourceId": 9, "destId": 7, "communicationCost": 1})
    with pytest.raises(ConfigError, match="cycle"):
        parse_reference_instance(doc)


# --- network --------------------------------------------------------------------------------


def test_ring_collectives_closed_forms():
    ln = (100.0, 1.0)
    assert net.allreduce_s(300.0, 4, ln) == 1.0 + 2 * 3 / 4 * 3.0
    assert net.reduce_scatter_s(300.0, 4, ln) == 1.0 + 3 / 4 * 3.0
    assert net.all_gather_s(300.0, 4, ln) == net.reduce_scatter_s(300.0, 4, ln)
    assert net.allreduce_s(300.0, 1, ln) == 0.0
    assert net.p2p_s(300.0, ln) == 4.0


def test_measured_links_take_the_a100_curve_inside_a_node():
    curve = preset_profile("a100").intra_node
    cl = Cluster(devices=64)
    size = 134217728.0  # a measured point: all-reduce busbw 176.92 GB/s
    bw, lat = net.measured_link(cl, curve, False, size, "all_reduce")
    assert float(bw) == pytest.approx(176.92e9) and float(lat) == 0.0
    # a send of S / 8 bytes is one step of the 8-device ring over S bytes
    bw, _ = net.measured_link(cl, curve, False, size / 8, "p2p")
    assert float(bw) == pytest.approx(176.92e9)
    # without a curve: the cluster's links; a ring across nodes drives one NIC per member
    # of the group in a node, at the measured share of the NICs' line rate (192 of 200 GB/s
    # on DGX A100, 380 of 400 on DGX H100, 350 of 400 at 248 H200 nodes)
    share = (192 / 200 + 380 / 400 + 350 / 400) / 3
    assert nic_busbw_fraction() == pytest.approx(share)
    bw, lat = net.measured_link(cl, None, True, size, "ring")
    assert (float(bw), float(lat)) == pytest.approx((25e9 * share, 5e-6))
    bw, _ = net.measured_link(cl, None, True, size, "ring", 1.0, 8)
    assert float(bw) == pytest.approx(8 * 25e9 * share)
    # never above the link inside a node, and sends are not rings
    assert float(net.measured_link(cl, None, True, size, "ring", 1.0, 64)[0]) == 300e9
    assert float(net.measured_link(cl, None, True, size, "p2p", 1.0, 8)[0]) == 25e9
    # a data-parallel group t apart: devices_per_node / t members in a node, at most all
    assert int(net.members_per_node(cl, 2, 32)) == 4 and int(net.members_per_node(cl, 8, 4)) == 1
    assert int(net.members_per_node(cl, 1, 2)) == 2


@given(st.floats(1.0, 1e11), st.sampled_from(["all_reduce", "ring", "p2p"]))
def test_across_nodes_is_never_faster_than_inside(nbytes, kind):
    curve = preset_profile("a100").intra_node
    cl = Cluster(devices=64)
    volume = 1.75 if kind == "all_reduce" else 1.0
    times = [
        float(lat + volume * nbytes / bw)
        for bw, lat in (
            net.measured_link(cl, curve, inter, nbytes, kind, volume) for inter in (False, True)
        )
    ]
    assert times[1] >= times[0] * (1 - 1e-12)


def test_links_follow_the_megatron_rank_order():
    netw = Cluster(
        devices=64,
        devices_per_node=8,
        intra_node_bandwidth_bytes_per_s=300e9,
        inter_node_bandwidth_bytes_per_s=25e9,
    )
    assert Layout(t=8).links(netw) == Links(False, False, False, False, False)
    assert Layout(t=16).links(netw).tp
    assert not Layout(t=2, d=4).links(netw).dp  # 8 consecutive ranks: one node
    assert Layout(t=2, d=8).links(netw).dp
    assert Layout(t=2, cp=4, ep=2).links(netw) == Links(False, False, True, False, False)
    assert Layout(t=8, p=8).links(netw).pp and not Layout(t=8, p=8).links(netw, 8).pp
    assert net.group_link(netw, 8)[0] == 300e9 and net.group_link(netw, 16)[0] == 25e9
    bw, lat = net.boundary_link(netw, 64, 8, sequence_parallel=False)  # SC21 scatter/gather
    assert math.isclose(1 / bw, 1 / (8 * 25e9) + 7 / (8 * 300e9))
    assert lat == netw.inter_node_latency_s + netw.intra_node_latency_s
    assert net.boundary_link(netw, 64, 8, sequence_parallel=True) == net.group_link(netw, 64)
    assert net.boundary_link(netw, 64, 1, sequence_parallel=False) == net.group_link(netw, 64)
    sp = net.tp_collective_s("reduce_scatter", 1e9, 8, netw)
    sp += net.tp_collective_s("all_gather", 1e9, 8, netw)
    ar = net.tp_collective_s("all_reduce", 1e9, 8, netw)
    assert math.isclose(sp - netw.intra_node_latency_s, ar)  # same bytes, one more message


# --- our model ------------------------------------------------------------------------------


def _chain(n, t=1, f=1.0, b=2.0, r=0.0, params=10, stash=5.0, nbytes=0.0, tp=None):
    tp = (t > 1) if tp is None else tp
    layers = tuple(
        StageLayer(
            f"b{i}", f, b, parameters=params, stash_bytes=stash, recompute_s=r, tensor_parallel=tp
        )
        for i in range(n)
    )
    return StageGraph(layers, tuple(StageEdge(i, i + 1, nbytes) for i in range(n - 1)), Layout(t=t))


def _problem(graphs, devices=1, hbm=1e12, batch=4, **netw):
    return PlacementProblem(
        tuple(graphs), Cluster(devices=devices, **netw), hbm_bytes=hbm, global_batch=batch
    )


def test_one_device_is_the_sum_of_the_layers():
    g = _chain(5, f=1.0, b=2.0, r=0.5)
    got = place(_problem([g], devices=1, batch=6))
    assert (got.layout.t, got.layout.p, got.layout.d) == (1, 1, 1)
    assert got.breakdown.iteration_s == 6 * 5 * 3.5
    assert got.bubble_fraction == 0
    assert got.breakdown.communication_s == 0
    assert got.memory_breakdown.total_bytes == 5 * 10 * 18 + 5 * 5.0


def test_infeasible_names_the_need_and_the_capacity():
    g = _chain(3, params=int(2e9))  # 3 layers of 2e9 params * 18 B on one device: 100.6 GiB
    with pytest.raises(Infeasible, match=r"needs 101 GiB per device, has 20 GiB"):
        place(_problem([g], devices=1, hbm=20 * 2**30))


@st.composite
def _small(draw):
    n = draw(st.integers(2, 7))
    layers = tuple(
        StageLayer(
            f"l{i}",
            draw(st.integers(1, 9)),
            draw(st.integers(1, 9)),
            parameters=draw(st.integers(0, 4)),
            stash_bytes=draw(st.integers(0, 4)),
        )
        for i in range(n)
    )
    edges = tuple(StageEdge(i, i + 1, draw(st.integers(0, 9))) for i in range(n - 1))
    return _problem(
        [StageGraph(layers, edges)],
        devices=draw(st.sampled_from([1, 2, 4, 6])),  # whole nodes of 2
        hbm=draw(st.integers(20, 80)),
        batch=draw(st.integers(1, 6)),
        devices_per_node=2,
        intra_node_bandwidth_bytes_per_s=2.0,
        inter_node_bandwidth_bytes_per_s=1.0,
    )


@budget(60)
@given(_small(), st.sampled_from([1.5, 2.0, 4.0]))
def test_more_memory_bandwidth_or_devices_never_slows_down(problem, factor):
    def time_of(p):
        try:
            return place(p).breakdown.iteration_s
        except Infeasible:
            return math.inf

    base = time_of(problem)
    more_hbm = dataclasses.replace(problem, hbm_bytes=problem.hbm_bytes * factor)
    faster = dataclasses.replace(
        problem,
        cluster=dataclasses.replace(
            problem.cluster,
            intra_node_bandwidth_bytes_per_s=2.0 * factor,
            inter_node_bandwidth_bytes_per_s=1.0 * factor,
        ),
    )
    more_devices = dataclasses.replace(
        problem, cluster=dataclasses.replace(problem.cluster, devices=2 * problem.cluster.devices)
    )
    assert time_of(more_hbm) <= base
    assert time_of(faster) <= base
    assert time_of(more_devices) <= base


def test_chain_fast_path_equals_dag_path_on_a_gpt():
    netw = Cluster(devices=64, devices_per_node=8)
    shape = GptShape(layers=24, hidden=2048, heads=16)
    graphs = tuple(
        gpt_stage_graph(shape, t, netw, flops_per_s=1e14, recompute="selective")
        for t in (1, 2, 4, 8)
    )
    prob = PlacementProblem(graphs, netw, hbm_bytes=16 * 2**30, global_batch=256)
    fast, full = place(prob, method="chain"), place(prob, method="dag")
    assert (fast.layout.t, fast.layout.p, fast.layout.d) == (
        full.layout.t,
        full.layout.p,
        full.layout.d,
    )
    assert math.isclose(fast.breakdown.iteration_s, full.breakdown.iteration_s, rel_tol=1e-12)
    assert math.isclose(sum(fast.breakdown.terms().values()), fast.breakdown.iteration_s)


# --- fixed strategies -----------------------------------------------------------------------


def test_interleaved_schedule_closed_form():
    # 12 equal blocks, no transfers: per micro-batch a rank runs 12/p blocks; SC21 eq. 2.
    f, b, p, v, m = 1.0, 2.0, 4, 3, 8
    g = _chain(12, t=2, f=f, b=b, stash=1.0, params=0)
    prob = _problem([g], devices=8, batch=m, intra_node_latency_s=0.0, inter_node_latency_s=0.0)
    got = evaluate_fixed(prob, Layout(t=2, p=p, d=1, v=v))
    assert got.breakdown.iteration_s == pytest.approx((m + (p - 1) / v) * 12 / p * (f + b))
    assert got.bubble_fraction == pytest.approx((p - 1) / (v * m))
    # rank 0 holds min(2 (p-1) + (v-1) p + 1, m v) = 15 chunk activations of 1 block each
    assert got.memory_breakdown.total_bytes == pytest.approx(15 * 1.0)
    assert got.devices_used == 8
    assert sorted(s.device for s in got.stages) == sorted(list(range(p)) * v)


def test_interleaving_needs_each_pipelines_micro_batches_in_groups_of_p():
    g = _chain(12, t=2, stash=1.0, params=0)
    prob = _problem([g], devices=8, batch=6)  # 6 micro-batches for the one pipeline
    with pytest.raises(ConfigError, match=r"6 micro-batches must be a multiple of p = 4"):
        evaluate_fixed(prob, Layout(t=2, p=4, d=1, v=3))
    assert evaluate_fixed(prob, Layout(t=2, p=4, d=1)).layout.p == 4  # no such rule at v = 1


def test_megatron_chunks_put_embedding_first_and_head_last():
    netw = Cluster(devices=8)
    g = gpt_stage_graph(GptShape(layers=6, hidden=256, heads=4), 2, netw, flops_per_s=1e12)
    chunks = megatron_chunks(g, 3)
    assert chunks == ((0, 1, 2), (3, 4), (5, 6, 7))
    with pytest.raises(ConfigError, match="7 model chunks but the model has 6 blocks"):
        megatron_chunks(g, 7)


def test_fixed_strategy_errors():
    g = _chain(4, t=2)
    prob = _problem([g], devices=4)
    with pytest.raises(
        ConfigError, match=r"t\*p\*d\*cp = 2\*2\*2\*1 = 8 devices, the cluster has 4"
    ):
        evaluate_fixed(prob, Layout(t=2, p=2, d=2))
    with pytest.raises(ConfigError, match="no graph for t=4"):
        evaluate_fixed(prob, Layout(t=4, p=1, d=1))
    with pytest.raises(ConfigError, match="v = 2 interleaved chunks need p >= 2"):
        evaluate_fixed(prob, Layout(t=2, p=1, d=1, v=2))
    tight = dataclasses.replace(prob, hbm_bytes=100.0)
    with pytest.raises(Infeasible, match="B per device, has 100 B"):
        evaluate_fixed(tight, Layout(t=2, p=2, d=1))


def test_parse_strategy():
    s = parse_strategy("t=8,p=8,d=1,mbs=2,v=3,recompute=full,sp=on")
    assert s == Layout(
        t=8,
        p=8,
        d=1,
        mbs=2,
        v=3,
        recompute="full",
        sp=True,
        open=frozenset({"zero", "ep", "cp"}),
    )
    assert parse_strategy("t=8").open >= {"p", "d", "zero", "sp"}
    assert parse_strategy(str(s)) == s
    with pytest.raises(ConfigError, match="unknown key 'pd'; did you mean 'p'"):
        parse_strategy("t=8,pd=8")
    with pytest.raises(ConfigError, match="recompute = 'most' must be one of"):
        parse_strategy("t=1,p=1,d=1,recompute=most")


def test_too_wide_tensor_parallel_group_is_infeasible():
    g = _chain(3, t=4)
    with pytest.raises(Infeasible, match="tp=4 needs 4 devices per stage, the cluster has 2"):
        place(_problem([g], devices=2))


def test_stage_graph_from_a_workloads_layer_graph():
    from placement.adapt import stage_graph
    from workloads import Recompute, TrainingSetup, build_layer_graph, get_model

    setup = TrainingSetup(seq_len=2048, global_batch=64, recompute=Recompute.FULL)
    lg = build_layer_graph(get_model("gpt3-175b"), setup, 8)
    times = {"embedding": (1e-4, 2e-4, 0.0), "block": (0.01, 0.02, 0.01), "head": (0.01, 0.02, 0)}
    g = stage_graph(lg, times, micro_batch=1, recompute=Recompute.FULL)
    assert g.is_chain and len(g.layers) == 98 and g.recompute == "full"
    assert [x.parameters for x in g.layers] == [x.parameters for x in lg.layers]
    assert g.edges[0].bytes == lg.edges[0].bytes
    netw = Cluster(devices=64)
    prob = PlacementProblem((g,), netw, hbm_bytes=80e9, global_batch=64)
    got = evaluate_fixed(prob, Layout(t=8, p=8, d=1, v=3, recompute="full"))
    assert got.layout.p == 8 and got.layout.v == 3 and len(got.stages) == 24
    with pytest.raises(ConfigError, match=r"no times for layer classes \['head'\]"):
        stage_graph(
            lg, {k: v for k, v in times.items() if k != "head"}, micro_batch=1, recompute="full"
        )


def test_optimizer_step_follows_the_pipeline_on_the_first_stage():
    g = _chain(4, f=1.0, b=2.0, params=10)
    prob = dataclasses.replace(
        _problem([g], devices=2, batch=4, intra_node_latency_s=0.0),
        optimizer_s_per_parameter=0.25,
    )
    fixed = evaluate_fixed(prob, Layout(t=1, p=2, d=1))
    # 1F1B on two stages of two layers: 6 s per micro-batch x (4 + 1); rank 0 holds 20 params
    assert fixed.breakdown.optimizer_s == 20 * 0.25
    assert fixed.breakdown.iteration_s == 6.0 * 5 + 5.0
    best = place(prob)
    # two replicas of all four layers beat the pipeline, and each runs the step over 40 params
    assert (best.layout.p, best.layout.d, best.breakdown.optimizer_s) == (1, 2, 40 * 0.25)
    assert best.breakdown.iteration_s == sum(best.breakdown.terms().values())
    with pytest.raises(ConfigError, match="optimizer_s_per_parameter = -1.0 must be"):
        dataclasses.replace(prob, optimizer_s_per_parameter=-1.0)


def test_search_picks_the_recompute_variant_that_fits():
    heavy = _chain(4, stash=100.0, params=1)
    light = _chain(4, r=1.0, stash=1.0, params=1)  # recompute costs time but frees memory
    light = dataclasses.replace(light, layout=dataclasses.replace(light.layout, recompute="full"))
    prob = _problem([heavy, light], devices=1, hbm=200.0, batch=2)
    got = place(prob)
    assert got.layout.recompute == "full"
    assert got.breakdown.iteration_s == 2 * 4 * (1.0 + 2.0 + 1.0)
    roomy = dataclasses.replace(prob, hbm_bytes=1e6)
    assert place(roomy).layout.recompute == "none"


def test_gpt3_175b_at_1024_devices_both_paths_agree():
    """The benchmark instance: the fast path and the downset DP pick the same placement."""
    netw = Cluster(devices=1024, devices_per_node=8)
    graphs = tuple(
        gpt_stage_graph(GptShape(96, 12288, 96), t, netw, flops_per_s=156e12, recompute="full")
        for t in (1, 2, 4, 8)
    )
    prob = PlacementProblem(graphs, netw, hbm_bytes=80e9, global_batch=1536)
    fast, full = place(prob, method="chain"), place(prob, method="dag")
    assert [s.layers for s in fast.stages] == [s.layers for s in full.stages]
    assert (fast.layout.t, fast.layout.d) == (full.layout.t, full.layout.d)
    assert math.isclose(fast.breakdown.iteration_s, full.breakdown.iteration_s, rel_tol=1e-12)
    assert fast.memory_breakdown.total_bytes <= 80e9
    assert fast.devices_used <= 1024


@budget(200)
@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(0, 9)), min_size=1, max_size=20),
    st.integers(1, 60),
    st.integers(1, 12),
)
def test_max_stages_fitting_is_the_exact_memory_test(items, limit, cap):
    base = np.array([float(b) for b, _ in items])
    stash = np.array([float(x) for _, x in items])
    got = max_stages_fitting(base, stash, float(limit), cap)
    want = [
        max((s for s in range(1, cap + 1) if b + (s - 1) * x <= limit), default=0) for b, x in items
    ]
    assert got.tolist() == want
