"""The design residual: what the presets' fitted training clocks hold beyond their power."""

import dataclasses

import pytest

import phaze
from arch_space import Cluster
from arch_space._data import shipped_toml
from arch_space.area import area_mm2, tensor_load_power_w
from arch_space.perf.device import device_profile, generic_profile, preset_profile
from arch_space.perf.residual import (
    ClockResidual,
    clock_residuals,
    design_clock_residual,
    power_capped_clock,
)
from arch_space.power_limit import preset_board_limit_w
from arch_space.presets import preset, preset_names
from arch_space.tech import tech_node

_STORED = shipped_toml("devices.toml")  # with every chip file's [devices] table
_FITTED = {
    name: table["fitted"]["sustained_clock_fraction"]
    for name, table in _STORED.items()
    if "sustained_clock_fraction" in table.get("fitted", {})
}


def _clock_at_limit(name: str) -> float:
    """Bisection on the clock for the bf16 tensor-load power the board limit allows: an
    oracle that does not assume the power is linear in the clock."""
    acc = preset(name)
    tech = tech_node(acc.node_nm)
    area = area_mm2(acc, tech)

    def power(fraction: float) -> float:
        return float(
            tensor_load_power_w(
                tech,
                num_tc=acc.num_tc,
                tc_rows=acc.tc_rows,
                tc_cols=acc.tc_cols,
                clock_hz=acc.clock_hz * fraction,
                bytes_per_element=acc.bytes_per_element,
                area_mm2=area,
            )
        )

    limit = preset_board_limit_w(name)
    if power(1.0) <= limit:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if power(mid) <= limit else (lo, mid)
    return lo


def test_residuals_follow_the_stored_fits():
    assert _FITTED, "no preset fits a training clock"
    rows = clock_residuals()
    assert {r.preset: r.fitted_clock_fraction for r in rows} == _FITTED
    expected = []
    for r in rows:
        assert r.power_clock_fraction == pytest.approx(_clock_at_limit(r.preset), rel=1e-9)
        expected.append(_FITTED[r.preset] / _clock_at_limit(r.preset))
    assert design_clock_residual() == pytest.approx(min(1.0, sum(expected) / len(expected)))


def test_residual_is_the_mean_and_never_a_gain():
    low = (ClockResidual("x", 0.5, 0.625), ClockResidual("y", 0.9, 1.0))
    assert design_clock_residual(low) == pytest.approx((0.8 + 0.9) / 2)
    assert design_clock_residual((ClockResidual("x", 0.9, 0.75),)) == 1.0
    assert design_clock_residual(()) == 1.0


def test_designs_and_unfitted_presets_pay_the_residual_fitted_presets_keep_their_fits():
    residual = design_clock_residual()
    assert generic_profile().sustained_clock_fraction == residual
    for name in preset_names():
        clock = preset_profile(name).sustained_clock_fraction
        measured_as = _STORED.get(name, {}).get("measured_as", name)  # the h200: the h100's
        assert clock == _FITTED.get(measured_as, residual), name
    design = dataclasses.replace(preset("h100"), name="", clock_hz=1.5e9)
    assert device_profile(design).sustained_clock_fraction == residual


@pytest.mark.parametrize("name", sorted(_FITTED))
def test_a_fitted_presets_silicon_priced_as_a_design_is_not_faster(name):
    """The preset's own silicon as a searched design (the generic profile, its clock capped
    at its board limit as a design space caps it) trains no faster than the fitted preset:
    the design pricing carries at least the losses the fit holds, to a 5 % margin. Silicon
    the cap does not slow (the TPU v5p's) is the preset in every field the op model reads,
    so it is priced as the preset, fit included."""
    acc = preset(name)
    design = dataclasses.replace(acc, name="", clock_hz=acc.clock_hz * power_capped_clock(name))
    capped = power_capped_clock(name) < 1
    assert device_profile(design) == (generic_profile() if capped else preset_profile(name))
    rate = {}
    for label, a in (("preset", acc), ("design", design)):
        ev = phaze.evaluate(
            "gpt3-1.3b",
            a,
            Cluster(devices=8),
            global_batch=64,
            strategy="t=1,p=1,d=8,mbs=4,recompute=none",
        )
        rate[label] = ev.score.tokens_per_s
    assert rate["design"] <= 1.05 * rate["preset"]


@pytest.fixture
def residual_of(monkeypatch):
    """Set the design residual the shipped profiles take (a lower stored fit's), clearing
    the profile caches before and after."""
    import arch_space.perf.device as device_module

    def clear():
        device_module.generic_profile.cache_clear()
        device_module.preset_profile.cache_clear()
        device_module.device_profile.cache_clear()

    def set_residual(value: float) -> None:
        monkeypatch.setattr(device_module, "design_clock_residual", lambda: value)
        clear()

    yield set_residual
    monkeypatch.undo()
    clear()


def test_a_design_pays_a_residual_below_one_on_its_clock(residual_of):
    design = dataclasses.replace(preset("h100"), name="", clock_hz=1.2e9)

    def score():
        # the design's profile passed on: layer schedules are cached by the profile given
        # (a process's shipped profiles never change)
        return phaze.evaluate(
            "gpt3-1.3b",
            design,
            Cluster(devices=8),
            global_batch=64,
            strategy="t=1,p=1,d=8,mbs=4",
            device=device_profile(design),
        ).score

    residual_of(1.0)
    free = score()
    residual_of(0.8)
    assert generic_profile().sustained_clock_fraction == 0.8
    assert preset_profile("v100").sustained_clock_fraction == 0.8
    assert preset_profile("h100").sustained_clock_fraction == _FITTED["h100"]
    paid = score()
    # the clock slows the core ops, not HBM traffic or the links: between 0.8x and 1x
    assert 0.8 * free.mfu <= paid.mfu < 0.99 * free.mfu
