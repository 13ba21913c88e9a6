"""ZeRO stages 1-3: memory per device divided by d, data-parallel collectives, degrees that
divide the batch, and the strategy language's ``zero``."""

from __future__ import annotations

import dataclasses
import math

import pytest
from budget import budget
from hypothesis import given
from hypothesis import strategies as st

from arch_space import Cluster
from phaze_common.errors import ConfigError
from placement import (
    Layout,
    PlacementProblem,
    StageEdge,
    StageGraph,
    StageLayer,
    evaluate_fixed,
    parse_strategy,
    place,
)
from placement.dp import candidate_degrees
from placement.iteration import zero_state


def _chain(n: int, params: int = 100) -> StageGraph:
    layers = tuple(
        StageLayer(f"b{i}", 1.0, 2.0, parameters=params, stash_bytes=0.0, workspace_bytes=3.0)
        for i in range(n)
    )
    return StageGraph(layers, tuple(StageEdge(i, i + 1, 0.0) for i in range(n - 1)))


def _problem(zero_stages: tuple[int, ...], hbm_bytes: float = 2000.0) -> PlacementProblem:
    return PlacementProblem(
        (_chain(2),),
        Cluster(devices=4, intra_node_bandwidth_bytes_per_s=100.0, intra_node_latency_s=0.5),
        hbm_bytes=hbm_bytes,
        global_batch=8,
        max_stages=1,
        optimizer_s_per_parameter=0.01,
        zero_stages=zero_stages,
    )


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_the_weights_format_sets_what_zero_shards(zero):
    """fp32 weights (4 B) with 4 B gradients and 12 B of Adam state: the weights' bytes are
    the layout's format, not a fixed 2 B, in the memory of a fixed layout and the search
    alike; stage 3 gathers two 4-byte layers."""
    problem = dataclasses.replace(
        _problem((zero,), hbm_bytes=1e9),
        state_bytes_per_parameter=20.0,
        weight_bytes_per_parameter=4.0,
    )
    assert (
        zero_state(20.0, zero, 12.0, 4.0)
        == (
            (20.0, 0.0, 0.0),
            (8.0, 12.0, 0.0),
            (4.0, 16.0, 0.0),
            (0.0, 20.0, 8.0),
        )[zero]
    )
    fixed = evaluate_fixed(problem, Layout(d=4, zero=zero))
    mem = fixed.memory_breakdown
    params = 200
    assert mem.weights_bytes == pytest.approx(params * 4.0 / (4 if zero == 3 else 1))
    assert mem.gradients_bytes == pytest.approx(params * 4.0 / (4 if zero >= 2 else 1))
    best = place(problem)
    assert best.memory_breakdown.total_bytes == pytest.approx(
        evaluate_fixed(problem, best.layout).memory_breakdown.total_bytes
    )


def test_zero_state_shards_optimizer_then_gradients_then_weights():
    # Adam in mixed precision: 2 B weights, 4 B fp32 gradients, 12 B optimizer state
    assert zero_state(18.0, 0, 12.0, 2.0) == (18.0, 0.0, 0.0)
    assert zero_state(18.0, 1, 12.0, 2.0) == (6.0, 12.0, 0.0)
    assert zero_state(18.0, 2, 12.0, 2.0) == (2.0, 16.0, 0.0)
    assert zero_state(18.0, 3, 12.0, 2.0) == (0.0, 18.0, 4.0)  # two gathered 2-byte layers


@pytest.mark.parametrize(
    ("zero", "weights", "gradients", "optimizer", "workspace"),
    [(0, 400, 800, 2400, 3), (1, 400, 800, 600, 3), (2, 400, 200, 600, 3), (3, 100, 200, 600, 403)],
)
def test_memory_parts_by_hand(zero, weights, gradients, optimizer, workspace):
    """200 parameters on one stage, d = 4: each ZeRO stage divides one more part by 4."""
    pl = evaluate_fixed(_problem((0,)), Layout(1, 1, 4, zero=zero), check_memory=False)
    mem = pl.memory_breakdown
    got = (mem.weights_bytes, mem.gradients_bytes, mem.optimizer_bytes, mem.workspace_bytes)
    assert got == (weights, gradients, optimizer, workspace)
    assert pl.layout.zero == zero


@pytest.mark.parametrize(
    ("zero", "comm_s", "optimizer_s"),
    [
        # ring over d = 4 on 100 B/s, 0.5 s latency; 200 parameters of 2-byte gradients/weights
        (0, 0.5 + 2 * 0.75 * 400 / 100, 2.0),  # one all-reduce; the whole step
        (1, 2 * (0.5 + 0.75 * 400 / 100), 0.5),  # reduce-scatter + all-gather; 1/4 of the step
        (2, 2 * (0.5 + 3.0) + (0.5 + 3.0), 0.5),  # a reduce-scatter per micro-batch (2 of them)
        (3, 2 * 3 * (0.5 + 3.0), 0.5),  # + two all-gathers per micro-batch
    ],
)
def test_data_parallel_collectives_by_hand(zero, comm_s, optimizer_s):
    pl = evaluate_fixed(_problem((0,)), Layout(1, 1, 4, zero=zero), check_memory=False)
    assert math.isclose(pl.breakdown.dp_comm_exposed_s, comm_s)
    assert math.isclose(pl.breakdown.optimizer_s, optimizer_s)
    assert pl.breakdown.iteration_s == pl.breakdown.iteration_s


