"""Scoring formulas (docs/models.md) checked by hand-computed values and identities."""

import dataclasses
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from arch_space.system import host_w_per_node
from arch_space.tco import DeviceCapex
from phaze.model.scoring import (
    SECONDS_PER_YEAR,
    BatchEnergy,
    ScoringParams,
    job_carbon,
    job_cost,
    network_embodied_kgco2e_per_device,
    score_point,
)
from phaze_common.errors import ConfigError

# the accelerator alone: no host, network or building to pay for
CHIP_ONLY = DeviceCapex(
    accelerator_usd=10_000.0, host_usd=0.0, network_usd=0.0, datacenter_usd=0.0, provisioned_w=0.0
)


def _params(**kw) -> ScoringParams:
    """Scoring settings in a DGX A100 host (score_point needs its server chosen)."""
    return ScoringParams(host_profile="dgx-a100", **kw)


def _score(params=None, **over):
    kw = dict(
        iteration_s=10.0,
        global_batch=512,
        seq_len=2048,
        model_flops_per_batch=1e18,
        tokens_to_train=300e9,
        devices=1024,
        peak_flops_per_device=312e12,
        energy=BatchEnergy(compute_j=2e6, memory_j=1e6, static_j=5e5, network_j=5e5),
        capex=CHIP_ONLY,
        idle_w_per_device=50.0,
        embodied_kgco2e_per_device=100.0,
        params=params or _params(goodput=1.0),
    )
    kw.update(over)
    return score_point(**kw)


def test_hand_computed_values():
    s = _score()
    assert s.tokens_per_s == pytest.approx(512 * 2048 / 10)
    assert s.samples_per_s == pytest.approx(51.2)
    assert s.mfu == pytest.approx(1e18 / (10 * 1024 * 312e12))
    d = 300e9 / (512 * 2048 / 10)
    assert s.time_to_train_s == pytest.approx(d)
    batches = 300e9 / (512 * 2048)
    assert s.job_energy_j == pytest.approx(4e6 * batches)
    assert s.avg_power_w == pytest.approx(4e5)
    assert s.system_cost_usd == pytest.approx(1024 * 10_000)
    # the boards' 100 kg each, their DGX A100 hosts' 2,500 kg per 8 devices and a two-tier
    # tree of 64-port switches (3 per 64 devices) at 600 kg each
    emb = 1024 * (100 + 2500 / 8 + 3 / 64 * 600) * d / (5 * SECONDS_PER_YEAR)
    assert s.embodied_kgco2e == pytest.approx(emb)
    op = 4e6 * batches / 3.6e6 * 1.10 * ScoringParams().grid_gco2e_per_kwh / 1000
    assert s.operational_kgco2e == pytest.approx(op)
    assert s.total_kgco2e == pytest.approx(emb + op)
    assert s.tcdp == pytest.approx((emb + op) * d)
    assert s.tcdp_kgco2e_days == pytest.approx(s.tcdp / 86400)


def test_cost_to_train_is_device_hours_at_the_hourly_cost_plus_electricity():
    """Closed form with the capital recovery factor worked out here: $10,000 over 5 years at
    8 % is 10,000 x 0.08 x 1.08^5 / (1.08^5 - 1) a year; maintenance 5 % of 2,000 a year."""
    s = _score(_params(goodput=1.0, interest=0.08, usd_per_kwh=0.1))
    hours_held = 1024 * s.time_to_train_s / 3600
    crf = 0.08 * 1.08**5 / (1.08**5 - 1)
    per_year = 10_000 * crf + 0.05 * 10_000 / 5
    kwh = s.job_energy_j / 3.6e6
    expected = hours_held * per_year / (365.25 * 24) + kwh * 1.10 * 0.1
    assert s.tco_usd == pytest.approx(expected)
    assert s.usd_per_device_hour == pytest.approx(expected / hours_held)
    assert s.electricity_usd == pytest.approx(kwh * 1.10 * 0.1)


