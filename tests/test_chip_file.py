"""A chip is one file: ``phaze arch show NAME --toml`` writes a preset's chip file (its fields
and every table measured about it), and the file evaluates as the preset; a file without the
tables says which preset it is measured as (``measured_as``), or is refused."""

from __future__ import annotations

import dataclasses
import json
import tomllib
from pathlib import Path

import pytest

from arch_space import _data, presets
from arch_space._data import CHIP_TABLES
from arch_space.config import accelerator_from_mapping, accelerator_to_toml, preset_to_toml
from arch_space.perf.device import device_profile, generic_profile
from arch_space.presets import preset, preset_names
from phaze_common.errors import ConfigError

# a small model at a fixed layout: one evaluation takes about a second
_EVALUATE = (
    "evaluate",
    "--workload",
    "gpt3-1.3b",
    "--devices",
    8,
    "--global-batch",
    16,
    "--strategy",
    "t=2,p=1,d=4,mbs=2",
    "--json",
)
_FAST = ("h100", "h200", "v100", "tpuv5p")
_CHIPS = Path(__file__).parents[1] / "arch_space" / "data" / "chips"


def _precision(name: str) -> tuple[str, ...]:
    """fp16 on a chip without bf16 (the V100), else the default."""
    return () if "bf16" in preset(name).format_names else ("--precision", "fp16")


@pytest.mark.parametrize(
    "name",
    [n if n in _FAST else pytest.param(n, marks=pytest.mark.slow) for n in preset_names()],
)
def test_a_preset_written_as_one_file_evaluates_as_the_preset(name, cli_run, tmp_path):
    shown = cli_run("arch", "show", name, "--toml")
    assert shown.exit_code == 0, shown.output
    f = tmp_path / f"{name}.toml"
    f.write_text(shown.stdout)
    by_name = cli_run(*_EVALUATE, "--arch", name, *_precision(name))
    by_file = cli_run(*_EVALUATE, "--arch", f, *_precision(name))
    assert by_name.exit_code == 0 and by_file.exit_code == 0, by_name.output + by_file.output
    assert json.loads(by_file.stdout) == json.loads(by_name.stdout)


def test_the_file_holds_every_table_measured_about_the_chip_with_its_sources():
    """``arch show --toml`` writes the chip's whole file (not a pointer): every table the
    model reads about the chip, with its sources, and it reads back to the preset itself."""
    text = preset_to_toml("h100")
    assert text == (_CHIPS / "h100.toml").read_text("utf-8") and "measured_as" not in text
    data = tomllib.loads(text)
    assert set(CHIP_TABLES) <= set(data) and "[devices.gemm_shapes]" in text
    assert "Raymond James" in text and "GH100 full die" in text  # price, harvest sources
    assert data["host"]["device_board_w"]["value"] == 700.0
    assert accelerator_from_mapping(data) == preset("h100")
    h200 = tomllib.loads(preset_to_toml("h200"))
    assert h200["devices"] == {"measured_as": "h100"}
    assert device_profile(accelerator_from_mapping(h200)) == device_profile(preset("h200"))


def test_every_preset_is_one_chip_file_holding_its_tables():
    """Each preset's tables are read from its chip file alone: the shipped views of the
    generic files hold no chip's table but through its chip file."""
    assert sorted(f.stem for f in _CHIPS.glob("*.toml")) == sorted(preset_names())
    for table, file in CHIP_TABLES.items():
        raw = tomllib.loads((_CHIPS.parent / file).read_text("utf-8"))
        assert (
            not set(preset_names()) & set(raw) and not raw.get("peak") and not raw.get("price")
        ), (table, file)
    assert "profile" not in tomllib.loads((_CHIPS.parent / "system.toml").read_text())["host"]


def test_shipping_a_preset_is_adding_its_file(tmp_path, monkeypatch):
    """A file added to the chips folder is read as a preset, listed by its ``order``, its
    formats from its own [[peak]] rows."""
    chips = tmp_path / "data" / "chips"
    chips.mkdir(parents=True)
    for f in _CHIPS.glob("*.toml"):
        (chips / f.name).write_text(f.read_text("utf-8"), "utf-8")
    toy = preset_to_toml("h100").replace('name = "h100"', 'name = "toy"')
    (chips / "toy.toml").write_text(toy.replace("\norder = 3 ", "\norder = 99 "), "utf-8")
    monkeypatch.setattr(_data.importlib.resources, "files", lambda package: tmp_path)
    found = _data.shipped_chips.__wrapped__()
    assert list(found) == [*preset_names(), "toy"]
    assert presets._chip("toy", found["toy"]) == dataclasses.replace(preset("h100"), name="toy")


def test_a_copy_keeping_the_tables_is_measured_as_their_preset():
    text = preset_to_toml("h100").replace('name = "h100"', 'name = "mine"')
    acc = accelerator_from_mapping(tomllib.loads(text.replace("hbm_gib = 80", "hbm_gib = 96")))
    assert acc.measured_as == "h100" and acc.hbm_bytes == 96 * 2**30
    assert acc.formats == preset("h100").formats  # from its [[peak]] rows


