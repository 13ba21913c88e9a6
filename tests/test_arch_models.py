"""Area, yield, cost and carbon models: limits, monotonicity, overrides and their errors."""

import math
from dataclasses import replace

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from arch_space.accelerator import Accelerator
from arch_space.area import area_mm2, hbm_stacks, static_power_w
from arch_space.carbon import (
    CarbonParams,
    carbon_per_area_g_per_cm2,
    embodied_kgco2e,
    grid_intensity,
    grid_regions,
    operational_kgco2e,
)
from arch_space.cost import (
    CostParams,
    device_cost_usd,
    die_cost_usd,
    die_yield,
    dies_per_wafer,
)
from arch_space.power import tdp_w
from arch_space.presets import preset
from arch_space.tech import known_nodes, tech_node, tech_overrides_from_toml
from phaze_common.errors import ConfigError, Infeasible

REF = preset("ref-max")


def test_tech_nodes_and_overrides():
    assert known_nodes() == (28, 16, 12, 7, 5, 3)
    for node in known_nodes():
        t = tech_node(node)
        assert t.node_nm == node and t.mac_area_um2 > 0 and t.leakage_w_per_mm2 > 0
    # denser nodes: smaller MACs, no larger SRAM (12 nm keeps the 16 nm bitcell), cheaper MACs
    # and cheaper energy beside the arithmetic
    nodes = [tech_node(n) for n in known_nodes()]
    for big, small in zip(nodes, nodes[1:], strict=False):
        assert small.mac_area_um2 < big.mac_area_um2
        assert small.sram_area_mm2_per_mib <= big.sram_area_mm2_per_mib
        assert small.mac_energy_pj < big.mac_energy_pj
        assert small.control_pj_per_mac < big.control_pj_per_mac
        assert small.operand_pj_per_byte < big.operand_pj_per_byte
    assert tech_node(7, {"mac_energy_pj": 0.25}).mac_energy_pj == 0.25


def test_tech_errors_name_the_problem():
    with pytest.raises(
        ConfigError, match=r"unknown process node 6 nm \(known: 28, 16, 12, 7, 5, 3\)"
    ):
        tech_node(6)
    with pytest.raises(ConfigError, match="unknown key 'mac_energy'; did you mean 'mac_energy_pj'"):
        tech_node(7, {"mac_energy": 1.0})
    with pytest.raises(ConfigError, match="mac_area_um2 = -1 must be > 0"):
        tech_node(7, {"mac_area_um2": -1})


def test_accelerator_validation_reports_every_problem():
    with pytest.raises(ConfigError) as e:
        Accelerator(0, 2.5, 16, 1, 8, 2**20, 2**30, -1.0, 1e9, node_nm=9, name="x")
    msg = str(e.value)
    assert "accelerator x: num_tc = 0 must be a positive integer" in msg
    assert "tc_rows = 2.5 must be a positive integer" in msg
    assert "hbm_bandwidth_bytes_per_s = -1.0 must be a positive number" in msg
    assert "node_nm = 9 is not a known process node (known: 28, 16, 12, 7, 5, 3)" in msg


def test_static_power_is_leakage_times_area():
    assert static_power_w(REF) == pytest.approx(area_mm2(REF) * tech_node(7).leakage_w_per_mm2)
    assert tdp_w(REF) > static_power_w(REF)


@given(st.floats(0.0, 1e-6))
def test_yield_tends_to_one_as_area_vanishes(a):
    assert die_yield(a, 0.1, 3.0) == pytest.approx(1.0, abs=1e-8)


def test_yield_limits():
    assert die_yield(0.0, 0.09, 3.0) == 1.0
    # alpha -> infinity gives Poisson exp(-A D0); 100 mm2 = 1 cm2
    assert die_yield(100.0, 0.1, 1e9) == pytest.approx(math.exp(-0.1), rel=1e-6)
    assert die_yield(100.0, 0.1, 3.0) == pytest.approx((1 + 0.1 / 3) ** -3)


@given(st.floats(1.0, 800.0), st.floats(1.0, 800.0))
@example(100.0, 101.0)
def test_larger_die_lower_yield_fewer_dies_higher_cost(a, b):
    small, big = min(a, b), max(a, b)
    assume(big - small >= 1e-6)
    assert die_yield(big, 0.09, 3.0) < die_yield(small, 0.09, 3.0)
    assert dies_per_wafer(big) <= dies_per_wafer(small)


@given(st.integers(1, 15), st.integers(1, 8), st.sampled_from([7, 5, 16]))
def test_more_area_costs_more_dollars_and_carbon(num_tc, extra_tc, node):
    a = replace(REF, num_tc=num_tc, node_nm=node)
    b = replace(a, num_tc=num_tc + extra_tc)
    assert area_mm2(b) > area_mm2(a)
    assert die_cost_usd(b) > die_cost_usd(a)
    assert device_cost_usd(b) > device_cost_usd(a)
    assert embodied_kgco2e(b) > embodied_kgco2e(a)


def test_dies_per_wafer_against_hand_computation():
    # 100 mm2 die, 0.1 mm scribe -> 10.1 mm side; usable 294 mm diameter
    a = 10.1**2
    expected = math.floor(math.pi * 147**2 / a - math.pi * 294 / math.sqrt(2 * a))
    assert dies_per_wafer(100.0) == expected


