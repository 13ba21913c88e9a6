"""The search over every knob: graph variants (t, micro-batch, recompute, sp), ZeRO stages
with their degree bounds, interleaving (v), and the sweep's ``zero`` list, checked against
brute force over the knob grid on small instances."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from splits import interleaved_splits

from arch_space import Cluster, preset
from phaze.config import sweep_config_from_mapping
from phaze.model.knob_search import evaluate_best_knobs, time_lower_bound_s
from phaze.model.pipeline import Context, evaluate
from phaze.sweep.planning import plan
from phaze_common.errors import ConfigError, Infeasible
from placement import Layout, PlacementProblem, evaluate_fixed, parse_strategy, place
from placement.dp import candidate_degrees
from placement.interleave import best_interleaved
from placement.synthetic import GptShape, gpt_stage_graph
from workloads import resolve_model

_FLOPS = 1e14


def _problem(
    devices: int,
    hbm_gb: float,
    batch: int,
    zero: tuple[int, ...],
    knobs: tuple[tuple[int, int, str], ...],
    layers: int = 4,
) -> PlacementProblem:
    cluster = Cluster(devices=devices, devices_per_node=4)
    shape = GptShape(layers=layers, hidden=512, heads=8, vocab=8000, seq_len=512)
    graphs = tuple(
        gpt_stage_graph(shape, t, cluster, micro_batch=mb, flops_per_s=_FLOPS, recompute=rc)
        for t, mb, rc in knobs
    )
    return PlacementProblem(
        graphs, cluster, hbm_bytes=hbm_gb * 1e9, global_batch=batch, zero_stages=zero
    )


def _time(problem: PlacementProblem) -> float:
    try:
        return place(problem, method="chain").breakdown.iteration_s
    except Infeasible:
        return math.inf


_KNOBS = st.lists(
    st.tuples(
        st.sampled_from([1, 2]), st.sampled_from([1, 2, 4]), st.sampled_from(["none", "full"])
    ),
    min_size=1,
    max_size=4,
    unique=True,
)
_ZERO = st.lists(st.integers(0, 3), min_size=1, max_size=4, unique=True).map(
    lambda z: tuple(sorted(z))
)


@settings(max_examples=40, deadline=None)
@given(
    devices=st.sampled_from([2, 4, 8, 16]),
    hbm_gb=st.sampled_from([0.05, 0.1, 0.3, 2.0]),
    batch=st.sampled_from([4, 8, 12]),
    zero=_ZERO,
    knobs=_KNOBS,
)
def test_the_search_is_the_best_of_every_knob_alone(devices, hbm_gb, batch, zero, knobs):
    """One search over graph variants and ZeRO stages finds the time of the best of the
    searches of each (variant, stage) alone, and its d * mbs divides the global batch."""
    problem = _problem(devices, hbm_gb, batch, zero, tuple(knobs))
    alone = min(_time(_problem(devices, hbm_gb, batch, (z,), (k,))) for k in knobs for z in zero)
    both = _time(problem)
    assert both == pytest.approx(alone, rel=1e-12) or both == alone == math.inf
    if both < math.inf:
        pl = place(problem, method="chain")
        assert batch % (pl.layout.d * pl.layout.mbs) == 0
        assert pl.layout.zero in zero


def test_a_micro_batch_that_does_not_divide_the_batch_is_refused():
    with pytest.raises(ConfigError, match="global_batch = 8 is not a multiple of micro_batch = 3"):
        _problem(8, 2.0, 8, (0,), ((1, 3, "none"),))


def _interleaved_brute(problem: PlacementProblem) -> float:
    """The fastest fitting interleaved layout Megatron accepts (at an even or uneven split),
    by evaluating every one."""
    best = math.inf
    for g in problem.graphs:
        m = problem.global_batch // g.micro_batch
        blocks = sum(x.kind == "block" for x in g.layers)
        for p, v in itertools.product(range(2, blocks + 3), range(2, blocks + 3)):
            grid = itertools.product(
                interleaved_splits(blocks, p, v),
                candidate_degrees(m, 1, problem.cluster.devices).tolist(),
            )
            for split, d in grid:
                if g.tp * p * d > problem.cluster.devices or (m // d) % p:
                    continue
                for z in problem.zero_stages:
                    s = Layout(
                        t=g.tp,
                        p=p,
                        d=d,
                        mbs=g.micro_batch,
                        v=v,
                        recompute=g.recompute,
                        sp=g.sequence_parallel,
                        zero=z,
                        split=split,
                    )
                    try:
                        best = min(best, evaluate_fixed(problem, s).breakdown.iteration_s)
                    except Infeasible:
                        pass
    return best


@settings(max_examples=25, deadline=None)
@given(
    devices=st.sampled_from([4, 8, 16]),
    hbm_gb=st.sampled_from([0.1, 0.3, 2.0]),
    batch=st.sampled_from([8, 16]),
    zero=_ZERO,
    knobs=_KNOBS,
    layers=st.sampled_from([4, 6, 7, 8]),
)
def test_interleaving_finds_the_fastest_layout_under_the_incumbent(
    devices, hbm_gb, batch, zero, knobs, layers
):
    problem = _problem(devices, hbm_gb, batch, zero, tuple(knobs), layers)
    brute = _interleaved_brute(problem)
    assume(brute < math.inf)
    for incumbent in (math.inf, brute * (1 + 1e-9), brute):
        found = best_interleaved(problem, incumbent)
        if brute < incumbent:
            assert found is not None
            assert found.breakdown.iteration_s == pytest.approx(brute, rel=1e-12)
            assert found.layout.v >= 2
            assert batch % (found.layout.d * found.layout.mbs) == 0
        else:
            assert found is None


def test_the_sweep_zero_list_restricts_the_search():
    cfg = sweep_config_from_mapping({"sweep": {"zero": [3, 1]}})
    assert cfg.training.zero == (3, 1)
    shared, _ = plan(cfg)
    assert shared.ctx.zero_stages == (1, 3) and shared.ctx.zero_fallback == ()
    default, _ = plan(sweep_config_from_mapping({}))
    assert default.ctx.zero_stages == (0, 1) and default.ctx.zero_fallback == (2, 3)


@pytest.mark.parametrize("value", [[4], [-1], ["1"], [True], 1.5])
def test_a_bad_zero_list_names_key_value_and_what_is_allowed(value):
    with pytest.raises(ConfigError) as e:
        sweep_config_from_mapping({"sweep": {"zero": value}})
    text = str(e.value)
    assert "zero = " in text and repr(value) in text and "0, 1, 2, 3" in text


@pytest.mark.parametrize(("devices", "hbm_gib"), [(4, 32.0), (8, 1.0)])
def test_open_knobs_find_the_best_evaluation_of_the_grid(devices, hbm_gib):
    """Micro-batch and recompute left open: the evaluation of the fastest pair of the grid
    (each pair evaluated alone), never one whose bound the search skipped wrongly."""
    acc = dataclasses.replace(preset("tpuv4"), hbm_bytes=int(hbm_gib * 2**30))
    ctx = Context(cluster=Cluster(devices=devices, devices_per_node=4), seq_len=256, global_batch=8)
    model = resolve_model("gpt3-125m")
    grid = [
        Layout.searching(mbs=mb, recompute=rc)
        for mb in (1, 2, 4, 8)
        for rc in ("none", "selective", "full")
    ]
    alone = [evaluate("gpt3-125m", model, acc, k, ctx) for k in grid]
    times = [ev.placement.breakdown.iteration_s for ev in alone if ev.feasible]
    for k in grid:
        assert time_lower_bound_s(model, acc, k, ctx) <= min(
            (ev.placement.breakdown.iteration_s for ev in alone if ev.knobs == k and ev.feasible),
            default=math.inf,
        )
    best = evaluate_best_knobs("gpt3-125m", model, acc, ctx)
    assert best.feasible == bool(times)
    if times:
        assert best.placement.breakdown.iteration_s == min(times)
        assert 8 % (best.placement.layout.d * best.placement.layout.mbs) == 0


def test_a_strategy_leaving_micro_batch_and_recompute_open_takes_the_fastest_pair():
    """``t=1,p=2,d=2`` with the micro-batch and recompute mode open: the fastest of the same
    strategy with each pair written out (d * mbs dividing the batch), evaluated alone."""
    acc = preset("tpuv4")
    ctx = Context(cluster=Cluster(devices=4, devices_per_node=4), seq_len=256, global_batch=8)
    model = resolve_model("gpt3-125m")
    found = evaluate_best_knobs(
        "gpt3-125m", model, acc, ctx, strategy=parse_strategy("t=1,p=2,d=2")
    )
    times = []
    for mb, rc in itertools.product((1, 2, 4), ("none", "selective", "full")):
        fixed = parse_strategy(f"t=1,p=2,d=2,mbs={mb},recompute={rc}")
        ev = evaluate("gpt3-125m", model, acc, fixed, ctx)
        if ev.feasible:
            times.append(ev.placement.breakdown.iteration_s)
    assert times and found.placement.breakdown.iteration_s == min(times)
    assert (found.placement.layout.t, found.placement.layout.p, found.placement.layout.d) == (
        1,
        2,
        2,
    )


def test_open_knobs_need_a_micro_batch_that_divides_the_batch():
    ctx = Context(cluster=Cluster(devices=4), global_batch=6)
    with pytest.raises(ConfigError, match=r"micro_batches = \[4, 8\]: none divides"):
        evaluate_best_knobs(
            "gpt3-125m", resolve_model("gpt3-125m"), preset("tpuv4"), ctx, micro_batches=(4, 8)
        )
