"""Harvested die yield: a die sells when its uncore and at least the shipped cores work."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arch_space import preset
from arch_space.area import area_mm2
from arch_space.carbon import embodied_breakdown_kgco2e
from arch_space.cost import (
    CostParams,
    die_cost_usd,
    die_yield,
    dies_per_wafer,
    harvested_yield,
    made_die,
)
from phaze_common.errors import ConfigError

_AREA = st.floats(0.0, 400.0)
_D0 = st.floats(0.01, 0.5)
_ALPHA = st.floats(1.0, 8.0)


@settings(max_examples=25, deadline=None)
@given(uncore=_AREA, core=st.floats(0.1, 20.0), cores=st.integers(1, 40), d0=_D0, alpha=_ALPHA)
def test_shipping_every_core_is_the_negative_binomial_yield_of_the_whole_die(
    uncore, core, cores, d0, alpha
):
    whole = die_yield(uncore + cores * core, d0, alpha)
    assert harvested_yield(uncore, core, cores, cores, d0, alpha) == pytest.approx(whole, rel=1e-6)


@settings(max_examples=25, deadline=None)
@given(uncore=_AREA, core=st.floats(0.1, 10.0), cores=st.integers(2, 30), d0=_D0)
def test_without_clustering_it_is_the_poisson_binomial_tail(uncore, core, cores, d0):
    # alpha -> infinity: one defect density for every die, Poisson defects
    shipped = cores - cores // 4
    q = math.exp(-d0 * core / 100)
    tail = sum(
        math.comb(cores, k) * (1 - q) ** k * q ** (cores - k) for k in range(cores - shipped + 1)
    )
    exact = math.exp(-d0 * uncore / 100) * tail
    got = harvested_yield(uncore, core, cores, shipped, d0, 1e4)
    assert got == pytest.approx(exact, rel=2e-3, abs=1e-9)


@settings(max_examples=25, deadline=None)
@given(uncore=_AREA, core=st.floats(0.1, 10.0), cores=st.integers(2, 30), d0=_D0, alpha=_ALPHA)
def test_each_spare_core_raises_the_yield(uncore, core, cores, d0, alpha):
    ys = [harvested_yield(uncore, core, cores, m, d0, alpha) for m in range(cores, 0, -1)]
    assert all(a <= b * (1 + 1e-9) for a, b in zip(ys, ys[1:], strict=False))
    assert 0.0 <= ys[0] and ys[-1] <= 1.0 + 1e-9


def test_a100_harvests_108_of_128_sms():
    a100 = preset("a100")
    made, y = made_die(a100)
    # the made die carries 20 spare SMs beyond the modelled (shipped) 108
    assert area_mm2(a100) < made < 1.15 * area_mm2(a100)
    plain = die_yield(made, CostParams.default().node(7)[1], CostParams.default().cluster_alpha)
    # harvesting lifts the yield of an ~880 mm2 N7 die from about a half to about ACT's
    # fixed 0.875 less the uncore's losses
    assert plain < 0.55 < 0.65 < y < 0.875
    # cost and carbon use the harvested die
    cost = CostParams.default()
    wafer_usd = cost.node(7)[0]

    assert die_cost_usd(a100) == pytest.approx(wafer_usd / (dies_per_wafer(made) * y))
    assert embodied_breakdown_kgco2e(a100)["die"] > 0


def test_designs_not_listed_are_made_as_modelled():
    tpu = preset("tpuv4")
    made, y = made_die(tpu)
    assert made == area_mm2(tpu)
    c = CostParams.default()
    assert y == die_yield(made, c.node(7)[1], c.cluster_alpha)


def test_bad_harvest_input_names_the_field():
    with pytest.raises(ConfigError, match="shipped_cores = 9 must be between 1 and cores = 8"):
        harvested_yield(10.0, 1.0, 8, 9, 0.1, 3.0)
    with pytest.raises(ConfigError, match="cluster_alpha = 0.5 must be >= 1"):
        harvested_yield(10.0, 1.0, 8, 7, 0.1, 0.5)
