"""The design space: enumeration against brute force, filters, TOML round trips, errors."""

import itertools
import tomllib
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arch_space.accelerator import Accelerator
from arch_space.area import area_mm2, mac_pj, static_power_w
from arch_space.power import reticle_mm2
from arch_space.presets import PUBLISHED, preset
from arch_space.space import PARAMETERS, Space, design_id, load_space, space_names
from arch_space.tech import tech_node
from phaze_common.errors import ConfigError
from results.compare import EQUAL_AREA_TOLERANCE

MIB, GIB = 2**20, 2**30


def _tensor_load_w(acc: Accelerator) -> float:
    """Every MAC busy each cycle at its full energy (uncore share included), plus leakage."""
    tech = tech_node(acc.node_nm)
    mac_w = acc.macs_per_cycle * acc.clock_hz * mac_pj(acc, tech) * 1e-12
    return mac_w * (1 + tech.overhead_fraction) + static_power_w(acc, tech)


def _brute_force(s: Space) -> list[Accelerator]:
    """Every valid design by the definition: one Accelerator, one area and one power under
    tensor load per grid point, at the space's clock (designs over the power budget are kept
    when their leakage fits it; their clock is checked by the caller)."""
    out = []
    budget = s.budget()
    for tc, r, c, vc in itertools.product(s.num_tc, s.tc_rows, s.tc_cols, s.num_vc):
        for lanes, glb, hbm, bw in itertools.product(
            s.vc_lanes or (c,), s.glb_bytes, s.hbm_bytes, s.hbm_bandwidth_bytes_per_s
        ):
            acc = Accelerator(tc, r, c, vc, lanes, glb, hbm, bw, s.clock_hz, s.node_nm)
            a = area_mm2(acc)
            single = s.keep_single_core and (tc == 1 or vc == 1)
            if (single or a >= s.area_fraction_min * budget) and a <= s.area_fraction_max * budget:
                if static_power_w(acc) < s.power_budget():
                    out.append(acc)
    return out


def _pow2s(lo, hi):
    return st.lists(st.sampled_from([2**k for k in range(lo, hi + 1)]), min_size=1, max_size=2)


@settings(max_examples=40)
@given(
    num_tc=_pow2s(0, 6),
    tc_rows=_pow2s(1, 8),
    tc_cols=_pow2s(1, 8),
    num_vc=_pow2s(0, 4),
    vc_lanes=st.one_of(st.just([]), _pow2s(1, 9)),
    glb_mib=_pow2s(1, 7),
    hbm_gib=st.lists(st.sampled_from([16, 32, 80]), min_size=1, max_size=2),
    bw=st.lists(st.sampled_from([0.6e12, 1.2e12, 3.35e12]), min_size=1, max_size=2),
    lo=st.sampled_from([0.0, 0.3, 0.6]),
    keep=st.booleans(),
    node=st.sampled_from([7, 5, 16]),
)
def test_enumeration_equals_brute_force(
    num_tc, tc_rows, tc_cols, num_vc, vc_lanes, glb_mib, hbm_gib, bw, lo, keep, node
):
    try:
        s = Space(
            num_tc=tuple(num_tc),
            tc_rows=tuple(tc_rows),
            tc_cols=tuple(tc_cols),
            num_vc=tuple(num_vc),
            vc_lanes=tuple(vc_lanes),
            glb_bytes=tuple(g * MIB for g in glb_mib),
            hbm_bytes=tuple(h * GIB for h in hbm_gib),
            hbm_bandwidth_bytes_per_s=tuple(bw),
            area_fraction_min=lo,
            keep_single_core=keep,
            node_nm=node,
        )
    except ConfigError as e:  # a buffer alone over the budget is refused, by design
        assert "more than the area budget" in str(e)
        return
    designs = list(s.enumerate())
    full = _brute_force(s)
    assert [replace(d, clock_hz=s.clock_hz) for d in designs] == full
    for d, f in zip(designs, full, strict=True):
        if _tensor_load_w(f) <= s.power_budget():
            assert d.clock_hz == s.clock_hz
        else:  # power-capped: the clock at which the design draws exactly the budget
            assert d.clock_hz < s.clock_hz
            assert _tensor_load_w(d) == pytest.approx(s.power_budget(), rel=1e-9)
    summ = s.summary()
    assert summ.designs == len(designs)
    for p in PARAMETERS:
        assert sum(summ.counts[p].values()) == len(designs)
    if designs:
        areas = [area_mm2(d) for d in designs]
        assert summ.area_mm2_min == pytest.approx(min(areas))
        assert summ.area_mm2_max == pytest.approx(max(areas))


