"""A layout stays a Layout: a stage graph carries its width's layout, and every placement the
search, interleaving and partial completion return keeps each field they do not choose."""

from __future__ import annotations

import dataclasses
import math

import pytest

from arch_space import Cluster, preset
from phaze.api import evaluate
from phaze_common.errors import ConfigError
from placement import PlacementProblem, StageEdge, StageGraph, StageLayer, place
from placement.adapt import stage_graph
from placement.ep_cp import ep_cp_graph, graph_variants, variants
from placement.fixed import evaluate_fixed
from placement.interleave import best_interleaved
from placement.layout import FIELDS, PLACED_FIELDS, Layout, parse_strategy
from placement.partial import completions, describe_defaults, evaluate_partial
from placement.synthetic import GptShape, gpt_stage_graph
from workloads import TrainingSetup, build_layer_graph, get_model

_CLUSTER = Cluster(devices=16, devices_per_node=8)
# what a placement chooses; a graph's ep and cp are chosen too when it is at ep = cp = 1
_CHOSEN = PLACED_FIELDS | {"split"}


def _kept(placed: Layout, graph: StageGraph, chosen: frozenset[str] = _CHOSEN) -> None:
    """``placed`` is complete and equal to ``graph``'s layout on every field not chosen."""
    assert not placed.open
    for name in sorted((FIELDS | {"precision"}) - chosen):
        assert getattr(placed, name) == getattr(graph.layout, name), name


def _graphs(precision: str = "fp8-te") -> tuple[StageGraph, ...]:
    """Chains at two widths, full recompute, sequence parallelism at t = 2, an fp8 recipe."""
    shape = GptShape(layers=8, hidden=1024, heads=16, seq_len=1024)
    out = []
    for t in (1, 2):
        g = gpt_stage_graph(
            shape,
            t,
            _CLUSTER,
            micro_batch=2,
            flops_per_s=1e14,
            recompute="full",
            sequence_parallel=t > 1,
        )
        out.append(
            dataclasses.replace(g, layout=dataclasses.replace(g.layout, precision=precision))
        )
    return tuple(out)


def _problem(**kw) -> PlacementProblem:
    return PlacementProblem(_graphs(), _CLUSTER, hbm_bytes=80e9, global_batch=32, **kw)


def _moe_graph() -> StageGraph:
    block = StageLayer(
        "b",
        1e-3,
        2e-3,
        parameters=1000,
        stash_bytes=1e6,
        expert_parameters=800,
        dispatch_bytes=1e6,
        kv_bytes=1e5,
    )
    layers = tuple(dataclasses.replace(block, name=f"b{i}") for i in range(8))
    edges = tuple(StageEdge(i, i + 1, 1e6) for i in range(len(layers) - 1))
    lay = Layout(t=2, mbs=2, recompute="selective", sp=True, precision="fp8-blockwise")
    return StageGraph(layers, edges, lay, experts=8, top_k=2)


def test_a_graph_layout_leaves_a_placements_fields_open():
    g = _graphs()[1]
    assert g.layout.open == PLACED_FIELDS
    assert (g.tp, g.micro_batch, g.recompute, g.sequence_parallel) == (2, 2, "full", True)
    assert str(g.layout) == "t=2,mbs=2,recompute=full,sp=on,ep=1,cp=1,precision=fp8-te"
    with pytest.raises(ConfigError, match="fixes p = 4; a placement chooses d, p, v, zero"):
        StageGraph(g.layers, g.edges, Layout(t=2, p=4))
    with pytest.raises(ConfigError, match="fixes a split"):
        StageGraph(g.layers[:2], g.edges[:1], Layout(split=("Et",)))


def test_stage_graph_carries_the_knobs_the_caller_gives():
    model = get_model("gpt3-125m")
    setup = TrainingSetup(256, 16, micro_batch=2, precision="fp8-te")
    lg = build_layer_graph(model, setup, 2)
    times = dict.fromkeys(lg.op_graphs, (1e-3, 2e-3, 0.0))
    g = stage_graph(
        lg,
        times,
        micro_batch=2,
        recompute="selective",
        sequence_parallel=True,
        precision="fp8-te",
    )
    want = Layout(t=2, mbs=2, recompute="selective", sp=True, precision="fp8-te")
    assert g.layout == dataclasses.replace(want, open=PLACED_FIELDS)


