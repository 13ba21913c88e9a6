"""A chip is one file: ``phaze arch show NAME --toml`` writes a preset with the measurements
it takes (``measured_as``), and the file evaluates as the preset; a file with a preset's
silicon under another name says which preset it is measured as, or is refused."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

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


def test_the_file_names_the_measurements_it_takes_with_their_sources():
    text = preset_to_toml("h200")
    assert 'measured_as = "h200"' in text
    assert "devices.toml [h200]: the table of [h100]" in text
    assert "harvest.toml [preset.h200]: GH100 full die" in text
    h100 = preset_to_toml("h100")
    assert "system.toml [host.profile.dgx-h100]: 700 W" in h100
    assert "cost.toml [price] h100: 27500 USD, Raymond James" in h100
    acc = accelerator_from_mapping(tomllib.loads(text))
    assert acc.measured_as == "h200" and device_profile(acc) == device_profile(preset("h200"))


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
