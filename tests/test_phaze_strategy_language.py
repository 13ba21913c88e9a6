"""One strategy language: fixed parts kept, open parts searched, defaults reported, bad
input one Error line each."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from splits import interleaved_splits

from phaze.cli import cli
from placement import parse_strategy
from placement.layout import format_split

_BASE = ["evaluate", "--workload", "gpt3-125m", "--arch", "a100", "--devices", "8"]
_BASE += ["--global-batch", "16", "--seq-len", "256"]


def _run(strategy: str, *extra: str):
    return CliRunner().invoke(cli, [*_BASE, "--strategy", strategy, *extra])


def _json(strategy: str) -> dict:
    r = _run(strategy, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _layout(doc: dict):
    """The layout a document's placement names (its strategy string, read back)."""
    return parse_strategy(doc["placement"]["strategy"])


def test_open_fields_take_the_search_defaults_and_are_reported():
    doc = _json("t=2,p=2,d=2")
    pl = _layout(doc)
    assert (pl.t, pl.p, pl.d) == (2, 2, 2)
    sp = "on" if pl.sp else "off"  # searched: the faster of on and off
    assert f"sp={sp}" in doc["strategy_defaults"] and "zero=" in doc["strategy_defaults"]
    assert f"v={pl.v}" in doc["strategy_defaults"]
    human = _run("t=2,p=2,d=2")
    assert "strategy defaults used (not given):" in human.output
    # the search's sp, ZeRO stage, v and split: the fastest of them for this layout (mbs = 2:
    # each pipeline runs 4 micro-batches, a multiple of p, as Megatron's interleaving needs)
    fixed = "t=2,p=2,d=2,mbs=2,recompute=none"
    splits = [("", 1)] + [
        ("" if split is None else f",split={format_split(split)}", v)
        for v in range(2, 8)
        for split in interleaved_splits(12, 2, v)  # even, or uneven over the 12 blocks
    ]
    times = [
        _json(f"{fixed},sp={s},zero={z},v={v}{split}")["iteration_s"]
        for s in ("on", "off")
        for z in range(4)
        for split, v in splits
    ]
    assert _json(fixed)["iteration_s"] == min(times)
    assert (
        _json("t=2,p=2,d=2,sp=on,zero=0,mbs=1,v=1,recompute=none,ep=1,cp=1")["strategy_defaults"]
        == ""
    )


def test_a_partial_strategy_searches_the_rest():
    doc = _json("t=2")
    pl = _layout(doc)
    assert pl.t == 2 and pl.t * pl.p * pl.d <= 8
    assert 16 % pl.d == 0  # d * mbs divides the global batch
    for p, d in ((1, 1), (1, 2), (2, 2), (4, 1), (1, 4)):
        fixed = _json(f"t=2,p={p},d={d}")
        assert doc["iteration_s"] <= fixed["iteration_s"]


def test_a_fixed_degree_limits_the_stages_searched():
    pl = _layout(_json("t=2,d=2"))
    assert (pl.t, pl.d) == (2, 2) and pl.p <= 2


@pytest.mark.parametrize(
    ("strategy", "message"),
    [
        ("t=4,p=4", "t*p = 16 devices, the cluster has 8"),
        ("t=1,p=1,d=1,zero=4", "zero = 4 must be 0, 1, 2 or 3"),
        ("t=1,p=1,d=3", "d * mbs = 3 * 1 must divide"),
        ("t=2,p=2,d=2,v=2,mbs=8", "1 micro-batch must be a multiple of p = 2"),
    ],
)
def test_bad_strategies_are_one_error_line(strategy, message):
    r = _run(strategy)
    assert r.exit_code != 0
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error:") and message in lines[0], r.output


def test_an_interleaved_layout_with_the_micro_batch_open_picks_one_it_can_run():
    # global batch 16 at d = 2: mbs 8 leaves one micro-batch per pipeline, not a group of p
    doc = _json("t=2,p=2,d=2,v=2")
    assert _layout(doc).v == 2
    assert (16 // (_layout(doc).mbs * 2)) % 2 == 0


@pytest.mark.parametrize(
    ("framework", "rules"),
    [
        ("fsdp2-2024", {"pipeline", "zero"}),
        ("deepspeed-2022", {"interleaving"}),
        ("megatron-core-2024", {"interleaving", "zero"}),
    ],
)
def test_a_search_names_the_rules_that_skipped_layouts(framework, rules):
    r = _run("search", "--framework", framework, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    found = {x["rule"]: x["reason"] for x in doc["search_exclusions"]}
    assert set(found) == rules
    assert all(framework in reason or "divisible" in reason for reason in found.values())
    layout = _layout(doc)
    if "pipeline" in rules:
        assert layout.p == 1
    if framework == "deepspeed-2022":
        assert layout.v == 1
    text = _run("search", "--framework", framework).output
    assert f"layouts the search skipped, by {framework}'s rules: " in text
    # a strategy given whole searched nothing and skipped nothing
    given = _json("t=1,p=1,d=8,v=1,mbs=2,recompute=none,sp=off,zero=0,ep=1,cp=1")
    assert given["search_exclusions"] == []


def test_fsdp2_prefetch_shows_in_the_dp_figures():
    args = ["evaluate", "--workload", "llama2-70b", "--arch", "h100", "--devices", "64"]
    args += ["--global-batch", "128", "--framework", "fsdp2-2024", "--json"]
    args += ["--strategy", "t=1,p=1,d=64,mbs=2,zero=3,recompute=full"]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    dp = doc["dp_comm"]
    assert dp["exposed_s"] == doc["breakdown"]["dp_comm_exposed_s"]
    # 80 blocks gathered twice and reduce-scattered once each: all but one block's hidden
    assert dp["overlapped_s"] > 0.95 * dp["unoverlapped_s"]
    assert dp["exposed_s"] < 0.2 * dp["unoverlapped_s"]
