"""A tied LM head on a pipeline: the last stage's copy of the word embedding (its weights,
gradients and optimizer state, sharded by ZeRO like the others) and the all-reduce of the
copy's gradients with the first stage, against closed forms; p = 1 keeps one copy."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from splits import interleaved_splits

from arch_space import Cluster
from phaze_common.errors import Infeasible
from placement import (
    Layout,
    PlacementProblem,
    StageEdge,
    StageGraph,
    StageLayer,
    evaluate_fixed,
    place,
)
from placement.adapt import stage_graph
from placement.interleave import best_interleaved
from placement.synthetic import GptShape, gpt_stage_graph
from workloads import TrainingSetup, build_layer_graph, get_model

_EMB, _BLOCK, _HEAD, _TIED = 500, 100, 4, 500  # parameters; the head reuses the embedding
_STATE = 18.0  # bytes per parameter: 2 weights, 4 gradients, 12 optimizer state
_CLUSTER = Cluster(
    devices=8,
    devices_per_node=8,
    intra_node_bandwidth_bytes_per_s=100.0,
    intra_node_latency_s=0.5,
    inter_node_latency_s=0.5,
)


def _graph(tied: float) -> StageGraph:
    layers = (
        StageLayer("embedding", 1.0, 1.0, parameters=_EMB, stash_bytes=10.0, kind="embedding"),
        *(StageLayer(f"b{i}", 4.0, 8.0, parameters=_BLOCK, stash_bytes=10.0) for i in range(4)),
        StageLayer("head", 1.0, 1.0, parameters=_HEAD, stash_bytes=10.0, kind="head",
                   tied_parameters=tied),
    )  # fmt: skip
    return StageGraph(layers, tuple(StageEdge(i, i + 1, 0.0) for i in range(5)))


def _problem(tied: float, hbm_bytes: float = 1e9, **kw) -> PlacementProblem:
    return PlacementProblem(
        (_graph(tied),), _CLUSTER, hbm_bytes=hbm_bytes, global_batch=8,
        gradient_bytes_per_parameter=2.0, **kw,
    )  # fmt: skip


def _state(parameters: float, zero: int, d: int) -> float:
    """Weights, gradients and optimizer state bytes of ``parameters`` under ZeRO ``zero``."""
    parts = (2.0, 4.0, 12.0)  # sharded over d from stage 3, 2, 1 on
    return sum(b / d if zero >= 3 - i else b for i, b in enumerate(parts)) * parameters


@pytest.mark.parametrize("tied", [0.0, _TIED])
@pytest.mark.parametrize(("zero", "d"), [(0, 1), (1, 2), (2, 4)])
def test_last_stage_keeps_a_copy_only_with_more_than_one_stage(tied, zero, d):
    one = evaluate_fixed(_problem(tied), Layout(t=1, p=1, d=d, zero=zero))
    (only,) = one.stages
    assert only.parameters == _EMB + 4 * _BLOCK + _HEAD  # p = 1: the head shares the table
    assert only.tied_parameters == 0.0
    assert only.memory_bytes == pytest.approx(_state(only.parameters, zero, d) + 6 * 10.0)
    assert one.breakdown.embedding_comm_exposed_s == 0.0

    two = evaluate_fixed(_problem(tied), Layout(t=1, p=2, d=d, zero=zero))
    first, last = two.stages
    assert first.parameters == _EMB + 2 * _BLOCK and first.tied_parameters == 0.0
    # the last stage: two blocks, the head and, when tied, its own copy of the table
    assert last.tied_parameters == tied
    assert last.parameters == 2 * _BLOCK + _HEAD + tied
    assert last.memory_bytes == pytest.approx(_state(last.parameters, zero, d) + 3 * 10.0)
    # its gradients all-reduced between the two stages: 2 ranks, 2-byte gradients
    want = 0.5 + tied * 2.0 / 100.0 if tied else 0.0
    assert two.breakdown.embedding_comm_exposed_s == pytest.approx(want)
    assert math.isclose(sum(two.breakdown.terms().values()), two.breakdown.iteration_s)


def test_zero_3_gathers_the_tied_table_with_the_head():
    got = evaluate_fixed(_problem(_TIED), Layout(t=1, p=2, d=2, zero=3))
    last = got.stages[1]
    assert last.largest_layer_parameters == _HEAD + _TIED  # larger than a block
    untied = evaluate_fixed(_problem(0.0), Layout(t=1, p=2, d=2, zero=3))
    assert untied.stages[1].largest_layer_parameters == _BLOCK


def test_the_search_counts_the_copy_and_its_all_reduce():
    """At most two stages: the whole model does not fit one device, and of the two-stage
    pipelines only blocks 2 + 2 leave the last stage room for the copy, which it then needs
    exactly: (2 blocks + head + copy) x 18 B + one micro-batch's stash."""
    need = (2 * _BLOCK + _HEAD + _TIED) * _STATE + 3 * 10.0
    best = place(_problem(_TIED, max_stages=2, hbm_bytes=need))
    assert best.layout.p == 2 and best.stages[-1].layers == (3, 4, 5)
    assert best.stages[-1].tied_parameters == _TIED
    assert best.stages[-1].memory_bytes == pytest.approx(need)
    assert best.breakdown.embedding_comm_exposed_s == pytest.approx(0.5 + _TIED * 2.0 / 100.0)
    fixed = evaluate_fixed(
        _problem(_TIED, hbm_bytes=need), Layout(t=1, p=2, d=best.layout.d, zero=best.layout.zero)
    )
    assert fixed.breakdown.iteration_s == pytest.approx(best.breakdown.iteration_s)
    assert fixed.memory_breakdown.total_bytes == pytest.approx(best.memory_breakdown.total_bytes)
    with pytest.raises(Infeasible):
        place(_problem(_TIED, max_stages=2, hbm_bytes=need - 1.0))
    assert place(_problem(0.0, max_stages=2, hbm_bytes=need - 1.0)).layout.p == 2  # no copy


