"""Data-parallel collectives: prefetch behind compute, bucketed gathers, the NICs a ring drives."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from arch_space import Cluster
from phaze_common.errors import ConfigError
from placement import PlacementProblem, StageGraph, StageLayer
from placement.dp_comm import (
    bucket_parameters,
    dp_collectives,
    dp_terms,
    prefetched_exposed_s,
    shard_unit,
)
from placement.network import ring_latency_s


def _simulated(units: int, comm: float, compute: float) -> float:
    """Exposed time of ``units`` collectives on one stream, each issued when the previous
    unit's compute starts (prefetch) and needed before its own unit's compute: a timeline."""
    comm_end, compute_end, exposed = 0.0, 0.0, 0.0
    for i in range(units):
        start = compute_end - compute if i else 0.0  # issued beside the previous unit
        comm_end = max(comm_end, start) + comm
        wait = max(comm_end - compute_end, 0.0)
        exposed += wait
        compute_end += wait + compute
    return exposed


@given(st.integers(1, 40), st.floats(0.0, 10.0), st.floats(0.0, 10.0))
def test_prefetch_closed_form_is_the_timeline(units, comm, compute):
    closed = prefetched_exposed_s(units * comm, comm, (units - 1) * compute)
    assert float(closed) == pytest.approx(_simulated(units, comm, compute), abs=1e-9)


def _problem(**kw) -> PlacementProblem:
    layer = StageLayer("b", fwd_s=1.0, bwd_s=2.0, parameters=10**9, stash_bytes=1.0)
    graph = StageGraph((layer,), ())
    cluster = Cluster(devices=64, devices_per_node=8)
    return PlacementProblem((graph,), cluster, hbm_bytes=8e10, global_batch=64, **kw)


def test_prefetch_hides_sharded_collectives_behind_the_load():
    d, params, m = np.array([64]), np.array([64e9]), 64  # one micro-batch per replica
    plain = _problem(zero_stages=(3,))
    fsdp = dataclasses.replace(plain, sharded_prefetch=True)
    unit = (1e9, 0.5)  # 64 units of a billion parameters, half a second each
    whole, _ = dp_terms(plain, 1, 3, d, params, m, load_s=32.0, unit=unit)
    # compute far longer than the collectives: only the first gather and the last
    # reduce-scatter of one unit move exposed bytes; one unit's three collectives (two gathers, a
    # reduce-scatter, of equal bytes) cost the plain model's time for one unit; every
    # unit's ring latency waits
    hidden, _ = dp_terms(fsdp, 1, 3, d, params, m, load_s=1e3, unit=unit)
    one, _ = dp_terms(plain, 1, 3, d, np.array([1e9]), m)
    lat = float(ring_latency_s(64, 8))
    moving = float(one[0]) - 3 * lat
    assert float(hidden[0]) == pytest.approx(2 / 3 * moving + 64 * 3 * lat)
    assert float(hidden[0]) < float(whole[0]) / 20
    # no compute to hide behind: every unit's collective shows (priced per unit, never
    # faster than the one large collective of the plain model)
    bare, _ = dp_terms(fsdp, 1, 3, d, params, m, load_s=0.0, unit=unit)
    assert float(bare[0]) >= float(whole[0]) * (1 - 1e-9)
    # the time never falls by more than the load rises (m / d micro-batches)
    loads = np.linspace(0.0, 100.0, 201)
    exposed = [float(dp_terms(fsdp, 1, 3, d, params, m, load_s=x, unit=unit)[0][0]) for x in loads]
    assert all(
        b - a >= -(y - x) * (1 + 1e-9)
        for a, b, x, y in zip(exposed, exposed[1:], loads, loads[1:], strict=False)
    )


def test_param_gather_overlap_exposes_one_bucket():
    d, params = np.array([8]), np.array([4e9])
    plain = _problem(zero_stages=(1,))
    core = dataclasses.replace(plain, param_gather_overlap=True)
    (ag, *_) = [c for c in dp_collectives(1, 1, 2.0, 2.0) if c.what == "weights"]
    assert ag.kind == "all_gather" and not ag.per_micro_batch
    full, _ = dp_terms(plain, 8, 1, d, params, 8)
    part, _ = dp_terms(core, 8, 1, d, params, 8)
    assert float(part[0]) < float(full[0])
    assert float(bucket_parameters(8, 4e9)) == 40e6 and float(bucket_parameters(100, 4e9)) == 1e8


def test_the_sharded_unit_is_the_largest_block():
    layers = (
        StageLayer("embedding", 0.1, 0.1, 900, 1.0, kind="embedding"),
        StageLayer("b0", 1.0, 2.0, 500, 1.0),
        StageLayer("b1", 1.5, 2.5, 600, 1.0),
    )
    assert shard_unit(StageGraph(layers, ())) == (600.0, 4.0)


def test_hidden_collectives_hold_their_compute_share():
    d, params, m, share = np.array([64]), np.array([64e9]), 64, 0.25
    fsdp = _problem(zero_stages=(3,), sharded_prefetch=True)
    held = dataclasses.replace(fsdp, collective_compute_share=share)
    unit = (1e9, 0.5)
    one, _ = dp_terms(_problem(zero_stages=(3,)), 1, 3, d, np.array([1e9]), m)
    free, _ = dp_terms(fsdp, 1, 3, d, params, m, load_s=1e3, unit=unit)
    busy, _ = dp_terms(held, 1, 3, d, params, m, load_s=1e3, unit=unit)
    # 64 units of three collectives; the bytes of all but the first gather and last
    # reduce-scatter hidden, every ring latency exposed
    lat = float(ring_latency_s(64, 8))
    moving = float(one[0]) - 3 * lat
    hidden = 64 * moving - 2 / 3 * moving
    assert float(free[0]) == pytest.approx(2 / 3 * moving + 64 * 3 * lat)
    assert float(busy[0]) == pytest.approx(float(free[0]) + share * hidden)
    # a bucketed reduction: every bucket but the last runs beside the backward pass
    plain = _problem(zero_stages=(0,))
    ddp = dataclasses.replace(plain, dp_overlap=True)
    whole, _ = dp_terms(plain, 1, 0, d, params, m)
    last, _ = dp_terms(ddp, 1, 0, d, params, m)
    busy, _ = dp_terms(dataclasses.replace(ddp, collective_compute_share=share), 1, 0, d, params, m)
    assert float(busy[0]) == pytest.approx(float(last[0]) + share * float(whole[0] - last[0]))


def test_ring_latency_across_nodes_is_nccls_model():
    from placement.network import ring_latency_s

    # NCCL's Simple ring: 8.4 us base, 3.4 us per NVLink step, 9.6 us per network step
    us = 1e-6
    assert float(ring_latency_s(512, 8)) == pytest.approx((8.4 + 448 * 3.4 + 63 * 9.6) * us)
    assert float(ring_latency_s(16, 1)) == pytest.approx((8.4 + 15 * 9.6) * us)
    lat = ring_latency_s(np.array([16, 64, 128, 512]), 8)
    assert np.all(np.diff(lat) > 0)
    # a reduce-scatter across 64 nodes waits the ring's latency, more than one link's
    d, params = np.array([512]), np.array([1e3])  # a few bytes: latency alone
    big = Cluster(devices=512, devices_per_node=8)
    problem = dataclasses.replace(_problem(zero_stages=(1,)), cluster=big)
    comm, _ = dp_terms(problem, 1, 1, d, params, 512)
    (rs, ag) = dp_collectives(1, 1, 2.0, 2.0)
    assert rs.kind == "reduce_scatter" and ag.kind == "all_gather"
    assert float(comm[0]) >= 2 * float(ring_latency_s(512, 8))


def test_dp_time_splits_the_collectives_into_overlapped_and_exposed():
    from placement.dp_comm import dp_time

    # one node of 8 (no curve: the link's latency and bandwidth), ZeRO-3 prefetched
    bw, lat, d, m, share = 100e9, 2e-6, 8, 8, 0.2  # one micro-batch per replica
    cluster = Cluster(devices=8, devices_per_node=8, intra_node_bandwidth_bytes_per_s=bw)
    assert cluster.intra_node_latency_s == lat
    fsdp = dataclasses.replace(
        _problem(zero_stages=(3,), sharded_prefetch=True, collective_compute_share=share),
        cluster=cluster,
        gradient_bytes_per_parameter=4.0,
    )
    units, unit_params = 80, 1e9
    parts = dp_time(
        fsdp,
        1,
        3,
        np.array([d]),
        np.array([units * unit_params]),
        m,
        load_s=1e3,
        unit=(unit_params, 1.0),
    )
    ring = (d - 1) / d
    gather, scatter = ring * 2 * unit_params / bw, ring * 4 * unit_params / bw
    moving, waiting = units * (2 * gather + scatter), units * 3 * lat
    assert float(parts.unoverlapped_s[0]) == pytest.approx(moving + waiting)
    # compute hides the bytes of all but the first gather and the last reduce-scatter;
    # no collective's latency
    edge = gather + scatter
    assert float(parts.overlapped_s[0]) == pytest.approx(moving - edge)
    want = waiting + edge + share * (moving - edge)
    assert float(parts.exposed_s[0]) == pytest.approx(want)


def test_the_weights_gather_moves_the_weights_format():
    """ZeRO's all-gather of the updated weights moves the weights' bytes, the gradient
    reduction the gradients': each its own, from the problem."""
    rs, ag = dp_collectives(1, 1, 4.0, 1.0)
    assert (rs.what, rs.bytes_per_parameter) == ("gradients", 4.0)
    assert (ag.what, ag.bytes_per_parameter) == ("weights", 1.0)
    d, params = np.array([8]), np.array([4e9])
    wide = _problem(zero_stages=(1,), weight_bytes_per_parameter=2.0)
    narrow = dataclasses.replace(wide, weight_bytes_per_parameter=1.0)
    assert float(dp_terms(narrow, 8, 1, d, params, 8)[0][0]) < float(
        dp_terms(wide, 8, 1, d, params, 8)[0][0]
    )
    # stage 0 gathers no weights: its all-reduce does not read them
    assert float(dp_terms(narrow, 8, 0, d, params, 8)[0][0]) == float(
        dp_terms(wide, 8, 0, d, params, 8)[0][0]
    )
    with pytest.raises(ConfigError, match="weight_bytes_per_parameter"):
        dataclasses.replace(wide, weight_bytes_per_parameter=-1.0)