def test_edited_measurement_tables_are_refused_naming_the_way_to_ship_them(cli_run, tmp_path):
    text = preset_to_toml("h100").replace(
        "sustained_tensor_fraction = 0.801", "sustained_tensor_fraction = 0.9"
    )
    with pytest.raises(ConfigError) as e:
        accelerator_from_mapping(tomllib.loads(text), "mine.toml")
    msg = str(e.value)
    assert "mine.toml: its measurement tables ([devices], [harvest]" in msg
    assert "not those of any shipped preset" in msg and "arch_space/data/chips/" in msg
    partial = preset_to_toml("h100").split("\n[price]\n")[0]  # without its price and peaks
    with pytest.raises(ConfigError, match="all of a preset's measurement tables as shipped"):
        accelerator_from_mapping(tomllib.loads(partial), "mine.toml")
    f = tmp_path / "mine.toml"
    f.write_text(text)
    r = cli_run("arch", "show", f)
    assert r.exit_code == 1 and r.output.startswith("Error: ") and r.output.count("\n") == 1


def _variant(**table) -> str:
    """The H100 as a file named ``h100-96g`` with 96 GiB HBM and ``table``'s keys."""
    lines = [
        line
        for line in accelerator_to_toml(preset("h100")).splitlines()
        if not line.startswith(("name", "hbm_gib"))
    ]
    lines += ['name = "h100-96g"', "hbm_gib = 96"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def test_a_variant_that_names_its_preset_keeps_the_measurements():
    h100 = preset("h100")
    acc = accelerator_from_mapping(tomllib.loads(_variant(measured_as="h100")))
    assert acc.hbm_bytes == 96 * 2**30 and acc.profile_name == "h100"
    assert device_profile(acc) == device_profile(h100) != generic_profile()
    # and with more HBM bandwidth too, which the silicon match alone would lose
    faster = accelerator_from_mapping(
        tomllib.loads(_variant(measured_as="h100").replace("3.35e+12", "4e+12"))
    )
    assert device_profile(faster) == device_profile(h100)


def test_a_variant_naming_no_profile_is_refused_naming_the_preset():
    with pytest.raises(ConfigError) as e:
        accelerator_from_mapping(tomllib.loads(_variant()), "mine.toml")
    msg = str(e.value)
    assert "mine.toml [accelerator]" in msg and "of preset h100, h800 and h200" in msg
    assert "named 'h100-96g'" in msg and 'measured_as = "h100"' in msg


def test_measured_as_empty_models_the_chip_from_its_fields_alone():
    acc = accelerator_from_mapping(tomllib.loads(_variant(measured_as="")))
    assert acc.measured_as == "" and acc.profile_name == "h100-96g"
    assert device_profile(acc) == device_profile(preset("h100"))  # the silicon match stays
    slower = accelerator_from_mapping(
        tomllib.loads(_variant(measured_as="").replace("3.35e+12", "4e+12"))
    )
    assert device_profile(slower) == generic_profile()


def test_measured_as_must_name_a_preset_reported_with_every_other_problem(cli_run, tmp_path):
    text = _variant(measured_as="h1000").replace("clock_hz = 1.83e+09", "clock_hz = -1")
    with pytest.raises(ConfigError) as e:
        accelerator_from_mapping(tomllib.loads(text))
    assert "measured_as = 'h1000' must name a preset (tpuv4" in str(e.value)
    assert "clock_hz = -1" in str(e.value)
    f = tmp_path / "bad.toml"
    f.write_text(text)
    r = cli_run("arch", "show", f)
    assert r.exit_code == 1 and r.output.startswith("Error: ") and r.output.count("\n") == 1


def test_a_file_named_as_its_preset_is_that_preset_or_measured_as_it():
    text = accelerator_to_toml(preset("h100"))
    assert accelerator_from_mapping(tomllib.loads(text)) == preset("h100")
    more = accelerator_from_mapping(tomllib.loads(text.replace("hbm_gib = 80", "hbm_gib = 96")))
    assert more.measured_as == "h100"


def test_toml_takes_no_other_output_option(cli_run):
    r = cli_run("arch", "show", "h100", "--toml", "--json")
    assert r.exit_code != 0 and "--toml prints the design alone" in r.output


@pytest.mark.parametrize("name", ["v100", "b200"])
def test_the_example_files_are_their_presets_in_every_figure(name, cli_run):
    """The examples name the preset they copy (``measured_as``): every figure of ``arch
    show`` is the preset's (before, their harvesting, board power and price were lost)."""
    path = Path(__file__).parents[1] / "examples" / f"accelerator_{name}.toml"
    mine = json.loads(cli_run("arch", "show", path, "--json").stdout)
    theirs = json.loads(cli_run("arch", "show", name, "--json").stdout)
    assert mine.pop("name") == f"{name}-example" and mine.pop("measured_as") == name
    theirs.pop("name")
    assert mine == theirs
    assert f"measured as        preset {name}'s" in cli_run("arch", "show", path).stdout
