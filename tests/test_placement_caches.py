"""The placement's caches change no figure and are shared by problems that differ only in
what they do not read.

* :func:`placement.dp_comm.tail_fn` caches the data-parallel collectives by the values of
  its arguments: its tail is :func:`placement.dp_comm.dp_terms`' bit for bit, and a problem
  with another HBM (capacity or bandwidth) asks the cache, not the rings, again.
* :mod:`placement.interleave` works out a graph's interleaved splits once: problems that
  differ in HBM alone find the same layouts without working them out again.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from arch_space import Cluster
from placement import PlacementProblem, StageGraph, StageLayer
from placement import interleave as il
from placement.dp_comm import _exposed_s, dp_terms, tail_fn
from placement.synthetic import GptShape, gpt_stage_graph


def _problem(**kw) -> PlacementProblem:
    layer = StageLayer("b", fwd_s=1.0, bwd_s=2.0, parameters=10**9, stash_bytes=1.0)
    graph = StageGraph((layer,), ())
    cluster = Cluster(devices=512, devices_per_node=8)
    return PlacementProblem((graph,), cluster, hbm_bytes=8e10, global_batch=512, **kw)


@pytest.mark.parametrize("prefetch", [False, True])
@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_tail_is_dp_terms_bit_for_bit(prefetch, zero):
    rng = np.random.default_rng(zero)
    problem = _problem(
        zero_stages=(zero,),
        sharded_prefetch=prefetch,
        dp_overlap=True,
        optimizer_s_per_parameter=1e-11,
        weight_refresh_s_per_parameter=3e-12,
        collective_compute_share=0.1,
    )
    m, unit = 512, (2e8, 0.01)
    ds = np.array([1, 2, 4, 8, 16, 64, 256, 512])
    cases = [  # (degrees, parameters, load): one column, and a grid as the DP's bounds ask
        (ds, np.full(ds.size, 3e9), rng.uniform(0.0, 1.0, ds.size)),
        (ds[:, None], rng.uniform(1e8, 1e10, (ds.size, 5)), rng.uniform(0.0, 1.0, (1, 5))),
    ]
    for d, params, load in cases:
        comm, step = dp_terms(problem, 2, zero, d, params, m, load_s=load, unit=unit)
        tail = tail_fn(problem, 2, zero, m, unit=unit)
        for _ in range(2):  # computed, then from the cache
            np.testing.assert_array_equal(tail(d, params, load), comm + step, strict=True)


def test_problems_differing_in_hbm_share_the_collectives():
    base = _problem(zero_stages=(1,), optimizer_s_per_parameter=1e-11)
    other = dataclasses.replace(base, hbm_bytes=4e10, optimizer_s_per_parameter=2e-11)
    d, params, load = np.array([8, 32, 128]), np.array([1.5e9, 1.5e9, 1.5e9]), np.zeros(3)
    tail_fn(base, 4, 1, 512)(d, params, load)
    misses = _exposed_s.cache_info().misses
    got = tail_fn(other, 4, 1, 512)(d, params, load)
    assert _exposed_s.cache_info().misses == misses  # the rings are not priced again
    comm, step = dp_terms(other, 4, 1, d, params, 512)
    np.testing.assert_array_equal(got, comm + step)  # yet the step is the other HBM's


def test_interleaved_splits_are_worked_out_once_per_graph():
    cluster = Cluster(devices=64, devices_per_node=8)
    shape = GptShape(layers=24, hidden=2048, heads=16, vocab=32000, seq_len=2048)
    graph = gpt_stage_graph(shape, 2, cluster, flops_per_s=1e14)
    problems = [
        PlacementProblem((graph,), cluster, hbm_bytes=hbm, global_batch=128, interleaving=True)
        for hbm in (80e9, 40e9, 80e9)
    ]
    il._shapes.cache_clear()
    found = [il.best_interleaved(p, np.inf) for p in problems]
    assert il._shapes.cache_info().misses == 1  # one graph: its splits worked out once
    assert found[0] is not None and found[0] == found[2]
    floors = [il.interleaved_floor(p, np.inf) for p in problems]
    assert il._shapes.cache_info().misses == 1
    il._shapes.cache_clear()  # the same answers when nothing is cached
    assert [il.best_interleaved(p, np.inf) for p in problems] == found
    il._shapes.cache_clear()
    assert [il.interleaved_floor(p, np.inf) for p in problems] == floors


def test_a_split_that_cannot_fit_is_not_priced(monkeypatch):
    cluster = Cluster(devices=64, devices_per_node=8)
    shape = GptShape(layers=24, hidden=2048, heads=16, vocab=32000, seq_len=2048)
    graph = gpt_stage_graph(shape, 2, cluster, flops_per_s=1e14)
    roomy = PlacementProblem((graph,), cluster, hbm_bytes=80e9, global_batch=128)
    tiny = dataclasses.replace(roomy, hbm_bytes=1e6)  # no layout's memory floor fits
    priced = []
    real = il._priced
    monkeypatch.setattr(il, "_priced", lambda *a: priced.append(a) or real(*a))
    assert il.best_interleaved(tiny, np.inf) is None
    assert il.interleaved_floor(tiny, np.inf) is None
    assert priced == []
    assert il.best_interleaved(roomy, np.inf) is not None
    assert priced
