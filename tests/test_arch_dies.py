"""Multi-die packages: die area, yield, cost and carbon per die, times the dies."""

from __future__ import annotations

import dataclasses
import tomllib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arch_space import preset
from arch_space.accelerator import Accelerator
from arch_space.area import area_mm2, die_area_mm2
from arch_space.carbon import embodied_breakdown_kgco2e
from arch_space.config import accelerator_from_mapping, accelerator_to_toml
from arch_space.cost import (
    CostParams,
    cost_breakdown_usd,
    die_cost_usd,
    die_yield,
    dies_per_wafer,
    made_die,
)
from arch_space.presets import preset_names
from arch_space.space import design_id
from phaze_common.errors import ConfigError


def _one_die(acc: Accelerator) -> Accelerator:
    """The single die of a ``dies``-die package: its share of every count and size."""
    k = acc.dies
    return dataclasses.replace(
        acc,
        name="",
        num_tc=acc.num_tc // k,
        num_vc=acc.num_vc // k,
        glb_bytes=acc.glb_bytes // k,
        hbm_stacks=acc.hbm_stacks // k,
        dies=1,
    )


@given(
    dies=st.sampled_from([1, 2, 4]),
    per_die_tc=st.integers(1, 64),
    per_die_vc=st.integers(1, 16),
    glb_mib=st.sampled_from([8, 32, 64]),
    stacks=st.integers(1, 2),
    node=st.sampled_from([7, 5, 3]),
)
def test_a_package_costs_its_dies_times_one_die(
    dies, per_die_tc, per_die_vc, glb_mib, stacks, node
):
    acc = Accelerator(
        num_tc=per_die_tc * dies,
        tc_rows=32,
        tc_cols=32,
        num_vc=per_die_vc * dies,
        vc_lanes=64,
        glb_bytes=glb_mib * dies * 2**20,
        hbm_bytes=16 * 2**30,
        hbm_bandwidth_bytes_per_s=1e12,
        clock_hz=1e9,
        node_nm=node,
        hbm_stacks=stacks * dies,
        dies=dies,
    )
    one = _one_die(acc)
    assert die_area_mm2(acc) == pytest.approx(area_mm2(one), rel=1e-12)
    assert made_die(acc) == pytest.approx(made_die(one), rel=1e-12)
    assert die_cost_usd(acc) == pytest.approx(dies * die_cost_usd(one), rel=1e-12)
    die_kg = embodied_breakdown_kgco2e(acc)["die"]
    assert die_kg == pytest.approx(dies * embodied_breakdown_kgco2e(one)["die"], rel=1e-12)


@pytest.mark.parametrize("name", [n for n in preset_names() if preset(n).dies == 1])
def test_single_die_presets_cost_their_whole_area_as_one_die(name):
    acc = preset(name)
    assert acc.dies == 1 and die_area_mm2(acc) == area_mm2(acc)
    if name not in ("a100", "h100", "h800", "h200", "v100"):  # harvested: they carry spare cores
        p = CostParams.default()
        wafer_usd, d0 = p.node(acc.node_nm)
        a = area_mm2(acc)
        closed = wafer_usd / (dies_per_wafer(a, p) * die_yield(a, d0, p.cluster_alpha))
        assert die_cost_usd(acc) == pytest.approx(closed, rel=1e-12)
    # single-die TOML files read as before the die count existed
    assert "dies" not in accelerator_to_toml(acc)


def test_the_die_count_is_part_of_a_multi_die_designs_id():
    b200 = preset("b200")
    assert design_id(b200) != design_id(dataclasses.replace(b200, dies=1))


def test_b200_two_dies_cheaper_than_one_die_of_their_area():
    b200 = preset("b200")
    whole = dataclasses.replace(b200, dies=1, name="")
    assert die_cost_usd(b200) < die_cost_usd(whole)  # two small dies yield better
    assert made_die(b200)[1] > made_die(whole)[1]
    # the interposer spans both dies and the eight stacks: Silicon Analysts put the B200's
    # CoWoS-L package at ~$1,100
    assert cost_breakdown_usd(b200)["package"] == pytest.approx(1100.0, rel=0.15)


@pytest.mark.parametrize(
    ("dies", "message"),
    [
        (0, "dies = 0 must be a positive integer"),
        (True, "dies = True must be a positive integer"),
        (3, "dies = 3 must divide num_tc = 592 and num_vc = 148"),
    ],
)
def test_bad_die_count_names_the_key(dies, message):
    text = accelerator_to_toml(preset("b200")).replace("dies = 2", f"dies = {str(dies).lower()}")
    with pytest.raises(ConfigError, match=message):
        accelerator_from_mapping(tomllib.loads(text))


def test_die_count_round_trips_through_toml():
    text = accelerator_to_toml(preset("b200"))
    assert "dies = 2" in text
    assert accelerator_from_mapping(tomllib.loads(text)) == preset("b200")
