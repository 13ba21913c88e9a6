"""The searches skip work only where a bound proves it changes nothing: the knob search's
pairs asked only to beat the best so far (:func:`phaze.model.pipeline.evaluate` with ``beat_s``),
and a serving layout's passes priced only once its memory fits."""

from __future__ import annotations

import dataclasses
import math
import pickle

import pytest

from arch_space import Cluster, preset
from ilp.problem import Problem
from phaze.model import pipeline, serving, serving_policies
from phaze.model.knob_search import evaluate_best_knobs, time_lower_bound_s
from phaze.model.pipeline import Context, evaluate
from phaze.model.serving import ServeContext
from phaze_common.errors import ConfigError, Infeasible
from placement import Layout, parse_serving
from workloads import get_model, resolve_model
from workloads.build import valid_tp_widths
from workloads.serving import RequestBatch, ServingPass
from workloads.serving_ops import check_serving

MOE = "mixtral-8x7b"
_CTX = Context(
    cluster=Cluster(devices=32, devices_per_node=8),
    seq_len=1024,
    global_batch=32,
    tokens_to_train=10**9,
)
_GRID = [
    Layout.searching(mbs=mb, recompute=rc, precision="fp8-blockwise")
    for mb in (1, 2)
    for rc in ("none", "full")
]


@pytest.fixture(scope="module")
def alone():
    """Each pair of the grid evaluated in full, with its bound."""
    model, acc = resolve_model(MOE), preset("h100")
    return [
        (time_lower_bound_s(model, acc, k, _CTX), i, evaluate(MOE, model, acc, k, _CTX))
        for i, k in enumerate(_GRID)
    ]


def _time(ev) -> float:
    return ev.placement.breakdown.iteration_s if ev.feasible else math.inf


def test_the_knob_search_finds_the_pair_brute_force_finds(alone):
    """The same Evaluation, bit for bit, as evaluating every pair in full and keeping the
    fastest (ties to the lower bound, then the pair listed first)."""
    model, acc = resolve_model(MOE), preset("h100")
    found = evaluate_best_knobs(
        MOE,
        model,
        acc,
        _CTX,
        micro_batches=(1, 2),
        recomputes=("none", "full"),
        strategy=Layout.searching(precision="fp8-blockwise"),
    )
    best = min((x for x in alone if x[2].feasible), key=lambda x: (_time(x[2]), x[0], x[1]))
    assert found == best[2]


@pytest.mark.parametrize("scale", [0.99, 1.0, 1.0 + 1e-12, 1.01])
def test_a_pair_asked_to_beat_a_time_is_the_full_evaluation_or_says_it_cannot(alone, scale):
    """Faster than ``beat_s``: the full evaluation itself; else an infeasible Evaluation."""
    model, acc = resolve_model(MOE), preset("h100")
    fastest = min(_time(ev) for _, _, ev in alone)
    beat_s = fastest * scale
    for _, i, full in alone:
        ev = evaluate(MOE, model, acc, _GRID[i], _CTX, beat_s)
        if _time(full) < beat_s:
            assert ev == full
        else:
            assert not ev.feasible and "faster than" in ev.reason


def test_a_pair_whose_bound_cannot_beat_schedules_no_width(monkeypatch):
    """Asked to beat half the pair's bound (below the floors of its interleaved layouts
    too), no layer is scheduled."""
    model, acc = resolve_model(MOE), preset("h100")
    bound = time_lower_bound_s(model, acc, _GRID[0], _CTX)

    def scheduled(*args):
        pytest.fail(f"scheduled {args[2]}")

    monkeypatch.setattr(pipeline, "width_variant", scheduled)
    ev = evaluate(MOE, model, acc, _GRID[0], _CTX, bound / 2)
    assert not ev.feasible and "faster than" in ev.reason


@pytest.mark.parametrize(
    ("layout", "reason"),
    [
        ("t=2,p=1,d=1,ep=1,batch=4096,chunk=off,batching=continuous", "KV cache"),
        ("t=2,p=1,d=1,ep=1,batch=4096,chunk=2048,batching=continuous", "chunk = 2048"),
        ("t=2,p=1,d=1,ep=1,batch=4096,chunk=off,batching=static", "KV cache"),
        (
            "prefill:t=1,p=1,d=1,ep=1;decode:t=1,p=1,d=1,ep=1,batch=4096,chunk=off,batching=continuous",
            "KV cache",
        ),
    ],
)
def test_a_serving_layout_that_does_not_fit_prices_no_pass(monkeypatch, layout, reason):
    """Its memory (and its chunk budget, checked first as the engine does) refuses it before
    any pass is scheduled, with the reason the engine or the memory gives."""
    ctx = ServeContext(Cluster(devices=2), RequestBatch.of(1000, 1000))

    def priced(*args):
        pytest.fail("a pass was priced")

    monkeypatch.setattr(serving_policies, "pass_cost", priced)
    with pytest.raises(Infeasible, match=reason):
        serving.evaluate_layout(
            "m", get_model("llama2-7b"), preset("h100"), parse_serving(layout), ctx
        )


def test_a_scheduling_problem_hashes_its_fields_once_and_not_across_processes():
    """The solvers' caches look a problem up many times: its hash is worked out once; a
    pickled copy (another process, other string hashes) works its own out again."""
    p = Problem(
        ("A",),
        (2,),
        1,
        True,
        (((1,), (1,)), ((2,), (2,))),
        (1.0, 2.0),
        (0.5, 1.0),
        (True,) * 2,
        ((0, 1),),
    )
    assert p._hash is None
    assert hash(p) == hash(dataclasses.replace(p)) and p._hash is not None
    copy = pickle.loads(pickle.dumps(p))
    assert copy == p and copy._hash is None and hash(copy) == hash(p)


@pytest.mark.parametrize("name", ["llama2-7b", "mixtral-8x7b", "gpt2-xl"])
def test_serving_refuses_exactly_the_widths_megatron_refuses(name):
    """check_serving asks only the width given (a search asks it of every layout), and
    accepts and refuses the same widths as the list of valid ones."""
    model = get_model(name)
    valid = set(valid_tp_widths(model))
    probe = ServingPass.prefill(1, 1)
    for tp in (*range(-1, model.heads + 3), 2.0, True, "2"):
        try:
            check_serving(model, probe, tp)
        except ConfigError as e:
            assert tp not in valid and f"tp = {tp!r} must be one of" in str(e)
        else:
            assert tp in valid