def test_die_cost_is_wafer_price_over_good_dies():
    p = CostParams.default()
    area = area_mm2(REF)
    wafer, d0 = p.node(7)
    assert die_cost_usd(REF) == pytest.approx(
        wafer / (dies_per_wafer(area) * die_yield(area, d0, 3.0))
    )


def test_huge_die_is_infeasible():
    with pytest.raises(Infeasible, match="does not fit on a 300 mm wafer"):
        die_cost_usd(replace(REF, num_tc=4096, tc_rows=256, tc_cols=256))


def test_cost_params_override_from_toml(tmp_path):
    f = tmp_path / "cost.toml"
    f.write_text("[memory]\nhbm_usd_per_gb = 20.0\n[node.7]\nwafer_usd = 10000\n")
    p = CostParams.from_toml(f)
    assert p.hbm_usd_per_gb == 20.0 and p.wafer_usd[7] == 10000 and p.wafer_usd[5] == 16988.0
    assert device_cost_usd(REF, p) > device_cost_usd(REF)


def test_cost_params_errors(tmp_path):
    f = tmp_path / "cost.toml"
    f.write_text("[memory]\nhbm_usd_per_gbyte = 20.0\n[wafers]\nx = 1\n[node.7]\nwafer_usd = -3\n")
    with pytest.raises(ConfigError) as e:
        CostParams.from_toml(f)
    msg = str(e.value)
    assert "unknown key 'hbm_usd_per_gbyte'; did you mean 'hbm_usd_per_gb'?" in msg
    assert "unknown key 'wafers'; did you mean 'wafer'?" in msg
    assert "[node.7]: wafer_usd = -3 must be > 0" in msg
    with pytest.raises(ConfigError, match="no wafer price / defect density for node 9 nm"):
        CostParams.default().node(9)


def test_embodied_carbon_follows_act():
    c = CarbonParams.default()
    cpa = carbon_per_area_g_per_cm2(7, c)
    assert cpa == pytest.approx(583 * 2.15 + 275 + 500)
    area = area_mm2(REF)
    y = die_yield(area, 0.09, 3.0)
    # HBM per GB (HGX H100 footprint), 150 g per stack (ACT's IC package); the rest of the
    # board: heat sinks per watt of its 400 W budget (7 nm) and a fixed board
    hbm_g = 32 * 2**30 / 1e9 * c.hbm_g_per_gb + hbm_stacks(REF) * 150.0
    board_g = c.thermal_g_per_w * 400.0 + c.board_g
    expected_kg = (area / 100 * cpa / y + hbm_g + 150 + board_g) / 1000
    assert embodied_kgco2e(REF) == pytest.approx(expected_kg)


def test_operational_carbon_and_grid_regions():
    assert {"world", "us", "eu", "taiwan", "france"} <= set(grid_regions())
    assert grid_intensity("france") < grid_intensity("eu") < grid_intensity("world")
    assert operational_kgco2e(3.6e9, 1.1, 400.0) == pytest.approx(1000 * 1.1 * 0.4)
    with pytest.raises(ConfigError, match="unknown grid region 'frnace'; did you mean france"):
        grid_intensity("frnace")


def test_carbon_params_user_region(tmp_path):
    f = tmp_path / "carbon.toml"
    f.write_text("[grid]\nmy_dc = 50.0\n[fab]\nci_g_per_kwh = 300\n")
    p = CarbonParams.from_toml(f)
    assert grid_intensity("my_dc", p) == 50.0 and grid_intensity("world", p) == 480.0
    assert embodied_kgco2e(REF, p) < embodied_kgco2e(REF)
    f.write_text("[grid]\nmy_dc = 'low'\n")
    with pytest.raises(ConfigError, match=r"\[grid\]: my_dc = 'low' must be a number"):
        CarbonParams.from_toml(f)


def test_tech_overrides_from_toml(tmp_path):
    f = tmp_path / "tech.toml"
    f.write_text(
        "[node.7]\nmac_area_um2 = 400\nleakage_w_per_mm2 = { value = 0.1, source = 'me' }\n"
    )
    over = tech_overrides_from_toml(f)
    assert over == {7: {"mac_area_um2": 400, "leakage_w_per_mm2": 0.1}}
    assert area_mm2(REF, tech_node(7, over[7])) > area_mm2(REF)
    f.write_text("[node.9]\nmac_area_um2 = 1\n[node.7]\nmac_area = 1\nmac_energy_pj = 0\n")
    with pytest.raises(ConfigError) as e:
        tech_overrides_from_toml(f)
    msg = str(e.value)
    assert "[node.9]: unknown process node '9'" in msg
    assert "unknown key 'mac_area'; did you mean 'mac_area_um2'?" in msg
    assert "mac_energy_pj = 0 must be > 0" in msg


def test_params_are_hashable_by_content():
    assert hash(CostParams.default()) == hash(CostParams.from_mapping({}))
    assert CostParams.default() == CostParams.from_mapping({})
    assert CarbonParams.from_mapping({"grid": {"x": 1.0}}) != CarbonParams.default()
    assert len({CarbonParams.default(), CarbonParams.from_mapping({})}) == 1
