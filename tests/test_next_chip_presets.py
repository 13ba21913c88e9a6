"""The h200, mi300x and tpuv5p presets against their data sheets: peaks, memory, formats, and
the arch listing's mark that no published run checks them."""

import dataclasses
import json

import pytest
from click.testing import CliRunner

from arch_space.area import die_area_mm2
from arch_space.cost import made_die
from arch_space.perf.device import _measured_as, device_profile, preset_profile
from arch_space.power import reticle_mm2
from arch_space.presets import NVLINK_BYTES_PER_S, PUBLISHED, preset
from phaze.cli import cli
from phaze.validation.published_runs import default_registry
from phaze_common.errors import ConfigError

_GIB = 2**30

# data sheets (arch_space/data/formats.toml [sources]): dense bf16 FLOP/s, HBM bytes, HBM B/s
DATASHEET = {
    "h200": (989e12, 141 * _GIB, 4.8e12),
    "mi300x": (1307.4e12, 192 * _GIB, 5.3e12),
    "tpuv5p": (459e12, 95 * _GIB, 2.765e12),
}
# the formats each runs besides bf16, and those it must not run
FORMATS = {
    "h200": ({"fp16", "fp8", "int8"}, {"fp4"}),
    "mi300x": ({"fp16", "fp8", "int8"}, {"fp4"}),
    "tpuv5p": ({"int8"}, {"fp8", "fp4"}),
}
# further published peaks: (format, dense ops/s)
FURTHER = [("h200", "fp8", 1979e12), ("mi300x", "fp8", 2614.9e12), ("tpuv5p", "int8", 918e12)]


@pytest.mark.parametrize("name", sorted(DATASHEET))
def test_peak_and_memory_are_the_data_sheets(name):
    peak, hbm, bandwidth = DATASHEET[name]
    acc = preset(name)
    assert acc.peak_flops == pytest.approx(peak, rel=0.01)
    assert PUBLISHED[name][0] == peak
    assert (acc.hbm_bytes, acc.hbm_bandwidth_bytes_per_s) == (hbm, bandwidth)


@pytest.mark.parametrize(("name", "fmt", "ops"), FURTHER)
def test_further_format_peaks_are_the_data_sheets(name, fmt, ops):
    acc = preset(name)
    assert acc.peak_flops * acc.format_rate(fmt) == pytest.approx(ops, rel=0.01)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_each_runs_only_the_formats_it_has(name):
    runs, lacks = FORMATS[name]
    formats = dict(preset(name).formats)
    assert set(formats) == {"bf16"} | runs
    assert not lacks & set(formats)


def test_h200_differs_from_h100_only_in_its_hbm():
    h100, h200 = preset("h100"), preset("h200")
    hbm = ("hbm_bytes", "hbm_bandwidth_bytes_per_s", "hbm_stacks")
    assert dataclasses.replace(h200, name="h100", **{f: getattr(h100, f) for f in hbm}) == h100
    assert h200.hbm_stacks == 6 and h100.hbm_stacks == 5  # six 1024-bit HBM3e controllers
    assert PUBLISHED["h200"] == PUBLISHED["h100"]  # same die, rates and 700 W
    assert NVLINK_BYTES_PER_S["h200"] == NVLINK_BYTES_PER_S["h100"] == 450e9


def test_h200_takes_the_h100s_measured_rates_fitted_clock_and_board_limit():
    # same silicon, clock, links and 700 W: without them it would run its GEMMs at the
    # generic share and its clock at the design residual, 1.5x the h100 on the same die
    h100, h200 = preset_profile("h100"), device_profile(preset("h200"))
    assert dataclasses.replace(h200, name="h100") == h100
    assert h200.name == "h200" and h200.board_limit_w == 700.0 and h200.fitted


def test_a_measured_as_table_must_name_a_preset_with_its_own_table():
    with pytest.raises(ConfigError, match="measured_as"):
        _measured_as("h200", {"h200": {"measured_as": "h100", "sustained_tensor_fraction": 0.8}})
    with pytest.raises(ConfigError, match="measured_as"):
        _measured_as("h200", {"h200": {"measured_as": "h300"}})
    assert _measured_as("h200", {"h200": {"measured_as": "h100"}, "h100": {}}) == "h100"


def test_mi300x_is_eight_harvested_compute_dies_each_within_the_reticle():
    acc = preset("mi300x")
    assert acc.dies == 8 and acc.num_vc // acc.dies == 38  # 38 of 40 CUs per XCD enabled
    assert acc.num_tc == 4 * acc.num_vc  # 4 Matrix Cores per CU
    assert acc.clock_hz == 2.1e9 and acc.glb_bytes == 256 * 2**20
    assert die_area_mm2(acc) < made_die(acc)[0] < reticle_mm2()  # the spare CUs are made
    assert PUBLISHED["mi300x"][2] == 750.0
    assert "mi300x" not in NVLINK_BYTES_PER_S  # Infinity Fabric, not NVLink


def test_tpuv5p_is_the_tpuv4_cores_at_the_clock_its_peak_gives():
    v4, v5p = preset("tpuv4"), preset("tpuv5p")
    cores = ("num_tc", "tc_rows", "tc_cols", "num_vc", "vc_lanes")
    assert all(getattr(v5p, f) == getattr(v4, f) for f in cores)
    assert v5p.clock_hz == pytest.approx(459e12 / (2 * v5p.macs_per_cycle), rel=1e-3)
    assert PUBLISHED["tpuv5p"][2] is None  # Google publishes no power


def test_arch_list_counts_their_published_runs():
    # MaxText's v5p table is in the registry; no run of the H200 or MI300X is
    out = CliRunner().invoke(cli, ["arch", "list", "--json"])
    assert out.exit_code == 0, out.output
    docs = {d["name"]: d for d in json.loads(out.output)["accelerators"]}
    v5p_runs = sum(r.arch == "tpuv5p" for r in default_registry().runs)
    assert v5p_runs >= 6 and docs["tpuv5p"]["published_runs"] == v5p_runs
    without = set(DATASHEET) - {"tpuv5p"}
    assert all(docs[n]["published_runs"] == 0 for n in without)
    table = CliRunner().invoke(cli, ["arch", "list"]).output
    rows = {line.split()[0]: line for line in table.splitlines() if line.strip()}
    assert all(rows[n].rstrip().endswith("none") for n in without)
    assert rows["tpuv5p"].rstrip().endswith(f" {v5p_runs}")