def test_shipped_spaces():
    assert space_names() == ("default", "tiny", "reticle")
    tiny = Space.named("tiny")
    designs = list(tiny.enumerate())
    assert 20 <= len(designs) <= 60
    for field in ("num_tc", "tc_rows", "glb_bytes", "hbm_bytes"):
        assert len({getattr(d, field) for d in designs}) > 1  # designs differ in each
    default = Space.named("default")
    assert default.budget() == pytest.approx(area_mm2(preset("ref-max")))
    summ = default.summary()
    # every grid point once per format set: bf16 alone, and bf16 with fp8 lanes
    assert default.format_sets == (("bf16",), ("bf16", "fp8"))
    assert summ.grid_points == 2 * 13 * 8 * 8 * 13 * 7
    assert 1000 < summ.designs < 50000
    assert [f.formats for f in summ.format_sets] == ["bf16", "bf16+fp8"]
    assert sum(f.designs for f in summ.format_sets) == summ.designs
    assert summ.area_mm2_max <= summ.budget_mm2
    assert preset("ref-max").num_tc in summ.counts["num_tc"]


def test_default_and_tiny_spaces_keep_their_designs():
    # the bf16 designs and grid the sweeps and their published timings were made with; the
    # default space adds each again with fp8 lanes where they still fit
    for name, bf16, grid_points in (("default", 23474, 75712), ("tiny", 30, 32)):
        summ = Space.named(name).summary()
        sets = {f.formats: f.designs for f in summ.format_sets}
        assert sets["bf16"] == bf16 and summ.grid_points == grid_points * len(sets), name


def test_reticle_space_reaches_the_h100_at_its_area_and_power():
    s = Space.named("reticle")
    h100 = preset("h100")
    _, h100_die_mm2, h100_tdp_w = PUBLISHED["h100"]
    assert s.budget() == reticle_mm2() == 858.0
    assert s.power_budget() == h100_tdp_w == 700.0
    assert (s.node_nm, s.clock_hz) == (h100.node_nm, h100.clock_hz)
    assert (s.hbm_bytes, s.hbm_bandwidth_bytes_per_s) == (
        (h100.hbm_bytes,),
        (h100.hbm_bandwidth_bytes_per_s,),
    )
    areas = [area_mm2(d) for d in s.enumerate()]
    assert max(areas) <= 858.0
    # every design no larger than the H100's die is of its area (the equal-area comparison)
    fits = [a for a in areas if a <= h100_die_mm2]
    assert fits and min(fits) >= (1 - EQUAL_AREA_TOLERANCE) * h100_die_mm2
    assert any(abs(a - h100_die_mm2) <= 0.1 * h100_die_mm2 for a in areas)


def test_single_core_designs_kept_below_the_lower_bound():
    s = Space(num_tc=(1, 2), tc_rows=(2,), tc_cols=(2,), num_vc=(1, 2), glb_bytes=(2 * MIB,))
    designs = list(s.enumerate())
    # all tiny: only those with one tensor or one vector core survive the 30 % floor
    assert {(d.num_tc, d.num_vc) for d in designs} == {(1, 1), (1, 2), (2, 1)}
    s2 = Space(
        num_tc=(1, 2),
        tc_rows=(2,),
        tc_cols=(2,),
        num_vc=(1, 2),
        glb_bytes=(2 * MIB,),
        keep_single_core=False,
    )
    assert list(s2.enumerate()) == []