def test_prefetched_collectives_lose_time_with_the_data_parallel_degree():
    """At a fixed recipe (one micro-batch per replica, the same units, compute far longer
    than the collectives' bytes), FSDP's exposed time grows with the ranks: every unit's
    collective waits its ring's latency, which grows with the ring (NCCL's model)."""
    unit, units, m_per_d = (1e9, 0.5), 32, 1
    params = np.array([units * unit[0]])
    exposed = {}
    for d in (16, 128, 512):
        big = Cluster(devices=d, devices_per_node=8)
        fsdp = dataclasses.replace(
            _problem(zero_stages=(3,), sharded_prefetch=True), cluster=big, global_batch=d
        )
        comm, _ = dp_terms(fsdp, 1, 3, np.array([d]), params, d * m_per_d, load_s=1e3, unit=unit)
        exposed[d] = float(comm[0])
    grow = float(ring_latency_s(512, 8) - ring_latency_s(128, 8))
    assert exposed[16] < exposed[128] < exposed[512]
    # three collectives per unit (two gathers, a reduce-scatter), each one latency more
    assert exposed[512] - exposed[128] >= units * 3 * grow * (1 - 1e-9)


def test_fsdp_zero2_gathers_the_weights_for_every_micro_batch():
    """FSDP's SHARD_GRAD_OP frees the gathered weights after each backward pass while
    gradients synchronise, so with gradient accumulation each micro-batch gathers them again
    (unit by unit, prefetched); DeepSpeed's ZeRO-2 gathers once per step."""
    (rs, ag) = dp_collectives(2, 4, 2.0, 2.0, regather_per_micro_batch=True)
    assert (rs.count, ag.count, ag.per_micro_batch) == (4, 4, True)
    (rs, ag) = dp_collectives(2, 4, 2.0, 2.0)
    assert (rs.count, ag.count, ag.per_micro_batch) == (4, 1, False)
    # ZeRO-3 gathers before every forward and backward pass either way
    assert dp_collectives(3, 4, 2.0, 2.0, True) == dp_collectives(3, 4, 2.0, 2.0)
    d, params, unit = np.array([64]), np.array([32e9]), (1e9, 0.5)
    once = _problem(zero_stages=(2,), sharded_prefetch=True)
    every = dataclasses.replace(once, regather_per_micro_batch=True)
    times = {}
    for micro_batches in (1, 4, 16):
        m = 64 * micro_batches
        times[micro_batches] = float(
            dp_terms(every, 1, 2, d, params, m, load_s=1e3, unit=unit)[0][0]
        )
    # the communication grows with the micro-batches: each adds a gather of every unit
    assert times[1] < times[4] < times[16]
    lat = float(ring_latency_s(64, 8))
    assert times[16] - times[4] >= 12 * 32 * 2 * lat * (1 - 1e-9)
    # with no compute to hide behind, sixteen gathers of the weights cost more than one
    bare = [
        float(dp_terms(p, 1, 2, d, params, 64 * 16, load_s=0.0, unit=unit)[0][0])
        for p in (once, every)
    ]
    assert bare[1] > bare[0]
