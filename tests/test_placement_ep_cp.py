"""Expert and context parallelism in the placement model: closed forms, memory, the search."""

from __future__ import annotations

import math
from dataclasses import astuple, replace

import numpy as np
import pytest
from budget import budget
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from arch_space import Cluster
from phaze_common.errors import Infeasible
from placement import PlacementProblem, StageEdge, StageGraph, StageLayer, place
from placement import network as net
from placement.ep_cp import (
    Variant,
    all_to_all_s,
    ep_cp_graph,
    graph_variants,
    ring_s,
)
from placement.fixed import evaluate_fixed
from placement.iteration import stage_memory
from placement.layout import Layout, parse_strategy
from placement.partial import evaluate_partial
from placement.search import layer_arrays

_CLUSTER = Cluster(devices=16, devices_per_node=8)


def _moe_graph(experts: int = 8, blocks: int = 4, recompute: str = "none") -> StageGraph:
    """A chain: embedding, ``blocks`` MoE blocks (half their parameters in experts), head."""

    def block(i: int) -> StageLayer:
        return StageLayer(
            f"b{i}",
            1e-3,
            2e-3,
            parameters=1000,
            stash_bytes=4e6,
            recompute_s=1e-3 if recompute == "full" else 0.0,
            expert_parameters=800.0,
            dispatch_bytes=2e6,
            kv_bytes=1e6,
        )

    layers = (
        StageLayer("emb", 1e-4, 2e-4, parameters=100, stash_bytes=1e6, kind="embedding"),
        *(block(i) for i in range(blocks)),
        StageLayer("head", 1e-4, 2e-4, parameters=100, stash_bytes=1e6, kind="head"),
    )
    edges = tuple(StageEdge(i, i + 1, 1e6) for i in range(len(layers) - 1))
    return StageGraph(layers, edges, Layout(recompute=recompute), experts=experts)


@settings(max_examples=40, deadline=None)
@given(
    ep=st.sampled_from([1, 2, 4, 8]),
    cp=st.sampled_from([1, 2, 4]),
    recompute=st.sampled_from(["none", "full"]),
)
def test_graph_at_ep_cp_matches_the_closed_forms(ep, cp, recompute):
    g = _moe_graph(recompute=recompute)
    x, y = g.layers[1], ep_cp_graph(g, ep, cp, _CLUSTER).layers[1]
    bw, lat = net.group_link(_CLUSTER, Layout(t=1, cp=cp, ep=ep).groups.ep)
    a2a = 0.0 if ep == 1 else lat + (ep - 1) / ep * (2e6 / cp) / bw
    assert all_to_all_s(2e6 / cp, ep, (bw, lat)) == pytest.approx(a2a)
    assert y.ep_comm_s == pytest.approx(4 * a2a)
    assert y.parameters == pytest.approx(200 + 800 / ep)
    assert y.expert_parameters == pytest.approx(800 / ep)
    assert y.stash_bytes == pytest.approx(x.stash_bytes / cp)
    # the K/V ring hides behind the pass's compute; what exceeds it is exposed
    ring = ring_s(1e6 / cp, cp, (_CLUSTER.intra_node_bandwidth_bytes_per_s, 2e-6))
    exposed = max(ring - 1e-3 / cp, 0) + max(2 * ring - 2e-3 / cp, 0)
    assert y.cp_comm_s == pytest.approx(exposed, abs=1e-12)
    assert y.fwd_s + y.bwd_s == pytest.approx(3e-3 / cp + 4 * a2a + exposed)
    full = recompute == "full"
    assert y.recompute_s >= (1e-3 / cp + 2 * a2a if full else 0.0) - 1e-15


@budget(80)
@given(
    rows=st.lists(
        st.tuples(
            st.floats(0, 1e-2),  # fwd_s
            st.floats(0, 1e-2),  # recompute_s
            st.integers(0, 10**6),  # parameters
            st.floats(0, 1),  # expert share of them
            st.floats(0, 1e7),  # dispatch_bytes
            st.floats(0, 1e7),  # kv_bytes
            st.floats(0, 1e-3),  # tp_comm_s
            st.floats(0, 50),  # tied_parameters
        ),
        min_size=1,
        max_size=6,
    ),
    ep=st.sampled_from([1, 2, 4, 8]),
    cp=st.sampled_from([1, 2, 4]),
    recompute=st.sampled_from(["none", "selective", "full"]),
    per_node=st.sampled_from([2, 8]),
)
def test_a_variant_prices_what_its_graph_holds(rows, ep, cp, recompute, per_node):
    """The search reads a variant's layer arrays without building its graph; the placement
    it returns is priced on the graph :func:`ep_cp_graph` builds: both hold the same
    figures, bit for bit."""
    layers = tuple(
        StageLayer(
            f"l{i}",
            fwd,
            2 * fwd,
            parameters=params,
            stash_bytes=1e6 * (i + 1),
            recompute_s=rec,
            workspace_bytes=1e5,
            expert_parameters=share * params,
            dispatch_bytes=dispatch,
            kv_bytes=kv,
            tp_comm_s=tpc,
            tied_parameters=tied,
        )
        for i, (fwd, rec, params, share, dispatch, kv, tpc, tied) in enumerate(rows)
    )
    edges = tuple(StageEdge(i, i + 1, 1e6 + i) for i in range(len(layers) - 1))
    g = StageGraph(layers, edges, Layout(t=2, recompute=recompute), experts=8)
    cluster = Cluster(devices=64, devices_per_node=per_node)
    built = layer_arrays(ep_cp_graph(g, ep, cp, cluster))
    searched = layer_arrays(Variant.at(g, ep, cp, cluster))
    for name in ("fwd", "bwd", "rec", "params", "stash", "workspace", "tp", "sharded_params"):
        assert np.array_equal(getattr(built, name), getattr(searched, name)), name
    for name in ("tied", "sharded_tied", "src", "dst", "nbytes"):
        assert np.array_equal(getattr(built, name), getattr(searched, name)), name
    assert Variant.at(g, ep, cp, cluster).graph == ep_cp_graph(g, ep, cp, cluster)


