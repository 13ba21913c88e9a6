"""The serving layout: its strategy string reads back to itself, composes the training
Layout of each pool, and refuses bad input with one error naming the key and what is
allowed."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phaze_common.errors import ConfigError
from placement import Layout, ServingLayout, parse_serving
from placement.serving_layout import ENGINE_FIELDS, POOL_FIELDS, pool_layout

_COUNT = st.integers(1, 64)


@st.composite
def _pools(draw) -> Layout:
    ep = draw(st.integers(1, 8))
    lay = pool_layout(draw(_COUNT), draw(_COUNT), ep * draw(st.integers(1, 8)), ep)
    opened = draw(st.sets(st.sampled_from(POOL_FIELDS)))
    return dataclasses.replace(lay, open=frozenset(opened))


@st.composite
def _layouts(draw) -> ServingLayout:
    batching = draw(st.sampled_from(["continuous", "static"]))
    split = batching == "continuous" and draw(st.booleans())
    chunk = None if batching == "static" else draw(st.one_of(st.none(), st.integers(1, 1 << 16)))
    opened = draw(st.sets(st.sampled_from(ENGINE_FIELDS)))
    return ServingLayout(
        decode=draw(_pools()),
        prefill=draw(_pools()) if split else None,
        batch=draw(st.integers(1, 4096)),
        chunk=chunk,
        batching=batching,
        open=frozenset(opened),
        weights=draw(st.sampled_from([None, "bf16", "fp8"])),
    )


@given(_layouts())
def test_a_serving_strategy_string_reads_back_to_its_layout(lay):
    assert parse_serving(str(lay)) == lay


def test_each_pool_is_a_training_layout_with_its_degrees():
    lay = parse_serving("prefill:t=4,p=1,d=1,ep=1;decode:tp=2,pp=2,dp=2,ep=2,batch=64,chunk=off")
    assert lay.prefill == Layout(t=4, p=1, d=1, ep=1)
    assert lay.decode == Layout(t=2, p=2, d=2, ep=2)
    assert (lay.devices, lay.replica_devices, lay.batch, lay.chunk) == (12, 4, 64, None)
    assert lay.disaggregated and lay.given("chunk") and not lay.given("batching")
    assert str(lay) == "prefill:t=4,p=1,d=1,ep=1;decode:t=2,p=2,d=2,ep=2,batch=64,chunk=off"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("t=2,batch=0", "batch = 0 must be an integer in [1,"),
        ("t=2,chunk=-5", "chunk = -5 must be off or an integer"),
        ("t=2,batching=dynamic", "batching = 'dynamic' must be one of continuous, static"),
        ("t=2,mbs=2", "unknown serving key 'mbs'"),
        ("t=2,batch=4,batch=8", "batch is given twice"),
        ("t=two", "t = two must be an integer"),
        ("t=2;decode:t=2", "must start with prefill: or decode:"),
        ("prefill:t=2", "a prefill section needs a decode section"),
        ("prefill:t=2,batch=8;decode:t=2", "batch belongs to the decode section"),
        ("t=2,d=3,ep=2", "ep = 2 must divide d = 3"),
        ("t=2,batching=static,chunk=512", "static batching prefills whole prompts"),
        ("prefill:t=2;decode:t=2,batching=static", "static batching runs one pool"),
        ("t=2,weights=fp4", "weights = 'fp4' must be one of bf16, fp16, fp8"),
        ("prefill:t=2,weights=fp8;decode:t=2", "weights belongs to the decode section"),
    ],
)
def test_bad_serving_strategies_are_one_error_naming_the_key(text, says):
    with pytest.raises(ConfigError, match=None) as info:
        parse_serving(text)
    assert says in str(info.value)


def test_training_keys_of_a_pool_are_refused():
    with pytest.raises(ConfigError, match="serving does not use"):
        ServingLayout(decode=Layout(t=2, mbs=4))