def test_goodput_stretches_the_time_held_and_adds_idle_energy_while_restarting():
    full, part = _score(), _score(_params(goodput=0.8))
    assert part.time_to_train_s == pytest.approx(full.time_to_train_s / 0.8)
    lost_s = part.time_to_train_s - full.time_to_train_s
    # devices at their 50 W idle power; the test energy has no hosts
    assert part.job_energy_j - full.job_energy_j == pytest.approx(lost_s * 1024 * 50.0)
    assert part.embodied_kgco2e == pytest.approx(full.embodied_kgco2e / 0.8)
    assert part.tco_usd > full.tco_usd and part.tokens_per_s == full.tokens_per_s


def test_whole_life_charges_the_whole_capex():
    p = _params(goodput=1.0, embodied_mode="whole-life", usd_per_kwh=0.0)
    cost = job_cost(time_to_train_s=3600.0, job_energy_j=0.0, devices=8, capex=CHIP_ONLY, params=p)
    maintenance = 0.05 * 10_000 / 5 / (365.25 * 24) * 8
    assert cost.tco_usd == pytest.approx(8 * 10_000 + maintenance)
    assert sum(cost.breakdown_usd().values()) == pytest.approx(cost.tco_usd)


def test_whole_life_embodied_is_independent_of_time():
    p = ScoringParams(embodied_mode="whole-life", host_embodied_kgco2e_per_device=0.0, goodput=1)
    system = 1024 * (100 + network_embodied_kgco2e_per_device(1024))
    assert _score(p).embodied_kgco2e == pytest.approx(system)
    assert _score(p, iteration_s=20.0).embodied_kgco2e == pytest.approx(system)


@given(
    iteration_s=st.floats(0.01, 100),
    devices=st.integers(1, 4096),
    energy_j=st.tuples(*[st.floats(0, 1e7)] * 4),
    embodied_per_device=st.floats(0, 1e3),
    host_per_device=st.floats(0, 1e3),
    pue=st.floats(1.0, 2.0),
    grid=st.floats(0, 1000),
    lifetime_years=st.floats(0.5, 10),
    utilisation=st.floats(0.05, 1),
    mode=st.sampled_from(["amortised", "whole-life"]),
)
def test_tcdp_equals_a_hand_computation(
    iteration_s,
    devices,
    energy_j,
    embodied_per_device,
    host_per_device,
    pue,
    grid,
    lifetime_years,
    utilisation,
    mode,
):
    """tCDP = (embodied + operational carbon) x time to train, worked out here step by step
    in people's units (hours, kWh, grams) rather than with the scoring's own functions."""
    params = ScoringParams(
        pue=pue,
        grid_gco2e_per_kwh=grid,
        lifetime_s=lifetime_years * SECONDS_PER_YEAR,
        utilisation=utilisation,
        embodied_mode=mode,
        host_embodied_kgco2e_per_device=host_per_device,
        goodput=1.0,
    )
    s = _score(
        params,
        iteration_s=iteration_s,
        devices=devices,
        energy=BatchEnergy(*energy_j),
        embodied_kgco2e_per_device=embodied_per_device,
    )
    iterations = 300e9 / (512 * 2048)
    hours = iterations * iteration_s / 3600
    kwh = sum(energy_j) * iterations / 3.6e6
    operational_kg = kwh * pue * grid / 1000
    life_hours = lifetime_years * 365.25 * 24 * utilisation
    share = hours / life_hours if mode == "amortised" else 1.0
    network_kg = network_embodied_kgco2e_per_device(devices)
    embodied_kg = devices * (embodied_per_device + host_per_device + network_kg) * share
    tcdp_kg_s = (embodied_kg + operational_kg) * hours * 3600
    assert s.tcdp == pytest.approx(tcdp_kg_s, rel=1e-9, abs=1e-12)
    assert s.tcdp_kgco2e_days == pytest.approx(tcdp_kg_s / 86400, rel=1e-9, abs=1e-12)
    assert s.embodied_kgco2e == pytest.approx(embodied_kg, rel=1e-9, abs=1e-12)
    assert s.operational_kgco2e == pytest.approx(operational_kg, rel=1e-9, abs=1e-12)


