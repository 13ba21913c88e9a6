"""One function per quantity: the data-parallel collectives' volumes that time and energy
read, the node count, and the time breakdown summing to the iteration."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arch_space import Cluster
from arch_space.accelerator import node_count
from placement import Layout, PlacementProblem, StageGraph, StageLayer, evaluate_fixed
from placement.energy import dp_bytes
from placement.pipelining import in_flight, micro_batches_per_pipeline, pipeline_s

_BW = 1e9  # bytes/s inside a node, no latency: a collective's time x _BW is its bytes


def _problem(n: int, batch: int, params: int, experts: float = 0.0) -> PlacementProblem:
    layer = StageLayer("b", 1.0, 2.0, parameters=params, stash_bytes=0.0, expert_parameters=experts)
    graph = StageGraph((layer,), (), experts=8)
    cluster = Cluster(
        devices=n,
        devices_per_node=n,
        intra_node_bandwidth_bytes_per_s=_BW,
        intra_node_latency_s=0.0,
    )
    return PlacementProblem((graph,), cluster, hbm_bytes=1e18, global_batch=batch)


@given(
    n=st.sampled_from([1, 2, 3, 4, 8]),
    per_pipeline=st.integers(1, 6),
    zero=st.sampled_from([0, 1, 2, 3]),
    params=st.integers(1, 10**9),
)
def test_time_and_energy_see_the_same_collective_volumes(n, per_pipeline, zero, params):
    """On one stage replicated over ``n`` devices, the bytes a rank's data-parallel
    collectives move (their time at a latency-free link) are the energy model's bytes over
    all ``n`` ranks divided by ``n``; and both equal the ring passes written out: stage 0
    all-reduces (2 passes), 1 reduce-scatters and all-gathers (2), 2 reduce-scatters per
    micro-batch and gathers once (m' + 1), 3 also gathers twice per micro-batch (3 m'),
    each pass sending (n - 1) / n of the 2-byte values (Rajbhandari et al., SC20)."""
    pl = evaluate_fixed(_problem(n, n * per_pipeline, params), Layout(d=n, zero=zero))
    moved_per_rank = pl.breakdown.dp_comm_exposed_s * _BW
    passes = (2, 2, per_pipeline + 1, 3 * per_pipeline)[zero]
    want = passes * (n - 1) / n * 2.0 * params
    assert moved_per_rank == pytest.approx(want, rel=1e-12, abs=1e-6)
    assert dp_bytes(pl, float(params)) / n == pytest.approx(want, rel=1e-12, abs=1e-6)


@given(n=st.sampled_from([2, 4, 8]), per_pipeline=st.integers(1, 6))
def test_fsdp_zero2_gathers_per_micro_batch_in_time_and_energy(n, per_pipeline):
    """A stack that frees ZeRO-2's gathered weights after each backward pass (FSDP's
    SHARD_GRAD_OP) gathers them for every micro-batch: 2 m' passes, in both models."""
    params = 10**6
    problem = dataclasses.replace(
        _problem(n, n * per_pipeline, params), zero_stages=(2,), regather_per_micro_batch=True
    )
    pl = evaluate_fixed(problem, Layout(d=n, zero=2))
    want = 2 * per_pipeline * (n - 1) / n * 2.0 * params
    assert pl.breakdown.dp_comm_exposed_s * _BW == pytest.approx(want, rel=1e-12)
    energy = dp_bytes(pl, float(params), 0.0, (2.0, 2.0), regather_per_micro_batch=True)
    assert energy / n == pytest.approx(want, rel=1e-12)


