"""The one layout value: its strategy string reads back to itself, and any layout a search
returns, printed and evaluated as a fixed strategy, gives the same iteration."""

from __future__ import annotations

import dataclasses
import math

import pytest
from budget import budget
from click.testing import CliRunner
from hypothesis import assume, given
from hypothesis import strategies as st

from arch_space import Cluster
from phaze.cli import cli
from phaze_common.errors import ConfigError, Infeasible
from placement import Layout, PlacementProblem, evaluate_fixed, parse_strategy, place
from placement.interleave import best_interleaved
from placement.layout import FIELDS, format_split, parse_split
from placement.partial import evaluate_partial
from placement.synthetic import GptShape, gpt_stage_graph

_COUNT = st.integers(1, 64)
_LAYOUTS = st.builds(
    Layout,
    t=_COUNT,
    p=_COUNT,
    d=_COUNT,
    v=st.integers(1, 4),
    mbs=_COUNT,
    recompute=st.sampled_from(["none", "selective", "full"]),
    sp=st.booleans(),
    zero=st.sampled_from([0, 1, 2, 3]),
    ep=_COUNT,
    cp=_COUNT,
    precision=st.sampled_from(["bf16", "fp8-te", "fp8-blockwise"]),
).map(lambda lay: dataclasses.replace(lay, sp=lay.sp and lay.t > 1))  # sp needs t > 1
_CHUNKS = st.lists(st.text("EtL", min_size=1, max_size=5), min_size=1, max_size=12)


@given(_LAYOUTS, _CHUNKS, st.sets(st.sampled_from(sorted(FIELDS - {"split"}))))
def test_a_strategy_string_reads_back_to_its_layout(lay, chunks, open_):
    with_split = dataclasses.replace(lay, p=len(chunks), v=1, split=tuple(chunks))
    for one in (lay, with_split, dataclasses.replace(lay, open=frozenset(open_))):
        assert parse_strategy(str(one)) == one


@given(_CHUNKS)
def test_megatron_layout_notation_reads_back(chunks):
    text = format_split(tuple(chunks))
    assert parse_split(text) == tuple(chunks)
    assert len(text) <= len("|".join(chunks))  # never longer than written out


def test_megatron_layout_notation_as_megatron_writes_it():
    # docs/user-guide/features/pipeline_parallel_layout.md (with t for its m: no MTP here)
    assert parse_split("Et*3|(tt|)*29,t|L") == ("Ettt", *["tt"] * 29, "t", "L")
    assert format_split(("E", *["t"] * 126, "L")) == "E|(t|)*126L"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("t=-2", "t = -2 must be an integer in [1, 1000000]"),
        ("t=2.5", "t = 2.5 must be an integer in [1, 1000000]"),
        ("t=2,t=4", "t is given twice (t=2, t=4)"),
        ("t=2,tp=4", "t is given twice (t=2, tp=4)"),
        ("mbs=0", "mbs = 0 must be an integer in [1, 1000000]"),
        ("sp=maybe", "sp = 'maybe' must be on or off"),
        ("p=2,v=1,split=E|t|tL", "split has 3 chunks, p * v = 2 * 1 = 2"),
        ("p=2,split=E|(t|)*999999999999L", "more than 10000000 layers"),
        ("p=2,split=E|tX", "unknown layer symbols ['X']"),
    ],
)
def test_bad_values_name_the_key_and_its_range(text, message):
    with pytest.raises(ConfigError, match="strategy: ") as e:
        parse_strategy(text)
    assert message in str(e.value)


def test_a_conflict_names_both_sources():
    with pytest.raises(ConfigError) as e:
        parse_strategy(
            "mbs=2,recompute=none,sp=off",
            {
                "mbs": ("--micro-batch", 1),
                "recompute": ("--recompute", "full"),
                "sp": ("--sp", True),
            },
        )
    assert str(e.value) == (
        "strategy mbs=2 conflicts with --micro-batch 1; strategy recompute=none conflicts "
        "with --recompute full; strategy sp=off conflicts with --sp"
    )
    # the same value twice is no conflict; an open field takes the option's value
    assert parse_strategy("mbs=2", {"mbs": ("--micro-batch", 2)}).mbs == 2
    assert parse_strategy("t=2", {"recompute": ("--recompute", "full")}).recompute == "full"


_BASE = ["evaluate", "--workload", "gpt3-125m", "--arch", "a100", "--devices", "8"]
_BASE += ["--global-batch", "16", "--seq-len", "256"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["t=1,p=1,d=1,mbs=2", "--micro-batch", "1"], "mbs=2 conflicts with --micro-batch 1"),
        (
            ["t=1,p=1,d=1,recompute=none", "--recompute", "full"],
            "recompute=none conflicts with --recompute full",
        ),
        (["t=1,p=1,d=1,sp=off", "--sp"], "sp=off conflicts with --sp"),
        (["t=2,t=4"], "t is given twice (t=2, t=4)"),
        (["t=-2"], "t = -2 must be an integer in [1, 1000000]"),
        (["t=2.5"], "t = 2.5 must be an integer in [1, 1000000]"),
        # 10 chunks of 12 blocks: Megatron's interleaved schedule needs an even split
        (["t=1,p=2,d=4,v=5"], "p * v = 2 * 5 = 10 interleaved chunks must divide the 12 blocks"),
    ],
)
def test_the_cli_refuses_conflicts_bad_values_and_uneven_interleaving(args, message):
    r = CliRunner().invoke(cli, [*_BASE, "--strategy", *args])
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert r.exit_code == 1 and len(lines) == 1 and lines[0].startswith("Error:"), r.output
    assert message in lines[0]


# --- the round trip ---------------------------------------------------------------------


