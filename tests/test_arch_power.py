"""Board power under load: GEMMs draw the published board limit, memory-bound ops less."""

from __future__ import annotations

import dataclasses

import pytest

from arch_space import Space, area_mm2, peak_power_w, preset, static_power_w, tech_node
from arch_space.area import made_die_area_mm2, tensor_load_power_w
from arch_space.perf.device import MODELLED
from arch_space.power import gemm_power_w, memory_bound_power_w, tdp_w, unlimited_gemm_power_w
from arch_space.presets import PUBLISHED
from phaze_common.errors import ConfigError

# Calibrated on (benchmarks/calibrate_energy.py) and held out from the fit.
FIT = ("a100", "tpuv4")
HELD_OUT = ("h100", "v100")


# The fit and the held-out check compare the energy model's own tensor-load power (board
# limiter off) with the board limits; with it on, a preset never draws more than its limit.
@pytest.mark.parametrize("name", FIT)
def test_calibration_chips_draw_their_board_power_under_gemm(name):
    assert unlimited_gemm_power_w(preset(name)) == pytest.approx(PUBLISHED[name][2], rel=0.01)


@pytest.mark.parametrize("name", HELD_OUT)
def test_held_out_chips_within_20_percent_of_board_power(name):
    assert unlimited_gemm_power_w(preset(name)) == pytest.approx(PUBLISHED[name][2], rel=0.20)


@pytest.mark.parametrize("name", [*FIT, *HELD_OUT])
def test_memory_bound_ops_draw_less_than_gemms_and_more_than_leakage(name):
    acc = preset(name)
    assert static_power_w(acc) < memory_bound_power_w(acc) < 0.6 * gemm_power_w(acc)
    assert tdp_w(acc) == gemm_power_w(acc) < peak_power_w(acc)


def test_energy_beside_the_arithmetic_raises_gemm_power_linearly():
    acc = preset("a100")
    base = tech_node(7, {"control_pj_per_mac": 0.0, "operand_pj_per_byte": 0.0})
    plus = tech_node(7, {"control_pj_per_mac": 1.0, "operand_pj_per_byte": 0.0})
    twice = tech_node(7, {"control_pj_per_mac": 2.0, "operand_pj_per_byte": 0.0})
    p0, p1, p2 = (unlimited_gemm_power_w(acc, t) for t in (base, plus, twice))
    assert p0 < p1 < p2 and p2 - p1 == pytest.approx(p1 - p0, rel=1e-9)
    # without it, the arithmetic, buffers, HBM and leakage reach about a third of 400 W
    assert p0 < 0.4 * PUBLISHED["a100"][2]


@pytest.mark.parametrize("name", [*FIT, *HELD_OUT, "ref-max"])
def test_closed_form_tensor_load_power_tracks_the_gemm_probe(name):
    acc = preset(name)
    closed = tensor_load_power_w(
        tech_node(acc.node_nm),
        num_tc=acc.num_tc,
        tc_rows=acc.tc_rows,
        tc_cols=acc.tc_cols,
        clock_hz=acc.clock_hz,
        bytes_per_element=acc.bytes_per_element,
        area_mm2=area_mm2(acc),
    )
    # the closed form is every MAC each cycle at the full clock: the op model without the
    # preset's sustained caps
    assert closed == pytest.approx(gemm_power_w(acc, device=MODELLED), rel=0.06)