@given(ep=st.sampled_from([1, 2, 4, 8]), share=st.floats(0.0, 1.0))
def test_expert_parameters_run_on_their_own_ring_in_time_and_energy(ep, share):
    """Experts held by ``d / ep`` ranks reduce over those alone, in both models."""
    n, params = 8, 10**6
    experts = share * params
    problem = _problem(n, n, params, experts=experts)
    pl = evaluate_fixed(problem, Layout(d=n, ep=ep))
    # the layer at ep holds 1/ep of its experts: the whole model has `experts` of them
    rank = pl.stages[0].parameters
    rank_experts = pl.stages[0].expert_parameters
    per_rank = (
        2 * 2.0 * ((rank - rank_experts) * (n - 1) / n + rank_experts * (n // ep - 1) / (n // ep))
    )
    assert pl.breakdown.dp_comm_exposed_s * _BW == pytest.approx(per_rank, rel=1e-9, abs=1e-6)
    whole = 2 * 2.0 * ((params - experts) * (n - 1) + experts * (n // ep - 1))
    assert dp_bytes(pl, float(params), experts) == pytest.approx(whole, rel=1e-9, abs=1e-6)


@pytest.mark.parametrize(
    ("devices", "per_node", "nodes"), [(1, 8, 1), (7, 8, 1), (8, 8, 1), (16, 8, 2), (9, 4, 3)]
)
def test_one_node_count(devices, per_node, nodes):
    assert node_count(devices, per_node) == nodes
    if devices <= per_node or devices % per_node == 0:  # a Cluster's devices fill its nodes
        assert Cluster(devices=devices, devices_per_node=per_node).nodes == nodes


@given(
    p=st.integers(1, 16),
    v=st.integers(1, 4),
    m=st.integers(1, 64),
    d=st.integers(1, 8),
    load=st.floats(0.0, 10.0),
)
def test_the_pipeline_formulas(p, v, m, d, load):
    """Megatron's rule (d divides the micro-batches) and the reference format's ceiling
    agree; the pipeline is the steady part plus the bubble; a rank never holds more than
    the micro-batches of its pipeline in flight under interleaving, nor fewer than one."""
    per = micro_batches_per_pipeline(m, d)
    assert per == math.ceil(m / d) and (m % d or per * d == m)
    assert pipeline_s(load, per, p, v) == pytest.approx(load * per + load * (p - 1) / v)
    for r in range(p):
        held = in_flight(p, r, v, per)
        assert held == (p - r if v == 1 else min(2 * (p - r - 1) + (v - 1) * p + 1, per * v) / v)
        assert held >= 1 / v


@given(
    n=st.sampled_from([1, 2, 4]),
    p=st.integers(1, 3),
    v=st.integers(1, 2),
    zero=st.sampled_from([0, 1, 2, 3]),
)
def test_the_breakdown_sums_to_the_iteration(n, p, v, zero):
    layers = tuple(
        StageLayer(f"b{i}", 1.0 + i, 2.0, parameters=10 * (i + 1), stash_bytes=5.0)
        for i in range(6)
    )
    edges = tuple(_edge(i) for i in range(5))
    graph = StageGraph(layers, edges)
    cluster = Cluster(devices=16, devices_per_node=4)
    problem = PlacementProblem((graph,), cluster, hbm_bytes=1e18, global_batch=4 * p * n)
    if v > 1 and 6 % (p * v) or v > 1 and p < 2:
        return
    pl = evaluate_fixed(problem, Layout(p=p, d=n, v=v, zero=zero))
    b = pl.breakdown
    assert sum(b.terms().values()) == pytest.approx(b.iteration_s, rel=1e-12)
    assert b.communication_s == pytest.approx(
        sum(v for k, v in b.terms().items() if k.endswith("_comm_exposed_s"))
    )


def _edge(i: int):
    from placement import StageEdge

    return StageEdge(i, i + 1, 1e6)


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_time_and_energy_move_the_gradients_and_weights_formats(zero):
    """Gradients reduced at 4 B (fp32, FSDP2) and weights gathered at 1 B: the time and the
    energy models move the same bytes, each collective at its own format's."""
    n, per_pipeline, params = 4, 2, 10**6
    problem = dataclasses.replace(
        _problem(n, n * per_pipeline, params),
        gradient_bytes_per_parameter=4.0,
        weight_bytes_per_parameter=1.0,
    )
    pl = evaluate_fixed(problem, Layout(d=n, zero=zero))
    grads = (2, 1, per_pipeline, per_pipeline)[zero] * 4.0
    weights = (0, 1, 1, 2 * per_pipeline)[zero] * 1.0
    want = (grads + weights) * (n - 1) / n * params
    assert pl.breakdown.dp_comm_exposed_s * _BW == pytest.approx(want, rel=1e-12)
    assert dp_bytes(pl, float(params), 0.0, (4.0, 1.0)) / n == pytest.approx(want, rel=1e-12)
