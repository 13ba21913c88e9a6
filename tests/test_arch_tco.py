"""The system's cost per device-hour (arch_space.tco) term by term against closed forms, the
two cost views, the board's embodied carbon, and the hygiene of the shipped cost data."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arch_space import CostParams, embodied_kgco2e, grid_intensity, preset
from arch_space._data import shipped_toml
from arch_space.carbon import CarbonParams, embodied_breakdown_kgco2e
from arch_space.cost import device_cost_usd
from arch_space.system import host_max_w_per_device, host_usd_per_device
from arch_space.tco import (
    TcoConstants,
    accelerator_usd,
    build_cost_usd,
    buy_price_usd,
    capital_recovery_factor,
    device_capex,
    device_hour_cost,
    fat_tree,
    nre_usd,
    provisioned_w,
)
from phaze_common.errors import ConfigError

_HOURS_PER_YEAR = 365.25 * 24
_YEAR_S = _HOURS_PER_YEAR * 3600


@given(endpoints=st.integers(1, 10**6), half=st.integers(2, 40))
def test_fat_tree_is_the_smallest_that_fits(endpoints, half):
    """Brute force: t tiers of k-port switches reach 2 (k/2)^t endpoints; the tree picks the
    least t that fits, and its switch count is (2t - 1) (k/2)^(t-1) per 2 (k/2)^t ends."""
    k = 2 * half
    tree = fat_tree(endpoints, k)
    fits = [t for t in range(0, 25) if endpoints == 1 or 2 * half**t >= endpoints]
    assert tree.tiers == (0 if endpoints == 1 else min(t for t in fits if t > 0))
    if tree.tiers:
        t = tree.tiers
        full = 2 * half**t
        assert tree.switches_per_endpoint * full == pytest.approx((2 * t - 1) * half ** (t - 1))
        assert tree.links_per_endpoint == t


def test_fat_tree_of_a_thousand_gpus():
    # 1,024 NICs on 64-port switches: 32 leaves + 16 spines, 2,048 links
    t = fat_tree(1024, 64)
    assert (t.tiers, round(t.switches_per_endpoint * 1024), t.links_per_endpoint * 1024) == (
        2,
        48,
        2048,
    )
    assert fat_tree(2048, 64).tiers == 2 and fat_tree(2049, 64).tiers == 3


@given(rate=st.one_of(st.just(0.0), st.floats(1e-4, 0.5)), years=st.floats(0.5, 30))
def test_capital_recovery_repays_the_loan(rate, years):
    """The yearly payment CRF x P over n years at r has present value P (annuity)."""
    n = years
    pay = capital_recovery_factor(rate, n)
    if rate == 0:
        assert pay == pytest.approx(1 / n)
    else:
        present = pay * (1 - (1 + rate) ** -n) / rate
        assert present == pytest.approx(1.0, rel=1e-9)


def test_each_device_hour_term_is_its_closed_form():
    c = TcoConstants.default()
    capex = device_capex(preset("h100"), 1024, "dgx-h100")
    life_s = 5 * _YEAR_S
    rates = device_hour_cost(capex, lifetime_s=life_s, interest=0.08)
    it = 27_500 + capex.host_usd + capex.network_usd
    assert capex.host_usd == pytest.approx((288_142 - 8 * 27_500) / 8)
    assert capex.network_usd == pytest.approx(3 / 64 * 36_000 + 2 * 1_280)
    assert capex.provisioned_w == pytest.approx(700 + (10_200 - 8 * 700) / 8)
    assert capex.datacenter_usd == pytest.approx(capex.provisioned_w * 11.7)
    assert rates.accelerator == pytest.approx(27_500 / 5 / _HOURS_PER_YEAR)
    assert rates.host == pytest.approx(capex.host_usd / 5 / _HOURS_PER_YEAR)
    assert rates.network == pytest.approx(capex.network_usd / 5 / _HOURS_PER_YEAR)
    assert rates.datacenter == pytest.approx(capex.datacenter_usd / 12 / _HOURS_PER_YEAR)
    crf5, crf12 = (0.08 * 1.08**n / (1.08**n - 1) for n in (5, 12))
    interest = (crf5 - 1 / 5) * it + (crf12 - 1 / 12) * capex.datacenter_usd
    assert rates.interest == pytest.approx(interest / _HOURS_PER_YEAR)
    assert rates.maintenance == pytest.approx(0.05 * it / 5 / _HOURS_PER_YEAR)
    assert rates.datacenter_opex == pytest.approx(0.48 * capex.provisioned_w / _HOURS_PER_YEAR)
    assert rates.total == pytest.approx(sum(rates.terms().values()))
    assert c.interest == 0.08 and c.maintenance_share == 0.05


def test_half_the_utilisation_doubles_the_hourly_cost():
    capex = device_capex(preset("a100"), 64, "dgx-a100")
    full = device_hour_cost(capex, lifetime_s=4 * _YEAR_S, interest=0.05)
    half = device_hour_cost(capex, lifetime_s=4 * _YEAR_S, interest=0.05, utilisation=0.5)
    assert half.total == pytest.approx(2 * full.total)


def test_build_and_buy_views():
    p = CostParams.default()
    h100 = preset("h100")
    # a product: made for its chip and board, bought at its published price
    assert build_cost_usd(h100) == pytest.approx(device_cost_usd(h100) + p.board_usd)
    assert buy_price_usd(h100) == p.price["h100"] == 27_500
    # a new design (no published price) carries its node's design cost over the volume and
    # sells at its build cost over one minus the gross margin
    new = dataclasses.replace(h100, name="")
    build = device_cost_usd(new) + p.board_usd + nre_usd(5) / p.volume_units
    assert build_cost_usd(new) == pytest.approx(build)
    assert buy_price_usd(new) == pytest.approx(build / (1 - 0.75))
    assert build_cost_usd(new, volume_units=1) == pytest.approx(build + nre_usd(5) * (1 - 1e-6))
    assert accelerator_usd(new, "build") == build_cost_usd(new)
    with pytest.raises(ConfigError, match="cost view = 'rent'"):
        accelerator_usd(new, "rent")


def test_an_h100_like_design_is_priced_near_the_h100():
    """The buy view of a new design reproduces a product's price within 10 %: H100 cost
    model, IBS's 5 nm design cost over a year of production, NVIDIA's gross margin."""
    new = dataclasses.replace(preset("h100"), name="")
    assert buy_price_usd(new) == pytest.approx(27_500, rel=0.10)


def test_provisioned_power_is_the_board_limit_and_the_host_share():
    assert provisioned_w(preset("h100"), "dgx-h100") == pytest.approx(1275.0)
    assert host_max_w_per_device("dgx-a100") == pytest.approx((6500 - 8 * 400) / 8)
    assert host_usd_per_device("dgx-1-v100") == pytest.approx((149_000 - 8 * 11_458) / 8)


def test_board_embodied_carbon_by_part():
    acc = preset("h100")
    parts = embodied_breakdown_kgco2e(acc)
    c = CarbonParams.default()
    assert parts["thermal"] == pytest.approx(42.2 * 700 / 1000)
    assert parts["board"] == pytest.approx(24.6)
    gb = 80 * 2**30 / 1e9
    assert parts["hbm"] == pytest.approx((gb * c.hbm_g_per_gb + 5 * c.hbm_stack_g) / 1000)
    assert embodied_kgco2e(acc) == pytest.approx(sum(parts.values()))
    # within 10 % of NVIDIA's HGX H100 footprint per GPU (its component split sets the
    # memory, thermal and board factors; the dies are ACT's)
    assert embodied_kgco2e(acc) == pytest.approx(1312 / 8, rel=0.10)


def test_grid_names_ignore_letter_case():
    assert grid_intensity("FRANCE") == grid_intensity("France") == grid_intensity("france")
    with pytest.raises(ConfigError, match="did you mean france"):
        grid_intensity("FRANSE")


def _numbers(table: Mapping, where: str):
    for key, value in table.items():
        if isinstance(value, Mapping) and "value" in value:
            yield f"{where}.{key}", value["value"], value.get("source", "")
        elif isinstance(value, Mapping):
            yield from _numbers(value, f"{where}.{key}")
        elif isinstance(value, int | float) and not isinstance(value, bool):
            yield f"{where}.{key}", value, None


@pytest.mark.parametrize("name", ["cost.toml", "carbon.toml", "system.toml"])
def test_every_shipped_number_is_finite_and_sourced(name):
    for where, value, source in _numbers(shipped_toml(name), name):
        assert math.isfinite(value), where
        if source is not None:
            assert source.strip(), f"{where} has no source"


def test_every_published_cost_figure_is_finite_and_sourced():
    data = shipped_toml("cost_analyses.toml")
    for section in ("ownership", "teardown", "embodied", "cloud"):
        for name, row in data[section].items():
            numbers = [v for v in row.values() if isinstance(v, int | float)]
            assert numbers and all(math.isfinite(v) and v > 0 for v in numbers), name
            assert len(row["source"]) > 30, name


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"memory": {"hbm_usd_per_gb": math.nan}}, "hbm_usd_per_gb = nan must be a finite number"),
        ({"price": {"h100": math.inf}}, "h100 = inf must be a finite number"),
        ({"market": {"gross_margin": 1.0}}, "gross_margin = 1.0 must be in [0, 1)"),
        ({"node": {"5": {"nre_usd": -1.0}}}, "nre_usd = -1.0 must be > 0"),
    ],
)
def test_bad_cost_params_name_the_field_and_the_rule(data, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        CostParams.from_mapping(data, source="my.toml")