def test_expert_state_is_sharded_over_d_cp_over_ep():
    """Each device holds 1/ep of the experts, replicated over d*cp/ep ranks: ZeRO-1 shards
    its optimizer state over those, the dense part over d*cp."""
    g = _moe_graph()
    problem = PlacementProblem((g,), _CLUSTER, hbm_bytes=1e12, global_batch=16)
    dense, expert = 200.0, 800.0 / 4
    mem = stage_memory(
        problem,
        parameters=dense + expert,
        expert_parameters=expert,
        stash_bytes=0.0,
        in_flight=1.0,
        workspace_bytes=0.0,
        d=8,
        zero=1,
        ep=4,
        cp=2,
    )
    assert mem.optimizer_bytes == pytest.approx(12 * (dense / 16 + expert / (16 / 4)))
    assert mem.weights_bytes == pytest.approx(2 * (dense + expert))


def test_search_chooses_ep_dividing_d_and_prices_the_all_to_all():
    g = _moe_graph()
    problem = PlacementProblem(
        (g,),
        _CLUSTER,
        hbm_bytes=1e12,
        global_batch=16,
        ep_degrees=(1, 2, 4, 8),
        zero_stages=(0, 1),
    )
    best = place(problem)
    assert best.layout.d % best.layout.ep == 0
    for ep in (2, 8):
        fixed = evaluate_fixed(problem, Layout(t=1, p=1, d=8, ep=ep))
        assert fixed.breakdown.ep_comm_exposed_s > 0
        assert fixed.layout.ep == ep and fixed.devices_used == 8
    # with d = ep no expert gradient is reduced: less exposed data-parallel time
    d8 = [evaluate_fixed(problem, Layout(t=1, p=1, d=8, ep=e)) for e in (1, 8)]
    assert d8[1].breakdown.dp_comm_exposed_s < d8[0].breakdown.dp_comm_exposed_s


def test_context_parallel_ranks_count_as_devices_and_split_activations():
    g = _moe_graph(experts=1)
    problem = PlacementProblem((g,), _CLUSTER, hbm_bytes=1e12, global_batch=16, cp_degrees=(1, 4))
    one = evaluate_fixed(problem, Layout(t=1, p=2, d=2))
    four = evaluate_fixed(problem, Layout(t=1, p=2, d=2, cp=4))
    assert four.devices_used == 4 * one.devices_used == 16
    act = (one.memory_breakdown.activations_bytes, four.memory_breakdown.activations_bytes)
    assert act[1] == pytest.approx(act[0] / 4)
    assert four.layout.cp == 4
    assert {(x.ep, x.cp) for x in graph_variants(problem)} == {(1, 1), (1, 4)}
    with pytest.raises(Exception, match="t\\*p\\*d\\*cp"):
        evaluate_fixed(problem, Layout(t=1, p=2, d=4, cp=4))


def test_partial_strategy_completes_ep_and_cp():
    g = _moe_graph()
    problem = PlacementProblem(
        (g,), _CLUSTER, hbm_bytes=1e12, global_batch=16, ep_degrees=(1, 2, 4, 8), cp_degrees=(1, 2)
    )
    fields = frozenset({"d", "ep", "cp", "mbs", "recompute", "sp"})
    pl = evaluate_partial(problem, Layout(t=1, p=2, d=1, open=fields | {"zero"}))
    chosen = pl.layout
    assert chosen.d % chosen.ep == 0
    assert chosen.t * chosen.p * chosen.d * chosen.cp <= 16
    assert (pl.layout.ep, pl.layout.cp) == (chosen.ep, chosen.cp)


