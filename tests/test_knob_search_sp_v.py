"""Sequence parallelism and interleaving searched: the full search, partial strategies and
sweeps against every (sp, v, ...) combination written out on small cases."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
from budget import budget
from hypothesis import assume, given
from hypothesis import strategies as st
from splits import interleaved_splits

import phaze
from arch_space import Cluster, preset
from phaze.config import sweep_config_from_mapping
from phaze.model.knob_search import time_lower_bound_s
from phaze.model.pipeline import Context, evaluate
from phaze.sweep.planning import plan
from phaze_common.errors import ConfigError, Infeasible
from placement import Layout, PlacementProblem, evaluate_fixed, parse_strategy, place
from placement.dp import candidate_degrees
from placement.partial import evaluate_partial
from placement.synthetic import GptShape, gpt_stage_graph
from placement.types import ZERO_STAGES
from workloads import resolve_model


def _problem(devices: int, hbm_gb: float, batch: int, layers: int) -> PlacementProblem:
    """Graphs at t = 1 and 2, micro-batch 1 and 2, sp on and off (off alone at t = 1)."""
    cluster = Cluster(devices=devices, devices_per_node=4)
    shape = GptShape(layers=layers, hidden=512, heads=8, vocab=8000, seq_len=512)
    graphs = tuple(
        gpt_stage_graph(shape, t, cluster, micro_batch=mb, flops_per_s=1e14, sequence_parallel=sp)
        for t, mb, sp in itertools.product((1, 2), (1, 2), (True, False))
        if t > 1 or not sp
    )
    return PlacementProblem(
        graphs, cluster, hbm_bytes=hbm_gb * 1e9, global_batch=batch, zero_stages=(0, 1)
    )


def _megatron_layouts(problem: PlacementProblem, fixed: Layout):
    """Every full strategy keeping ``fixed``'s set fields, with interleaving as Megatron
    accepts it: ``v = 1``, or ``p >= 2`` with each pipeline's micro-batches a multiple of
    ``p`` and the blocks split evenly over ``p * v`` or unevenly (:mod:`splits`)."""
    for g in problem.graphs:
        blocks = sum(x.kind == "block" for x in g.layers)
        m = problem.global_batch // g.micro_batch
        for p, v, z in itertools.product(range(1, blocks + 3), range(1, blocks + 3), ZERO_STAGES):
            splits = interleaved_splits(blocks, p, v) if v > 1 and p > 1 else [None]
            degrees = candidate_degrees(m, 1, problem.cluster.devices).tolist()
            for split, d in itertools.product(splits, degrees):
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
                if any(getattr(s, k) != getattr(fixed, k) for k in _FIELDS - fixed.open):
                    continue
                if g.tp * p * d > problem.cluster.devices or (v == 1 and p > blocks):
                    continue
                if v > 1 and (p < 2 or (m // d) % p):
                    continue
                yield s


_FIELDS = frozenset({"t", "p", "d", "mbs", "v", "recompute", "sp", "zero"})


def _brute(problem: PlacementProblem, fixed: Layout) -> float:
    best = math.inf
    for s in _megatron_layouts(problem, fixed):
        try:
            best = min(best, evaluate_fixed(problem, s).breakdown.iteration_s)
        except Infeasible:
            pass
    return best


@budget(30, deadline=None)
@given(
    devices=st.sampled_from([4, 8]),
    hbm_gb=st.sampled_from([0.2, 0.5, 2.0]),
    batch=st.sampled_from([8, 16]),
    layers=st.sampled_from([4, 6, 8]),
    text=st.sampled_from(["t=2", "t=2,p=2", "p=2,d=2", "t=2,mbs=1", "t=1", "d=1", "t=2,sp=on"]),
)
def test_a_partial_strategy_is_the_best_completion_over_sp_and_v(
    devices, hbm_gb, batch, layers, text
):
    """Leaving sp and v open, a partial strategy's answer is the fastest fitting layout over
    every completion written out (sp on and off, v = 1 and every interleaving Megatron
    accepts), and it names the v and sp it chose."""
    problem = _problem(devices, hbm_gb, batch, layers)
    fixed = parse_strategy(text)
    brute = _brute(problem, fixed)
    assume(brute < math.inf)
    pl = evaluate_partial(problem, fixed, sequence_parallel=None)
    chosen = pl.layout
    assert pl.breakdown.iteration_s == pytest.approx(brute, rel=1e-12)
    assert (chosen.v, chosen.sp) == (
        pl.layout.v,
        pl.layout.sp,
    )
    assert not chosen.open and chosen.given("v")
    if pl.layout.v > 1:
        assert (batch // pl.layout.mbs // pl.layout.d) % pl.layout.p == 0


def test_a_strategy_that_fixes_v_keeps_it():
    problem = _problem(8, 2.0, 16, 8)
    for v in (1, 2, 4):
        pl = evaluate_partial(problem, parse_strategy(f"t=1,p=2,v={v}"))
        chosen = pl.layout
        assert pl.layout.v == chosen.v == v


def test_an_impossible_fixed_part_is_one_error():
    with pytest.raises(ConfigError, match="devices, the cluster has 8"):
        evaluate_partial(_problem(8, 2.0, 16, 8), parse_strategy("t=2,p=4,d=2"))


_GPT = resolve_model("gpt3-125m")


def _ctx(sp: bool | None, devices: int = 8) -> Context:
    return Context(
        cluster=Cluster(devices=devices), seq_len=256, global_batch=16, sequence_parallel=sp
    )


def _seconds(ev) -> float:
    return ev.placement.breakdown.iteration_s if ev.feasible else math.inf


@pytest.mark.parametrize("hbm_gib", [80, 0.75, 0.3])
@pytest.mark.parametrize(("micro_batch", "recompute"), [(1, "none"), (4, "none"), (2, "full")])
def test_the_search_is_the_better_of_sp_on_and_off(hbm_gib, micro_batch, recompute):
    """With sp searched, the search (which skips a graph only by exact bounds on its time
    and bytes) finds the time of evaluating sp on and sp off alone and keeping the faster;
    its lower bound holds for both."""
    acc = dataclasses.replace(preset("a100"), hbm_bytes=int(hbm_gib * (1 << 30)))
    knobs = Layout.searching(mbs=micro_batch, recompute=recompute)
    both = _seconds(evaluate("g", _GPT, acc, knobs, _ctx(None)))
    alone = [_seconds(evaluate("g", _GPT, acc, knobs, _ctx(sp))) for sp in (True, False)]
    assert both == min(alone)
    assert time_lower_bound_s(_GPT, acc, knobs, _ctx(None)) <= both


def test_sp_off_wins_where_it_is_faster_and_is_reported():
    """Sequence parallelism is not always the faster: here off wins, and the search says so."""
    acc, knobs = preset("a100"), Layout.searching(mbs=4, recompute="none")
    on, off = (evaluate("g", _GPT, acc, knobs, _ctx(sp)) for sp in (True, False))
    assert _seconds(off) < _seconds(on)
    ev = evaluate("g", _GPT, acc, knobs, _ctx(None))
    assert ev.placement.layout.sp is False and ev.placement.layout.t > 1
    assert _seconds(ev) == _seconds(off)


def test_the_api_and_sweeps_search_sp_unless_it_is_fixed(tmp_path):
    job = {"seq_len": 256, "global_batch": 16, "micro_batch": 4, "recompute": "none"}
    ev = phaze.evaluate("gpt3-125m", preset("a100"), Cluster(devices=8), **job)
    assert ev.placement.layout.sp is False
    fixed = phaze.evaluate(
        "gpt3-125m", preset("a100"), Cluster(devices=8), sequence_parallel=True, **job
    )
    assert fixed.placement.layout.sp is True
    assert _seconds(ev) < _seconds(fixed)
    assert plan(sweep_config_from_mapping({"sweep": {}}))[0].ctx.sequence_parallel is None
    given = sweep_config_from_mapping({"sweep": {"sequence_parallel": True}})
    assert plan(given)[0].ctx.sequence_parallel is True


def test_no_layout_written_out_beats_the_search():
    """Every fixed layout (t, p, d, v, ZeRO stage, sp) of a small case, written out and
    evaluated alone, is at most as fast as the search with sp and v open (the search's DP
    also has uneven stages, so it may be faster); the fastest of them is sp off here."""
    acc, knobs = preset("a100"), Layout.searching(mbs=4, recompute="none")
    search = _seconds(evaluate("g", _GPT, acc, knobs, _ctx(None)))
    times = {}
    for t, p, v, zero, sp in itertools.product((1, 2, 4), (1, 2, 4), (1, 2, 3), range(4), (1, 0)):
        for d in (1, 2, 4):
            if t * p * d > 8 or (v > 1 and (p < 2 or 12 % (p * v) or (16 // 4 // d) % p)):
                continue
            if t == 1 and sp:  # refused: sequence parallelism needs a tensor-parallel group
                continue
            text = f"t={t},p={p},d={d},v={v},zero={zero},sp={sp},mbs=4,recompute=none,ep=1,cp=1"
            ev = evaluate("g", _GPT, acc, parse_strategy(text), _ctx(bool(sp)))
            times[text] = _seconds(ev)
    best = min(times, key=times.get)
    assert search <= times[best] * (1 + 1e-12)
    assert "sp=0" in best and "t=1" not in best


@budget(30, deadline=None)
@given(
    devices=st.sampled_from([4, 8, 16]),
    hbm_gb=st.sampled_from([0.2, 0.5, 2.0]),
    layers=st.sampled_from([4, 8]),
    scale=st.sampled_from([0.5, 0.999, 1.0, 1.001, 2.0]),
)
def test_a_search_under_a_limit_finds_the_best_when_it_is_within_it(devices, hbm_gb, layers, scale):
    """``place(..., limit_s=x)``, which skips what cannot beat x, gives the unlimited
    search's placement when that is within x, and no placement otherwise."""
    problem = _problem(devices, hbm_gb, 16, layers)
    try:
        best = place(problem)
    except Infeasible:
        assume(False)
    limit = best.breakdown.iteration_s * scale
    if scale >= 1.0:
        assert place(problem, limit_s=limit) == best
    else:
        with pytest.raises(Infeasible):
            place(problem, limit_s=limit)
