"""Expert-parallel communication as it is overlapped and routed: node-limited all-to-alls,
all-to-alls beside another micro-batch's compute, DualPipe's schedule, expert imbalance."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_workloads_hf_deepseek import DEEPSEEK_V3

from arch_space import Cluster
from phaze_common.errors import ConfigError, Infeasible
from placement import PlacementProblem, StageEdge, StageGraph, StageLayer
from placement import network as net
from placement.ep_cp import a2a_bytes, ep_cp_graph, layer_columns, scaled_columns
from placement.fixed import evaluate_fixed
from placement.layout import Layout
from placement.pipelining import dualpipe_bubble_s, dualpipe_in_flight, in_flight
from workloads.framework import framework_profile
from workloads.model import Model
from workloads.moe_ops import expert_tokens

_CLUSTER = Cluster(devices=128, devices_per_node=8)


def _graph(
    blocks: int = 8, *, groups: tuple[int, int] = (0, 0), fwd: float = 1e-3, params: int = 1000
) -> StageGraph:
    """A chain of MoE blocks (top 8 of 64 experts) between an embedding and a head."""
    block = StageLayer(
        "b",
        fwd,
        2 * fwd,
        parameters=params,
        stash_bytes=4e6,
        expert_parameters=0.8 * params,
        dispatch_bytes=8e7,
    )
    layers = (
        StageLayer("emb", 1e-4, 2e-4, parameters=100, stash_bytes=1e6, kind="embedding"),
        *(replace(block, name=f"b{i}") for i in range(blocks)),
        StageLayer("head", 1e-4, 2e-4, parameters=100, stash_bytes=1e6, kind="head"),
    )
    edges = tuple(StageEdge(i, i + 1, 1e6) for i in range(len(layers) - 1))
    return StageGraph(
        layers,
        edges,
        experts=64,
        top_k=8,
        expert_groups=groups[0],
        routed_groups=groups[1],
    )


def _problem(graph: StageGraph, **kw) -> PlacementProblem:
    return PlacementProblem(
        **{"graphs": (graph,), "cluster": _CLUSTER, "hbm_bytes": 1e12, "global_batch": 64} | kw
    )


# ---- node-limited routing -----------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    ep=st.sampled_from([2, 4, 8, 16, 32, 64]),
    routed=st.integers(1, 8),
    top_k=st.sampled_from([1, 2, 6, 8]),
    per_node=st.sampled_from([4, 8]),
)
def test_node_limited_network_bytes_are_at_most_m_over_top_k_of_unlimited(
    ep, routed, top_k, per_node
):
    cluster = Cluster(devices=128, devices_per_node=per_node)
    g = replace(_graph(groups=(8, routed)), top_k=top_k)
    limited, nvlink = a2a_bytes(1e6, g, ep, 1, cluster)
    unlimited, none = a2a_bytes(1e6, replace(g, expert_groups=0, routed_groups=0), ep, 1, cluster)
    assert float(none) == 0.0 or not cluster.spans_nodes(ep)
    if not cluster.spans_nodes(ep):  # one node: all on NVLink, as before
        assert float(limited) == 0.0 and float(nvlink) == pytest.approx(float(none))
        return
    nodes = ep // per_node
    # a token crosses once per node it reaches, at most min(top_k, M, nodes) of them
    m = min(top_k, routed * -(-nodes // 8), nodes)
    assert float(limited) <= m / top_k * float(unlimited) + 1e-9
    assert float(limited) == pytest.approx(1e6 / top_k * m * (nodes - 1) / nodes)
    assert float(nvlink) == pytest.approx(1e6 * (per_node - 1) / per_node)


def test_node_limited_all_to_all_runs_network_and_nvlink_at_once():
    g = _graph(groups=(8, 4))
    a2a = ep_cp_graph(g, 64, 1, _CLUSTER).layers[1].ep_comm_s / 4
    inter, intra = (float(x) for x in a2a_bytes(8e7, g, 64, 1, _CLUSTER))
    bw_net, lat_net = net.link(_CLUSTER, inter_node=True)
    bw_nvl, _ = net.link(_CLUSTER, inter_node=False)
    assert a2a == pytest.approx(lat_net + max(inter / bw_net, intra / bw_nvl))
    # without group-limited routing: today's all-to-all on the group's link
    plain = ep_cp_graph(replace(g, routed_groups=0, expert_groups=0), 64, 1, _CLUSTER)
    bw, lat = net.group_link(_CLUSTER, 64)
    assert plain.layers[1].ep_comm_s / 4 == pytest.approx(lat + 63 / 64 * 8e7 / bw)
    assert a2a < plain.layers[1].ep_comm_s / 4


# ---- all-to-alls beside another micro-batch's compute ----------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    fwd=st.floats(1e-5, 1e-1),
    ep=st.sampled_from([2, 8, 64]),
    share=st.sampled_from([0.0, 20 / 132, 0.5]),
)
def test_overlapped_all_to_all_exposes_what_compute_cannot_cover(fwd, ep, share):
    g = _graph(fwd=fwd)
    cols = layer_columns(g)
    plain = scaled_columns(cols, g, ep, 1, _CLUSTER)
    ovl = scaled_columns(cols, g, ep, 1, _CLUSTER, overlap=share)
    a2a4 = plain["ep_comm_s"][1]  # four all-to-alls per MoE block
    compute = 3 * fwd
    exposed = max(a2a4, compute / (1 - share)) - compute
    assert ovl["ep_comm_s"][1] == pytest.approx(exposed)
    if share == 0.0:
        assert ovl["ep_comm_s"][1] == pytest.approx(max(0.0, a2a4 - compute), abs=1e-15)
    assert ovl["fwd_s"][1] + ovl["bwd_s"][1] == pytest.approx(compute + exposed)
    # layers without all-to-alls pay no SM share
    assert ovl["ep_comm_s"][0] == 0.0 and ovl["fwd_s"][0] == cols["fwd_s"][0]


def test_problem_overlap_reaches_the_fixed_layout():
    g = _graph()
    lay = Layout(p=2, d=16, ep=16)
    off = evaluate_fixed(_problem(g), lay).breakdown
    on = evaluate_fixed(_problem(g, ep_overlap=True), lay).breakdown
    assert on.ep_comm_exposed_s < off.ep_comm_exposed_s
    assert on.iteration_s < off.iteration_s


# ---- DualPipe -------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    half=st.integers(1, 16),
    f=st.floats(1e-4, 1.0),
    b=st.floats(1e-4, 1.0),
)
def test_dualpipe_bubble_is_table_2s_closed_form(half, f, b):
    p = 2 * half
    w = b / 2  # the weight-gradient half of a full backward chunk
    fb = f + b  # a forward and a backward chunk, nothing hidden
    assert float(dualpipe_bubble_s(fb, b, p)) == pytest.approx((p / 2 - 1) * (fb + b - 3 * w))
    # never more than 1F1B's (p - 1)(F + B)
    assert float(dualpipe_bubble_s(fb, b, p)) <= (p - 1) * fb + 1e-12


@pytest.mark.parametrize("p", [2, 4, 8])
def test_dualpipe_ranks_hold_p_plus_1_micro_batches(p):
    assert all(sum(dualpipe_in_flight(p, r)) == p + 1 for r in range(p))
    assert max(in_flight(p, r) for r in range(p)) == p  # 1F1B's peak, for comparison


def _dualpipe_peaks(p: int, chunks: int, rank: int) -> tuple[int, int]:
    """Peak micro-batches in flight of the forward-direction stage and the reverse-direction
    stage on ``rank``, running the steps of deepseek-ai/DualPipe ``DualPipe.step`` (F: a
    forward chunk, B: a backward chunk of phase 0 or 1; W frees nothing)."""
    half_ranks, h, half = p // 2, min(rank, p - 1 - rank), chunks // 2
    steps = (
        ((half_ranks - h - 1) * 2, ["F0"]),  # step 1: nF0
        (h + 1, ["F0", "F1"]),  # step 2: nF0F1
        (half_ranks - h - 1, ["B1", "F1"]),  # step 3: nB1W1F1
        (half - p + h + 1, ["F0", "B1", "F1", "B0"]),  # step 4: nF0B1F1B0
        (half_ranks - h - 1, ["B1", "F1", "B0"]),  # step 5: nB1F1B0
        (h + 1, ["B1", "B0"]),  # step 6: nB1B0
        (half_ranks - h - 1, ["B0"]),  # step 7: nWB0
    )
    held, peak, total = [0, 0], [0, 0], 0
    for count, ops in steps:
        for _ in range(count):
            for op in ops:
                phase = int(op[1])
                held[phase] += 1 if op[0] == "F" else -1
                peak[phase] = max(peak[phase], held[phase])
                total = max(total, sum(held))
    assert held == [0, 0] and total == p + 1
    # phase 0 is the forward direction on the first half of the ranks, the reverse on the rest
    second = rank >= half_ranks
    return (peak[1], peak[0]) if second else (peak[0], peak[1])


@pytest.mark.parametrize("p", [2, 4, 8, 16])
def test_dualpipe_in_flight_matches_the_schedule_of_its_code(p):
    for chunks in (2 * p, 2 * p + 6):
        for r in range(p):
            assert _dualpipe_peaks(p, chunks, r) == dualpipe_in_flight(p, r)


def test_dualpipe_layout_holds_two_parameter_copies_and_shrinks_the_bubble():
    g = _graph()
    lay = Layout(p=4, d=2)
    one = evaluate_fixed(_problem(g), lay)
    dual = evaluate_fixed(_problem(g, dualpipe=True), lay)
    # rank r holds stages r and p - 1 - r: two copies' weights, gradients and optimizer state
    held = [sum(s.parameters for s in one.stages if s.device == r) for r in range(4)]
    for r in range(4):
        mine = [s for s in dual.stages if s.device == r]
        assert sum(s.parameters for s in mine) == pytest.approx(held[r] + held[3 - r])
        assert sorted(s.in_flight for s in mine) == sorted(dualpipe_in_flight(4, r))
    assert dual.memory_breakdown.weights_bytes > 1.5 * one.memory_breakdown.weights_bytes
    ranks = {st.device for st in dual.stages}
    assert ranks == set(range(4)) and len(dual.stages) == 8
    # the rank's load is the mean of its two stages'; the bubble Table 2's
    loads = np.zeros(4)
    bwd = np.zeros(4)
    for stage in dual.stages:
        loads[stage.device] += stage.load_s
        bwd[stage.device] += stage.bwd_s
    r = int(np.argmax(loads))
    assert dual.load_s == pytest.approx(loads[r])
    assert dual.breakdown.bubble_s == pytest.approx((4 / 2 - 1) * (loads[r] - bwd[r] / 2))
    assert dual.breakdown.bubble_s < one.breakdown.bubble_s
    assert dual.devices_used == one.devices_used == 8
    assert dual.bubble_fraction == pytest.approx(dual.breakdown.bubble_s / (32 * dual.load_s))
    terms = dual.breakdown
    assert sum(terms.terms().values()) == pytest.approx(terms.iteration_s)


def test_dualpipe_refuses_what_its_code_asserts():
    g = _graph()
    problem = _problem(g, dualpipe=True)
    with pytest.raises(Infeasible, match="DualPipe"):
        evaluate_fixed(problem, Layout(p=4, d=16))  # 4 micro-batches per pipeline < 2 p
    with pytest.raises(ConfigError, match="DualPipe"):
        evaluate_fixed(problem, Layout(p=3, d=2))
    profile = framework_profile("megatron-core-2024:pipeline=dualpipe")
    from workloads.framework import layout_refusals

    assert layout_refusals(profile, p=3, v=1, zero=0)
    assert not layout_refusals(profile, p=4, v=1, zero=0)


def test_profiles_select_the_schedule_and_overlap():
    ds = framework_profile("deepseek-2024")
    assert ds.pipeline == "dualpipe" and ds.ep_overlap
    assert ds.comm_sm_share == pytest.approx(20 / 132)
    mc = framework_profile("megatron-core-2024:ep_overlap=true")
    assert mc.ep_overlap and mc.pipeline == "interleaved" and mc.comm_sm_share == 0.0
    assert not framework_profile("megatron-core-2024").ep_overlap
    with pytest.raises(ConfigError, match="ep_overlap"):
        framework_profile("megatron-core-2024:ep_overlap=maybe")
    with pytest.raises(ConfigError, match="key=value"):
        framework_profile("megatron-core-2024:ep_overlap")


# ---- expert load imbalance ------------------------------------------------------------------


def test_expert_imbalance_scales_the_busiest_ranks_routed_tokens():
    m = Model("m", 2, 64, 4, 128, 100, experts=8, top_k=2)
    assert sum(expert_tokens(1000, m)) == 2000
    assert sum(expert_tokens(1000, m, load=1.25)) == 2500
    with pytest.raises(ConfigError, match="expert_load_imbalance"):
        Model("m", 2, 64, 4, 128, 100, experts=8, top_k=2, expert_load_imbalance=0.5)


def test_energy_prices_the_node_limited_volumes_on_their_links():
    from placement.energy import iteration_energy
    from placement.iteration import EnergyRates

    lay = Layout(p=1, d=64, ep=64)
    rates = EnergyRates(0.0, 0.0, 0.0, 0.0, 1.0, 10.0, 0.0, 0.0, dispatch_bytes=8e7)

    def link_j(g: StageGraph) -> float:
        pl = evaluate_fixed(_problem(g), lay)
        routing = (g.top_k, g.expert_groups, g.routed_groups)
        return iteration_energy(pl, replace(rates, routing=routing), _CLUSTER, 1).network_j

    inter, intra = (float(x) for x in a2a_bytes(8e7, _graph(groups=(8, 4)), 64, 1, _CLUSTER))
    assert link_j(_graph(groups=(8, 4))) == pytest.approx(4 * (inter * 10 + intra) * 8e-12)
    assert link_j(_graph()) == pytest.approx(4 * 63 / 64 * 8e7 * 10 * 8e-12)


# the published DeepSeek-V3 config.json (tests/test_workloads_hf_deepseek.py holds it)
_DSV3 = DEEPSEEK_V3


@pytest.mark.parametrize(
    ("extra", "groups"),
    [({}, (8, 4)), ({"topk_method": "greedy"}, (0, 0)), ({"n_group": 1, "topk_group": 1}, (0, 0))],
)
def test_hf_config_gives_group_limited_routing(tmp_path, extra, groups):
    import json

    from workloads.hf import load_hf_config

    path = tmp_path / "config.json"
    path.write_text(json.dumps(_DSV3 | extra))
    m = load_hf_config(str(path))
    assert (m.expert_groups, m.routed_groups) == groups


def test_the_search_prices_a_dualpipe_problem_as_1f1b():
    from placement import place

    g = _graph(params=10**9)  # 18 GB of state per block: a pipeline is needed to fit
    searched = place(_problem(g, dualpipe=True, hbm_bytes=80e9))
    assert searched.layout.p >= 2  # a pipeline, whose bubble DualPipe would change
    assert searched.breakdown == place(_problem(g, hbm_bytes=80e9)).breakdown