def test_gpt3_ties_its_head_and_llama_does_not():
    """The workloads' tied head reaches the stages: a copy of vocab x hidden / t parameters
    on GPT-3's last stage, none on Llama 2's."""
    for name, tied in (("gpt3-125m", True), ("llama2-7b", False)):
        model = get_model(name)
        lg = build_layer_graph(model, TrainingSetup(seq_len=128, global_batch=4), 2)
        times = dict.fromkeys(lg.op_graphs, (1e-3, 2e-3, 0.0))
        graph = stage_graph(lg, times, micro_batch=1, recompute="none")
        problem = PlacementProblem((graph,), Cluster(devices=4), 80e9, global_batch=4)
        pl = evaluate_fixed(problem, Layout(t=2, p=2, d=1))
        copy = lg.layers[-1].tied_parameters
        assert (copy > 0) == tied and copy % (model.embedding_dim) == 0
        assert pl.stages[-1].tied_parameters == copy
        assert (pl.breakdown.embedding_comm_exposed_s > 0) == tied


def _tied_gpt(devices: int, hbm_gb: float, batch: int, zero: tuple[int, ...]):
    """A small closed-form GPT at t = 1 and 2 whose head reuses its large embedding table
    (tied): the copy's all-reduce weighs as much as a few micro-batches, more across nodes."""
    cluster = Cluster(devices=devices, devices_per_node=4)
    shape = GptShape(layers=8, hidden=512, heads=8, vocab=64000, seq_len=512)
    graphs = []
    for t in (1, 2):
        g = gpt_stage_graph(shape, t, cluster, flops_per_s=1e14, recompute="full")
        table = shape.vocab * shape.hidden // t
        head = dataclasses.replace(
            g.layers[-1], parameters=g.layers[-1].parameters - table, tied_parameters=table
        )
        graphs.append(dataclasses.replace(g, layers=(*g.layers[:-1], head)))
    return PlacementProblem(
        tuple(graphs), cluster, hbm_gb * 1e9, global_batch=batch, zero_stages=zero
    )


@settings(max_examples=20, deadline=None)
@given(
    devices=st.sampled_from([8, 16]),
    hbm_gb=st.sampled_from([0.5, 1.0, 2.0]),
    batch=st.sampled_from([8, 16]),
    zero=st.sampled_from([(0,), (1,), (0, 3)]),
)
def test_interleaved_layouts_price_the_copy_as_the_fixed_strategy(devices, hbm_gb, batch, zero):
    """The interleaved search's best first order prices the tied all-reduce: it finds the
    fastest fitting Megatron layout (even or uneven split) that every evaluation finds."""
    problem = _tied_gpt(devices, hbm_gb, batch, zero)
    best = math.inf
    for t, p, v in itertools.product((1, 2), (2, 4), (2, 3, 4, 5)):
        for split, d in itertools.product(interleaved_splits(8, p, v), (1, 2, 4, 8)):
            if t * p * d > devices or batch % d or (batch // d) % p:
                continue
            for z in zero:
                s = Layout(t=t, p=p, d=d, v=v, recompute="full", zero=z, split=split)
                try:
                    pl = evaluate_fixed(problem, s)
                except Infeasible:
                    continue
                assert pl.breakdown.embedding_comm_exposed_s > 0
                best = min(best, pl.breakdown.iteration_s)
    assume(best < math.inf)
    found = best_interleaved(problem, math.inf)
    assert found is not None and found.breakdown.iteration_s == pytest.approx(best, rel=1e-12)
