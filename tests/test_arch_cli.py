"""Smoke and error tests of ``phaze arch list|show`` and ``phaze space show``."""

import json

import pytest

from arch_space.accelerator import ACCELERATOR_FIELDS
from arch_space.config import accelerator_to_toml
from arch_space.presets import preset, preset_names

SHOW_KEYS = {
    "area_mm2",
    "area_breakdown_mm2",
    "peak_flops",
    "die_cost_usd",
    "device_cost_usd",
    "embodied_kgco2e",
    "tdp_w",
    "tdp_source",
    "load_power_w",
    "yield",
    "dies_per_wafer",
    "design_id",
    *(set(ACCELERATOR_FIELDS) - {"name", "hbm_stacks", "measured_as"}),  # measured_as: where set
}


def test_arch_list_shows_the_data_sheet_tdp_beside_the_modelled_load_power(cli_run):
    """The H100's TDP is its data sheet's 700 W; the 617 W the model draws under tensor load
    is named for what it is, in the text and in --json."""
    from arch_space.power import tdp_w as load_power_w

    h100 = preset("h100")
    docs = {
        a["name"]: a for a in json.loads(cli_run("arch", "list", "--json").output)["accelerators"]
    }
    assert docs["h100"]["tdp_w"] == 700.0 and "700 W" in docs["h100"]["tdp_source"]
    assert docs["h100"]["load_power_w"] == pytest.approx(load_power_w(h100))
    assert docs["tpuv4"]["tdp_w"] is None  # no shipped data sheet figure
    lines = cli_run("arch", "list").output.splitlines()
    header = lines[0].split("  ")
    assert "load W" in [h.strip() for h in header] and "TDP W" in [h.strip() for h in header]
    row = next(line for line in lines if line.startswith("h100 "))
    cells = row.split()
    assert cells[cells.index(str(round(load_power_w(h100)))) + 1] == "700"
    show = cli_run("arch", "show", "h100").output
    assert "TDP (data sheet board power): 700 W" in show
    assert "TDP-like" not in show


def test_arch_list_text_and_json(cli_run):
    r = cli_run("arch", "list")
    assert r.exit_code == 0, r.output
    for name in preset_names():
        assert name in r.output
    r = cli_run("arch", "list", "--json")
    doc = json.loads(r.output)
    assert doc["schema_version"] == 1
    assert [a["name"] for a in doc["accelerators"]] == list(preset_names())