def test_power_budget_caps_the_clock_of_designs_over_it():
    default = Space.named("default")
    wide = Space.from_mapping({"space": {**_TINY, "power_budget_w": 30000.0}})  # no cap
    tight = Space.from_mapping({"space": {**_TINY, "power_budget_w": 150.0}})
    assert default.power_budget() == 400.0  # the A100 SXM's limit at 7 nm
    kept, full = list(tight.enumerate()), list(wide.enumerate())
    assert [dataclasses.replace(a, clock_hz=wide.clock_hz) for a in kept] == full
    s = tight.summary()
    assert s.power_budget_w == 150.0 and s.power_w_max <= 150.0 * (1 + 1e-9)
    assert 0 < s.capped_designs < s.designs and wide.summary().capped_designs == 0
    assert s.clock_hz_min < tight.clock_hz
    for acc in kept:
        # the op model agrees with the closed form the cap is solved in
        assert gemm_power_w(acc, device=MODELLED) <= 150.0 * 1.06
        if acc.clock_hz < tight.clock_hz:
            # capped: the budget is met with (almost) nothing to spare, and the peak fell
            assert gemm_power_w(acc, device=MODELLED) == pytest.approx(150.0, rel=0.06)
    # a 1.1 PFLOP/s design of 8 x 256 x 256 MACs at 7 nm needs far more than a 7 nm board
    big = dataclasses.replace(preset("ref-max"), num_tc=8, tc_rows=256, tc_cols=256)
    assert gemm_power_w(big, device=MODELLED) > 1.5 * default.power_budget()


def test_a_design_whose_leakage_exceeds_the_budget_is_dropped():
    s = Space.from_mapping({"space": {**_TINY, "power_budget_w": 1.0}})
    assert all(static_power_w(a) < 1.0 for a in s.enumerate())
    assert s.summary().designs < Space.from_mapping({"space": _TINY}).summary().designs


def test_bad_power_budget_names_the_key():
    with pytest.raises(ConfigError, match=r"power_budget_w = -5 must be > 0"):
        Space.from_mapping({"space": {**_TINY, "power_budget_w": -5}})


_TINY = {
    "num_tc": [2, 4, 8, 16],
    "tc_rows": [64, 128],
    "tc_cols": [128],
    "num_vc": [2],
    "glb_mib": [16, 64],
}


def test_shipped_energies_are_the_calibration_scripts_output(benchmark_script):
    script = benchmark_script("calibrate_energy")
    control, operand = script.fit()
    for node, factor in script.NODE_FACTOR.items():
        t = tech_node(node)
        ratio = factor / script.NODE_FACTOR[7]
        assert t.control_pj_per_mac == pytest.approx(control * ratio, rel=0.01)
        assert t.operand_pj_per_byte == pytest.approx(operand * ratio, rel=0.01)


def test_headroom_against_the_reticle_and_the_board_limit():
    from arch_space.power import headroom, reticle_mm2

    a100, b200, tpu = (headroom(preset(n)) for n in ("a100", "b200", "tpuv4"))
    assert reticle_mm2() == 858.0
    assert a100.power_budget_w == 400.0 and abs(a100.power_headroom) < 0.01  # calibrated
    assert b200.power_budget_w == 1000.0 and b200.power_headroom < 0  # held by its limiter
    # the area is one die as made (with its spare SMs): each of the B200's two fits the reticle
    assert b200.die_area_mm2 == pytest.approx(made_die_area_mm2(preset("b200")))
    assert area_mm2(preset("b200")) / 2 < b200.die_area_mm2 < reticle_mm2()
    # the limiter holds the B200's draw at its limit; the A100 draws what it asks for
    assert b200.power_drawn_w == pytest.approx(1000.0) and b200.power_asked_w > 1000.0
    assert a100.power_drawn_w == pytest.approx(a100.power_asked_w)
    assert a100.power_drawn_w <= 400.0
    assert set(a100.figures()) >= {"power_drawn_w", "power_headroom", "area_headroom"}
    assert 0 < a100.area_headroom and 0 < b200.area_headroom
    assert tpu.power_headroom == pytest.approx(1 - tdp_w(preset("tpuv4")) / 400.0)
    custom = headroom(preset("a100"), area_budget_mm2=1000.0, power_budget=800.0)
    assert custom.area_headroom == pytest.approx(1 - made_die_area_mm2(preset("a100")) / 1000.0)
    assert custom.power_headroom == pytest.approx(0.5, abs=0.01)