@budget(40, deadline=None)
@given(
    blocks=st.integers(2, 6),
    expert_share=st.floats(0.0, 0.95),
    hbm=st.floats(2e7, 2e8),
    zero=st.sampled_from([(0,), (1,), (0, 1, 2, 3)]),
    batch=st.sampled_from([8, 16, 24]),
    cps=st.sampled_from([(1,), (1, 2), (2, 4)]),
)
def test_fixed_strategy_reproduces_the_searched_ep_cp_placement(
    blocks, expert_share, hbm, zero, batch, cps
):
    """The search's stages evaluated as a fixed strategy at its ep and cp give the same time,
    terms and memory (one iteration model), and ep divides d."""
    g = _moe_graph(blocks=blocks)
    layers = tuple(
        replace(x, parameters=10**6, expert_parameters=10**6 * expert_share)
        if x.kind == "block"
        else x
        for x in g.layers
    )
    problem = PlacementProblem(
        (replace(g, layers=layers),),
        _CLUSTER,
        hbm_bytes=hbm,
        global_batch=batch,
        zero_stages=zero,
        ep_degrees=(1, 2, 4, 8),
        cp_degrees=cps,
    )
    try:
        best = place(problem)
    except Infeasible:
        assume(False)
    assert best.layout.d % best.layout.ep == 0
    assert best.devices_used <= _CLUSTER.devices
    # printed as a strategy string and read back, the layout names the same stages
    got = evaluate_fixed(problem, parse_strategy(str(best.layout)), check_memory=False)
    assert [s.layers for s in got.stages] == [s.layers for s in best.stages]
    assert math.isclose(got.breakdown.iteration_s, best.breakdown.iteration_s, rel_tol=1e-9)
    for a, b in zip(astuple(got.breakdown), astuple(best.breakdown), strict=True):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    for a, b in zip(astuple(got.memory_breakdown), astuple(best.memory_breakdown), strict=True):
        assert math.isclose(a, b, rel_tol=1e-9)
    assert best.memory_breakdown.total_bytes <= problem.hbm_bytes * (1 + 1e-9)


def test_all_to_all_and_ring_bytes_are_priced_as_network_energy():
    from placement.energy import iteration_energy
    from placement.iteration import EnergyRates

    g = _moe_graph()
    problem = PlacementProblem((g,), _CLUSTER, hbm_bytes=1e12, global_batch=16)
    rates = EnergyRates(
        compute_j=0.0,
        memory_j=0.0,
        network_j=0.0,
        static_w_per_device=0.0,
        intra_node_link_pj_per_bit=1.0,
        inter_node_link_pj_per_bit=5.0,
        model_parameters=0.0,
        boundary_bytes=0.0,
        dispatch_bytes=3.0,
        kv_bytes=7.0,
    )

    def network_j(**degrees) -> float:
        pl = evaluate_fixed(problem, Layout(**{"t": 1, "p": 1, "d": 8, **degrees}))
        return iteration_energy(pl, rates, _CLUSTER, micro_batches=16).network_j

    assert network_j() == 0.0
    # four all-to-alls per micro-batch, 7/8 of 3 bytes leaving each device, 1 pJ/bit
    assert network_j(ep=8) == pytest.approx(4 * 7 / 8 * 3.0 * 16 * 8e-12)
    # cp - 1 = 1 ring step per pass, three passes (forward; backward K/V and gradients)
    assert network_j(d=4, cp=2) == pytest.approx(3 * 1 * 7.0 * 16 * 8e-12)


@budget(30, deadline=None)
@given(
    hbm=st.floats(5e7, 1e9),
    zero=st.sampled_from([(0,), (1,), (0, 1, 2, 3)]),
    batch=st.sampled_from([8, 16]),
    kv=st.floats(0.0, 4e8),
)
@example(hbm=8e7, zero=(3,), batch=8, kv=0.0)  # fits only with its state over d * cp ranks
def test_search_beats_every_fixed_cp_layout(hbm, zero, batch, kv):
    """Dense model, cp in 1, 2, 4: the search is at least as fast as every fixed layout
    (Megatron's split) that fits: it chooses cp, d, the stages and the ZeRO stage exactly."""
    g = _moe_graph(experts=1, blocks=8)
    layers = tuple(
        replace(x, parameters=5 * 10**6, expert_parameters=0.0, kv_bytes=kv, stash_bytes=1e5)
        if x.kind == "block"
        else x
        for x in g.layers
    )
    problem = PlacementProblem(
        (replace(g, layers=layers),),
        _CLUSTER,
        hbm_bytes=hbm,
        global_batch=batch,
        zero_stages=zero,
        cp_degrees=(1, 2, 4),
    )
    fixed = []
    for cp in (1, 2, 4):
        for p in range(1, 5):
            for d in (1, 2, 4, 8, 16):
                for z in zero:
                    if p * d * cp > 16 or batch % d:
                        continue
                    try:
                        s = Layout(t=1, p=p, d=d, cp=cp, zero=z)
                        fixed.append(evaluate_fixed(problem, s).breakdown.iteration_s)
                    except Infeasible:
                        pass
    try:
        best = place(problem).breakdown.iteration_s
    except Infeasible:
        best = math.inf
    assert all(best <= f * (1 + 1e-9) for f in fixed)