def test_faster_iteration_never_worse():
    slow, fast = _score(iteration_s=20.0), _score(iteration_s=10.0)
    assert fast.tokens_per_s > slow.tokens_per_s
    assert fast.embodied_kgco2e < slow.embodied_kgco2e
    assert fast.tcdp < slow.tcdp


@pytest.mark.parametrize(
    "kw, needle",
    [
        ({"pue": 0.9}, "pue = 0.9"),
        ({"utilisation": 1.5}, "utilisation = 1.5"),
        ({"lifetime_s": -1}, "lifetime_s = -1"),
        ({"embodied_mode": "forever"}, "embodied_mode = 'forever'"),
        ({"grid_gco2e_per_kwh": -3}, "grid_gco2e_per_kwh = -3"),
        ({"pue": float("nan")}, "pue = nan must be a finite number in [1, 4]"),
        ({"usd_per_kwh": float("inf")}, "usd_per_kwh = inf must be a finite number in [0, 10]"),
        ({"lifetime_s": float("nan")}, "lifetime_s = nan must be a finite number"),
        ({"goodput": 0.0}, "goodput = 0.0 must be a finite number in (0, 1]"),
        ({"interest": 1.0}, "interest = 1.0 must be a finite number in [0, 1)"),
        ({"cost_view": "rent"}, "cost_view = 'rent' must be one of build, buy"),
    ],
)
def test_bad_params_name_field_and_value(kw, needle):
    with pytest.raises(ConfigError, match=re.escape(needle)):
        ScoringParams(**kw)


@given(
    rows=st.lists(st.tuples(st.floats(1, 1e9), st.floats(0, 1e15), st.floats(0, 1e4)), min_size=1),
    mode=st.sampled_from(["amortised", "whole-life"]),
)
def test_job_carbon_of_arrays_equals_job_carbon_of_each_float(rows, mode):
    """The sweep's bounds call job_carbon on arrays of many designs at once: each entry is
    exactly the float result (the same operations in the same order)."""
    params = _params(embodied_mode=mode, grid_gco2e_per_kwh=430.0, goodput=0.9)
    times, energies, embodied = (np.array(c) for c in zip(*rows, strict=True))
    many = job_carbon(
        time_to_train_s=times,
        job_energy_j=energies,
        devices=64,
        embodied_kgco2e_per_device=embodied,
        params=params,
    )
    for k, (t, e, emb) in enumerate(rows):
        one = job_carbon(
            time_to_train_s=t,
            job_energy_j=e,
            devices=64,
            embodied_kgco2e_per_device=emb,
            params=params,
        )
        for f in dataclasses.fields(one):
            assert getattr(many, f.name)[k] == getattr(one, f.name)


def test_the_host_server_is_the_accelerator_s_own_unless_one_is_given():
    """One rule picks the host: each accelerator's own server unless the settings name one;
    the server's power and embodied carbon follow it, and given figures stay."""
    auto = ScoringParams()
    assert auto.host_profile is None and auto.host_w_per_node is None
    h100, mine = auto.for_accelerator("h100"), auto.for_accelerator("")
    assert (h100.host_profile, mine.host_profile) == ("dgx-h100", "dgx-a100")
    assert h100.host_w_per_node == pytest.approx(host_w_per_node("dgx-h100"))
    told = ScoringParams(host_profile="dgx-b200")
    assert told.for_accelerator("h100") is told
    given = ScoringParams(host_w_per_node=0.0).for_accelerator("h100")
    assert given.host_w_per_node == 0.0 and given.host_profile == "dgx-h100"
    with pytest.raises(ValueError, match="host server is not chosen"):
        _score(ScoringParams(goodput=1.0))
