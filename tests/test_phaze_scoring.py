"""Scoring formulas (docs/models.md) checked by hand-computed values and identities."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from phaze.scoring import SECONDS_PER_YEAR, BatchEnergy, ScoringParams, job_carbon, score_point
from phaze_common.errors import ConfigError


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
        device_cost_usd=10_000.0,
        embodied_kgco2e_per_device=100.0,
        params=params or ScoringParams(),
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
    # the devices' 100 kg each and their DGX A100 hosts' 2,500 kg per 8 devices
    emb = 1024 * (100 + 2500 / 8) * d / (5 * SECONDS_PER_YEAR)
    assert s.embodied_kgco2e == pytest.approx(emb)
    op = 4e6 * batches / 3.6e6 * 1.10 * ScoringParams().grid_gco2e_per_kwh / 1000
    assert s.operational_kgco2e == pytest.approx(op)
    assert s.total_kgco2e == pytest.approx(emb + op)
    assert s.tcdp == pytest.approx((emb + op) * d)
    assert s.tcdp_kgco2e_days == pytest.approx(s.tcdp / 86400)


def test_whole_life_embodied_is_independent_of_time():
    p = ScoringParams(embodied_mode="whole-life", host_embodied_kgco2e_per_device=0.0)
    assert _score(p).embodied_kgco2e == pytest.approx(1024 * 100)
    assert _score(p, iteration_s=20.0).embodied_kgco2e == pytest.approx(1024 * 100)


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
    embodied_kg = devices * (embodied_per_device + host_per_device) * share
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
    ],
)
def test_bad_params_name_field_and_value(kw, needle):
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(")):
        ScoringParams(**kw)


@given(
    rows=st.lists(st.tuples(st.floats(1, 1e9), st.floats(0, 1e15), st.floats(0, 1e4)), min_size=1),
    mode=st.sampled_from(["amortised", "whole-life"]),
)
def test_job_carbon_of_arrays_equals_job_carbon_of_each_float(rows, mode):
    """The sweep's bounds call job_carbon on arrays of many designs at once: each entry is
    exactly the float result (the same operations in the same order)."""
    params = ScoringParams(embodied_mode=mode, grid_gco2e_per_kwh=430.0)
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