def _problem(devices, hbm_gb, batch, layers, knobs, zero) -> PlacementProblem:
    cluster = Cluster(devices=devices, devices_per_node=4)
    shape = GptShape(layers=layers, hidden=256, heads=4, vocab=4000, seq_len=256)
    graphs = tuple(
        gpt_stage_graph(shape, t, cluster, micro_batch=mb, flops_per_s=1e13, recompute=rc)
        for t, mb, rc in knobs
    )
    return PlacementProblem(
        graphs, cluster, hbm_bytes=hbm_gb * 1e9, global_batch=batch, zero_stages=zero
    )


def _round_trip(problem: PlacementProblem, found) -> None:
    """``found``'s layout, printed and read back, priced as a fixed strategy."""
    text = str(found.layout)
    again = evaluate_fixed(problem, parse_strategy(text))
    assert again.layout == found.layout, text
    assert math.isclose(again.breakdown.iteration_s, found.breakdown.iteration_s, rel_tol=1e-12)
    assert math.isclose(
        again.memory_breakdown.total_bytes, found.memory_breakdown.total_bytes, rel_tol=1e-12
    )
    assert [s.layers for s in again.stages] == [s.layers for s in found.stages]


_KNOBS = st.lists(
    st.tuples(st.sampled_from([1, 2]), st.sampled_from([1, 2]), st.sampled_from(["none", "full"])),
    min_size=1,
    max_size=3,
    unique=True,
)


@budget(60, deadline=None)
@given(
    devices=st.sampled_from([1, 2, 4, 8, 16]),
    hbm_gb=st.sampled_from([0.05, 0.1, 0.3, 2.0]),
    batch=st.sampled_from([4, 8, 16]),
    layers=st.integers(2, 9),
    knobs=_KNOBS,
    zero=st.sampled_from([(0,), (1,), (0, 1, 2, 3)]),
    text=st.sampled_from(["t=1", "p=2", "d=2", "t=2,p=2", "p=2,d=1"]),
)
def test_every_layout_a_search_returns_prints_and_evaluates_the_same(
    devices, hbm_gb, batch, layers, knobs, zero, text
):
    """The DP's placement (any contiguous split: the embedding or the head on a stage of
    its own included), the fastest interleaved layout under it and a partial strategy's
    completion, each printed as a strategy string and evaluated as a fixed strategy, give
    the same iteration time, memory and stages."""
    problem = _problem(devices, hbm_gb, batch, layers, knobs, zero)
    try:
        best = place(problem)
    except Infeasible:
        assume(False)
    _round_trip(problem, best)
    woven = best_interleaved(problem, math.inf)
    if woven is not None:
        _round_trip(problem, woven)
    try:
        partial = evaluate_partial(problem, parse_strategy(text))
    except (Infeasible, ConfigError):
        return
    _round_trip(problem, partial)


def test_a_split_megatrons_default_cannot_name_round_trips():
    """Three stages on four blocks: the DP balances them as Et|tt|tL, where Megatron's
    default split is Ett|t|tL; the split names it."""
    problem = dataclasses.replace(
        _problem(4, 0.05, 12, 4, ((1, 1, "none"),), (0,)), cluster=Cluster(devices=6)
    )
    best = place(problem)
    assert (best.layout.p, best.layout.split) == (3, ("Et", "tt", "tL"))
    assert str(best.layout).endswith("split=Et|tt|tL")
    _round_trip(problem, best)
    default = evaluate_fixed(
        problem, dataclasses.replace(best.layout, split=None), check_memory=False
    )
    assert [s.layers for s in default.stages] == [(0, 1, 2), (3,), (4, 5)]
    with pytest.raises(ConfigError, match="p \\* v = 6 model chunks but the model has 4 blocks"):
        evaluate_fixed(problem, Layout(p=6))
    with pytest.raises(ConfigError, match="must list the model's layers in order: Et\\*4L"):
        evaluate_fixed(problem, dataclasses.replace(best.layout, split=("Et", "t", "tL")))


def _evaluate_json(*args: str) -> dict:
    import json

    r = CliRunner().invoke(cli, ["evaluate", *args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.mark.parametrize(
    "args",
    [
        ["--workload", "gpt3-125m", "--arch", "a100", "--devices", "8", "--global-batch", "16"],
        ["--workload", "llama2-7b", "--arch", "h100", "--devices", "16", "--global-batch", "32"],
    ],
)
def test_a_searched_catalog_layout_is_given_back_as_a_strategy(args):
    searched = _evaluate_json(*args, "--seq-len", "512")
    text = searched["placement"]["strategy"]
    fixed = _evaluate_json(*args, "--seq-len", "512", "--strategy", text)
    assert fixed["placement"]["strategy"] == text and fixed["strategy_defaults"] == ""
    assert fixed["iteration_s"] == pytest.approx(searched["iteration_s"], rel=1e-12)
    assert fixed["memory_per_device_bytes"] == pytest.approx(
        searched["memory_per_device_bytes"], rel=1e-12
    )


@pytest.mark.slow  # schedules Llama 3 405B's layers at four widths (~1 min)
def test_the_llama3_405b_layout_the_search_picks_is_accepted_back():
    args = ["--workload", "llama3-405b", "--arch", "h100", "--devices", "16384"]
    args += ["--global-batch", "2048", "--seq-len", "8192"]
    args += ["--intra-node-gbps", "450", "--inter-node-gbps", "50"]
    searched = _evaluate_json(*args)
    text = searched["placement"]["strategy"]
    assert "split=" in text  # the embedding and the head on stages of their own
    fixed = _evaluate_json(*args, "--strategy", text)
    assert fixed["iteration_s"] == pytest.approx(searched["iteration_s"], rel=1e-12)
    assert fixed["memory_per_device_bytes"] == pytest.approx(
        searched["memory_per_device_bytes"], rel=1e-12
    )