def test_the_search_keeps_the_graphs_layout():
    problem = _problem()
    pl = place(problem)
    assert pl.layout.precision == "fp8-te"  # not bf16: nothing patches it back
    _kept(pl.layout, next(g for g in problem.graphs if g.tp == pl.layout.t))
    for method in ("chain", "dag"):
        assert place(problem, method=method).layout == pl.layout


def test_interleaving_keeps_the_graphs_layout():
    problem = _problem()
    pl = best_interleaved(problem, math.inf)
    assert pl is not None and pl.layout.v >= 2
    _kept(pl.layout, next(g for g in problem.graphs if g.tp == pl.layout.t))


@pytest.mark.parametrize("strategy", ["p=2", "t=2,d=4", "t=1,p=4,v=2"])
def test_partial_completions_keep_the_graphs_layout(strategy):
    problem = _problem()
    asked = parse_strategy(f"{strategy},precision=fp8-te")
    found = completions(problem, asked)
    assert found
    for lay in found:
        _kept(lay, next(g for g in problem.graphs if g.tp == lay.t), _CHOSEN | {"ep", "cp"})
    pl = evaluate_partial(problem, asked)
    _kept(pl.layout, next(g for g in problem.graphs if g.tp == pl.layout.t), _CHOSEN)


def test_expert_and_context_variants_keep_the_rest_of_the_layout():
    g = _moe_graph()
    varied = ep_cp_graph(g, 4, 2, _CLUSTER)
    assert varied.layout == dataclasses.replace(g.layout, ep=4, cp=2)
    problem = PlacementProblem(
        (g,), _CLUSTER, hbm_bytes=80e9, global_batch=32, ep_degrees=(1, 2, 4), cp_degrees=(1, 2)
    )
    for v in graph_variants(problem):
        assert v.layout == dataclasses.replace(g.layout, ep=v.ep, cp=v.cp)
    for v in variants(problem):
        assert v.graph.layout == dataclasses.replace(g.layout, ep=v.ep, cp=v.cp)
    pl = place(problem)
    _kept(pl.layout, g, _CHOSEN | {"ep", "cp"})
    _kept(pl.layout, ep_cp_graph(g, pl.layout.ep, pl.layout.cp, _CLUSTER))


@pytest.mark.parametrize("strategy", [None, "p=2"])
def test_an_evaluated_placement_carries_the_precision_asked(strategy):
    ev = evaluate(
        "gpt3-125m",
        preset("h100"),
        Cluster(devices=8),
        seq_len=256,
        global_batch=16,
        micro_batch=1,
        recompute="none",
        precision="fp8-te",
        strategy=strategy,
    )
    assert ev.placement is not None, ev.reason
    assert ev.placement.layout.precision == ev.knobs.precision == "fp8-te"
    assert "precision" not in (ev.defaults or "")  # asked for, not a default used


def test_the_defaults_used_are_the_fields_left_open():
    problem = _problem()
    asked = parse_strategy("t=2,p=2,precision=fp8-te")
    pl = evaluate_partial(problem, asked)
    said = describe_defaults(asked, pl.layout)
    told = parse_strategy(f"{asked},{said}")  # the split is the placement's, not a default
    assert dataclasses.replace(told, split=pl.layout.split) == pl.layout
    assert {part.split("=")[0] for part in said.split(",")} == asked.open - {"split"}


def test_a_layout_is_placed_only_on_a_graph_of_its_precision():
    """The figures of an fp8 graph are no bf16 layout's: a fixed or partial layout asking for
    another recipe than the graphs' finds no graph, and says which it has."""
    problem = _problem()
    bf16 = parse_strategy("t=2,p=2,d=4,v=1,mbs=2,recompute=full,sp=on,zero=0,ep=1,cp=1")
    with pytest.raises(
        ConfigError,
        match=r"no graph for t=2,mbs=2,recompute=full,sp=on \(have .*sp=on,precision=fp8-te\)",
    ):
        evaluate_fixed(problem, bf16)
    fp8 = dataclasses.replace(bf16, precision="fp8-te")
    assert evaluate_fixed(problem, fp8).layout == fp8
    assert completions(problem, parse_strategy("p=2,precision=fp8-te")) != []
    assert completions(problem, parse_strategy("p=2")) == []  # bf16, as every layout not saying
