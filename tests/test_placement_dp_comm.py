"""Data-parallel collectives: prefetch behind compute, bucketed gathers, the NICs a ring drives."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from arch_space import Cluster
from placement import PlacementProblem, StageGraph, StageLayer
from placement.dp_comm import (
    bucket_parameters,
    dp_collectives,
    dp_terms,
    prefetched_exposed_s,
    shard_unit,
)


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
    graph = StageGraph(1, (layer,), ())
    cluster = Cluster(devices=64, devices_per_node=8)
    return PlacementProblem((graph,), cluster, hbm_bytes=8e10, global_batch=64, **kw)


def test_prefetch_hides_sharded_collectives_behind_the_load():
    d, params, m = np.array([64]), np.array([64e9]), 64  # one micro-batch per replica
    plain = _problem(zero_stages=(3,))
    fsdp = dataclasses.replace(plain, sharded_prefetch=True)
    unit = (1e9, 0.5)  # 64 units of a billion parameters, half a second each
    whole, _ = dp_terms(plain, 1, 3, d, params, m, load_s=32.0, unit=unit)
    # compute far longer than the collectives: only the first gather and the last
    # reduce-scatter of one unit are exposed; one unit's three collectives (two gathers, a
    # reduce-scatter, of equal bytes) cost the plain model's time for one unit
    hidden, _ = dp_terms(fsdp, 1, 3, d, params, m, load_s=1e3, unit=unit)
    one, _ = dp_terms(plain, 1, 3, d, np.array([1e9]), m)
    assert float(hidden[0]) == pytest.approx(2 / 3 * float(one[0]))
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
    (ag, *_) = [c for c in dp_collectives(1, 1) if c.what == "weights"]
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
    assert shard_unit(StageGraph(1, layers, ())) == (600.0, 4.0)