@pytest.mark.parametrize(
    ("zero", "comm_s"),
    [
        # 2e8 parameters, d = 4, 1e9 B/s, 0.5 s latency: gradient reductions expose only the
        # last bucket (max(40e6, 1e6 d) = 4e7 parameters); the weights' all-gathers stay whole
        (0, 0.5 + 2 * 0.75 * 8e7 / 1e9),
        (1, (0.5 + 0.75 * 8e7 / 1e9) + (0.5 + 0.75 * 4e8 / 1e9)),
        (2, 2 * (0.5 + 0.75 * 8e7 / 1e9) + (0.5 + 0.75 * 4e8 / 1e9)),
        (3, 2 * ((0.5 + 0.75 * 8e7 / 1e9) + 2 * (0.5 + 0.75 * 4e8 / 1e9))),
    ],
)
def test_an_overlapped_gradient_reduction_exposes_its_last_bucket_at_every_stage(zero, comm_s):
    problem = dataclasses.replace(
        _problem((0,)),
        graphs=(_chain(2, params=100_000_000),),
        cluster=Cluster(devices=4, intra_node_bandwidth_bytes_per_s=1e9, intra_node_latency_s=0.5),
        dp_overlap=True,
    )
    pl = evaluate_fixed(problem, Layout(1, 1, 4, zero=zero), check_memory=False)
    assert math.isclose(pl.breakdown.dp_comm_exposed_s, comm_s)
    plain = evaluate_fixed(
        dataclasses.replace(problem, dp_overlap=False),
        Layout(1, 1, 4, zero=zero),
        check_memory=False,
    )
    assert plain.breakdown.dp_comm_exposed_s > pl.breakdown.dp_comm_exposed_s


def test_a_model_that_fits_only_with_sharded_state():
    """200 x 18 B = 3600 B does not fit 2000 B; ZeRO-1 at d = 4 (200 x 9 + 3 B) does."""
    with pytest.raises(Exception, match="needs"):
        place(_problem((0,)))
    best = place(_problem((0, 1)))
    assert (best.layout.zero, best.layout.d) == (1, 4)
    assert best.memory_breakdown.total_bytes == 200 * (6 + 12 / 4) + 3


def test_the_search_picks_the_fastest_stage_that_fits():
    """With room for everything, ZeRO-1's 1/d optimizer step beats the all-reduce's one
    latency less; ZeRO-2 and 3 pay per micro-batch collectives."""
    best = place(_problem((0, 1, 2, 3), hbm_bytes=1e9))
    times = {
        z: evaluate_fixed(
            _problem((0,), 1e9), Layout(1, 1, best.layout.d, zero=z)
        ).breakdown.iteration_s
        for z in range(4)
    }
    assert best.layout.zero == min(times, key=times.get)
    assert best.breakdown.iteration_s == min(times.values())


@budget(200)
@given(st.integers(1, 5000), st.data())
def test_candidate_degrees_are_the_divisors(m, data):
    lo = data.draw(st.integers(1, m))
    hi = data.draw(st.integers(lo, m))
    assert candidate_degrees(m, lo, hi).tolist() == [d for d in range(lo, hi + 1) if m % d == 0]


@budget(200)
@given(st.integers(1, 5000), st.data(), st.floats(0, 1e4), st.floats(1e-3, 10))
def test_candidate_degrees_of_the_reference_format_hold_the_best(m, data, slope, load):
    """Without whole batches, the candidates hold the best degree for a rising tail."""
    lo = data.draw(st.integers(1, m))
    hi = data.draw(st.integers(lo, m))

    def time(d: int) -> tuple[float, int]:
        return load * -(-m // d) + slope * (d - 1) / d, d

    ds = candidate_degrees(m, lo, hi, whole=False)
    assert ds.size <= 2 * math.isqrt(m) + 4
    best = min(time(d) for d in range(lo, hi + 1))
    # the best time, up to rounding: two degrees a few ulps apart may swap order
    assert min(time(int(d))[0] for d in ds) == pytest.approx(best[0], rel=1e-12, abs=0.0)


def test_the_search_returns_degrees_that_divide_the_batch():
    """8 devices and 9 micro-batches: d = 5 would run 2 per pipeline but leaves a replica
    short; the divisors 1, 3, 9 leave d = 3."""
    g = _chain(1, params=0)
    best = place(PlacementProblem((g,), Cluster(devices=8), hbm_bytes=1e9, global_batch=9))
    assert (best.layout.d, best.micro_batches) == (3, 3)


def test_zero_in_the_strategy_language():
    assert parse_strategy("t=2,p=1,d=4,zero=3").zero == 3
    for text in ("t=1,p=1,d=1,zero=4", "t=1,p=1,d=1,zero=x"):
        with pytest.raises(ConfigError, match="zero"):
            parse_strategy(text)
    with pytest.raises(ConfigError, match="zero"):
        PlacementProblem((_chain(1),), Cluster(devices=1), 1e9, 1, zero_stages=(5,))


def test_a_fixed_degree_must_divide_the_batch():
    with pytest.raises(ConfigError, match=r"d \* mbs = 3 \* 1 must divide"):
        evaluate_fixed(_problem((0,)), Layout(1, 1, 3))