@pytest.mark.parametrize("name", ["default", "tiny", "reticle"])
def test_space_toml_round_trip(name, tmp_path):
    s = Space.named(name)
    assert Space.from_mapping(tomllib.loads(s.to_toml())) == s
    f = tmp_path / "s.toml"
    f.write_text(s.to_toml())
    assert load_space(str(f)) == s


def test_custom_space_toml_features(tmp_path):
    f = tmp_path / "space.toml"
    f.write_text(
        "[space]\nnum_tc = {min = 1, max = 8}\ntc_rows = 64\ntc_cols = [64, 128]\nnum_vc = [1]\n"
        "vc_lanes = [16, 256]\nglb_mib = [8]\nhbm_gib = [16, 24]\nbudget_mm2 = 250\nnode_nm = 5\n"
    )
    s = Space.from_toml(f)
    assert s.num_tc == (1, 2, 4, 8) and s.tc_rows == (64,) and s.vc_lanes == (16, 256)
    assert s.hbm_bytes == (16 * GIB, 24 * GIB) and s.budget() == 250.0
    assert Space.from_mapping(tomllib.loads(s.to_toml())) == s


def test_bad_space_reports_every_problem(tmp_path):
    f = tmp_path / "space.toml"
    f.write_text(
        "[space]\nnum_tc = [1, 3]\ntc_rows = 300\ntc_cols = [2]\nnum_vc = [1]\nglb_mib = [2.5]\n"
        "hbm_gib = [0]\nnodes_nm = 5\n"
    )
    with pytest.raises(ConfigError) as e:
        Space.from_toml(f)
    msg = str(e.value)
    where = f"{f} [space]"
    assert f"{where}: tc_rows = 300 must be a power of two in [2, 256]" in msg
    assert f"{where}: num_tc = 3 must be a power of two in [1, 4096]" in msg
    assert f"{where}: glb_mib = 2.5 must be a power of two in [1, 1024]" in msg
    assert f"{where}: hbm_gib = 0 must be > 0" in msg
    assert "unknown key 'nodes_nm'; did you mean 'node_nm'?" in msg


def test_space_errors_budget_node_and_missing_keys(tmp_path):
    with pytest.raises(
        ConfigError, match="glb_mib = 512 needs 512 mm2 of SRAM, more than the area budget"
    ):
        Space(num_tc=(1,), tc_rows=(2,), tc_cols=(2,), num_vc=(1,), glb_bytes=(512 * MIB,))
    with pytest.raises(
        ConfigError,
        match=r"node_nm = 10 is not a known process node \(known: 28, 16, 12, 7, 5, 3\)",
    ):
        Space(
            num_tc=(1,), tc_rows=(2,), tc_cols=(2,), num_vc=(1,), glb_bytes=(2 * MIB,), node_nm=10
        )
    with pytest.raises(ConfigError, match="missing key 'glb_mib'"):
        Space.from_mapping(
            {"space": {"num_tc": 1, "tc_rows": 2, "tc_cols": 2, "num_vc": 1}}, "s.toml"
        )
    with pytest.raises(ConfigError, match="unknown space 'tiy'; did you mean tiny"):
        Space.named("tiy")
    f = tmp_path / "broken.toml"
    f.write_text("[space\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        Space.from_toml(f)
    with pytest.raises(ConfigError, match="no such file"):
        Space.from_toml(tmp_path / "missing.toml")


def test_design_id_is_stable_and_distinguishes_designs():
    designs = list(Space.named("tiny").enumerate())
    ids = [design_id(d) for d in designs]
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 12 for i in ids)
    r = preset("ref-max")
    same = Accelerator(8, 128, 128, 2, 128, 128 * MIB, 32 * GIB, 1_200_000_000_000, 1_050_000_000)
    assert design_id(same) == design_id(r)  # name ignored; int and float rates agree
    assert design_id(r) == "9bc645212410"  # pinned so a change of the hash breaks stored sweeps