@pytest.mark.parametrize("name", ["a100", "h100"])
def test_arch_show_json_has_every_key(name, cli_run):
    r = cli_run("arch", "show", name, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert SHOW_KEYS <= set(doc)
    assert doc["peak_flops"] == pytest.approx(preset(name).peak_flops)
    assert sum(doc["area_breakdown_mm2"].values()) == pytest.approx(doc["area_mm2"])
    assert 0 < doc["yield"] < 1 and doc["device_cost_usd"] > doc["die_cost_usd"]


def test_arch_show_text_and_file(tmp_path, cli_run):
    f = tmp_path / "mine.toml"
    f.write_text(
        accelerator_to_toml(preset("tpuv4")).replace('"tpuv4"', '"mine"') + 'measured_as = ""\n'
    )
    r = cli_run("arch", "show", str(f))
    assert r.exit_code == 0, r.output
    assert "mine" in r.output and "uncore" in r.output and "dies per wafer" in r.output


def test_arch_show_cost_override(tmp_path, cli_run):
    f = tmp_path / "cost.toml"
    f.write_text("[memory]\nhbm_usd_per_gb = 100.0\n")
    base = json.loads(cli_run("arch", "show", "a100", "--json").output)
    dear = json.loads(cli_run("arch", "show", "a100", "--json", "--cost-params", str(f)).output)
    assert (
        dear["device_cost_usd"] > base["device_cost_usd"]
        and dear["die_cost_usd"] == base["die_cost_usd"]
    )


def test_arch_show_bad_inputs_exit_1_with_one_error_line(tmp_path, cli_run):
    r = cli_run("arch", "show", "a10")
    assert r.exit_code == 1
    assert (
        r.output.startswith("Error: unknown accelerator preset") and "did you mean a100" in r.output
    )
    f = tmp_path / "bad.toml"
    f.write_text("[accelerator]\nnum_tcs = 4\ntc_rows = 300\n")
    r = cli_run("arch", "show", str(f))
    assert r.exit_code == 1
    assert r.output.count("\n") == 1 and "Traceback" not in r.output
    assert "unknown key 'num_tcs'; did you mean 'num_tc'?" in r.output
    assert "missing key 'clock_hz'" in r.output
    r = cli_run("arch", "show", str(tmp_path / "nope.toml"))
    assert r.exit_code == 1 and "no such file" in r.output


def test_space_show_text_and_json(tmp_path, cli_run):
    r = cli_run("space", "show", "tiny")
    assert r.exit_code == 0, r.output
    assert "designs" in r.output and "glb MiB" in r.output
    doc = json.loads(cli_run("space", "show", "tiny", "--json").output)
    assert {"designs", "budget_mm2", "area_mm2_min", "area_mm2_max", "counts"} <= set(doc)
    assert sum(doc["counts"]["num_tc"].values()) == doc["designs"]
    assert doc["area_mm2_min"] <= doc["area_mm2_max"] <= doc["budget_mm2"]
    r = cli_run("space", "show")  # the default space
    assert r.exit_code == 0 and "space default" in r.output


def test_space_list_shows_every_shipped_space(cli_run):
    r = cli_run("space", "list")
    assert r.exit_code == 0, r.output
    names = [line.split()[0] for line in r.output.splitlines()[2:]]
    assert names == ["default", "tiny", "reticle"]
    doc = json.loads(cli_run("space", "list", "--json").output)
    reticle = doc["spaces"][2]
    assert reticle["name"] == "reticle" and reticle["budget_mm2"] == 858.0
    assert reticle["area_mm2_max"] <= 858.0 and reticle["power_budget_w"] == 700.0
    r = cli_run("space", "show", "reticle")
    assert r.exit_code == 0 and "space reticle: " in r.output


def test_space_show_bad_file_exit_1(tmp_path, cli_run):
    f = tmp_path / "space.toml"
    f.write_text(
        "[space]\nnum_tc = [1]\ntc_rows = 300\ntc_cols = [2]\nnum_vc = [1]\nglb_mib = [2]\n"
    )
    r = cli_run("space", "show", str(f))
    assert r.exit_code == 1
    assert f"Error: {f} [space]: tc_rows = 300 must be a power of two in [2, 256]" in r.output
    r = cli_run("space", "show", "hug")
    assert r.exit_code == 1 and "unknown space 'hug'" in r.output


def test_arch_show_tech_override_and_bad_override(tmp_path, cli_run):
    f = tmp_path / "tech.toml"
    f.write_text("[node.7]\nmac_area_um2 = 400\n")
    base = json.loads(cli_run("arch", "show", "a100", "--json").output)
    big = json.loads(cli_run("arch", "show", "a100", "--json", "--tech-params", str(f)).output)
    assert big["area_breakdown_mm2"]["tensor_cores"] > base["area_breakdown_mm2"]["tensor_cores"]
    f.write_text("[node.7]\nmac_area = 400\n")
    r = cli_run("arch", "list", "--tech-params", str(f))
    assert r.exit_code == 1 and "did you mean 'mac_area_um2'?" in r.output


def test_arch_show_rounds_the_figures_it_prints_by_name():
    """Keys past the known sections print as ``key: value``, rounded like every figure."""
    from arch_space.summary import describe
    from phaze.cli.arch_cmd import render_accelerator

    doc = {**describe(preset("h100")), "die_area_mm2": 814.0139999999999, "note": "x"}
    text = render_accelerator(doc)
    assert "die_area_mm2: 814.014\n" in text + "\n" and "note: x" in text
