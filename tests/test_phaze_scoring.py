"""Scoring formulas (DESIGN §7) checked by hand-computed values and identities."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phaze.errors import ConfigError
from phaze.scoring import SECONDS_PER_YEAR, BatchEnergy, ScoringParams, score_point


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
    emb = 1024 * 100 * d / (5 * SECONDS_PER_YEAR)
    assert s.embodied_kgco2e == pytest.approx(emb)
    op = 4e6 * batches / 3.6e6 * 1.10 * ScoringParams().grid_gco2e_per_kwh / 1000
    assert s.operational_kgco2e == pytest.approx(op)
    assert s.total_kgco2e == pytest.approx(emb + op)
    assert s.tcdp == pytest.approx((emb + op) * d)
    assert s.tcdp_kgco2e_days == pytest.approx(s.tcdp / 86400)


def test_whole_life_embodied_is_independent_of_time():
    p = ScoringParams(embodied_mode="whole-life")
    assert _score(p).embodied_kgco2e == pytest.approx(1024 * 100)
    assert _score(p, iteration_s=20.0).embodied_kgco2e == pytest.approx(1024 * 100)


@given(
    it=st.floats(0.1, 100),
    pue=st.floats(1.0, 2.0),
    ci=st.floats(0, 1000),
)
def test_tcdp_is_sum_of_two_products(it, pue, ci):
    """tCDP = C_emb*D + C_op*D (DESIGN §7) and everything scales as the formulas say."""
    s = _score(ScoringParams(pue=pue, grid_gco2e_per_kwh=ci), iteration_s=it)
    d = s.time_to_train_s
    assert math.isclose(s.tcdp, s.embodied_kgco2e * d + s.operational_kgco2e * d, rel_tol=1e-9)
    assert s.operational_kgco2e >= 0


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
