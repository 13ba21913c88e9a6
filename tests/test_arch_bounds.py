"""Accelerator and space TOML files are held to physical ranges (arch_space/data/bounds.toml):
a value no chip has is one ConfigError naming the file, every field out of range, its value
and the range; the presets, examples and shipped spaces lie inside; docs/cli.md states them."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from arch_space import preset
from arch_space.bounds import field_bounds
from arch_space.config import ACCELERATOR_TOML_KEYS, accelerator_from_mapping, accelerator_to_toml
from arch_space.presets import preset_names
from arch_space.space import Space, space_names
from phaze_common.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent

_A100 = accelerator_to_toml(preset("a100"))


def _with(text: str, **values: str) -> str:
    """``text`` with each ``key = value`` line replaced (or added)."""
    for key, value in values.items():
        text, n = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", text)
        text += "" if n else f"{key} = {value}\n"
    return text


def test_a_phz_clock_is_refused_naming_the_file_field_value_and_range(tmp_path, cli_run):
    path = tmp_path / "fast.toml"
    path.write_text(_with(_A100, clock_hz="1.53e15"))
    r = cli_run("arch", "show", path)
    assert r.exit_code == 1, r.output
    assert r.output.splitlines() == [
        f"Error: {path} [accelerator]: clock_hz = 1.53e+15 is outside the physical range "
        "[1e+08, 1e+10] Hz"
    ]


def test_every_field_out_of_range_is_reported_at_once():
    text = _with(
        _A100,
        num_tc="1000000",
        hbm_gib="80000000000",
        hbm_bandwidth_bytes_per_s="2e20",
        clock_hz="1.41e3",
        hbm_stacks="1000",
        formats="{ bf16 = 1.0, int8 = 512.0 }",
    )
    with pytest.raises(ConfigError) as e:
        accelerator_from_mapping(tomllib.loads(text), "mine.toml")
    message = str(e.value)
    for part in (
        "mine.toml [accelerator]: num_tc = 1000000 is outside the physical range [1, 65536]",
        "hbm_gib = 80000000000 is outside the physical range [0.0625, 4096] GiB",
        "hbm_bandwidth_bytes_per_s = 2e+20 is outside the physical range [1e+09, 1e+15] B/s",
        "clock_hz = 1410.0 is outside the physical range [1e+08, 1e+10] Hz",
        "hbm_stacks = 1000 is outside the physical range [0, 64]",
        "formats.int8 = 512.0 is outside the physical range [0.015625, 64] x bf16",
    ):
        assert part in message, message
    assert "\n" not in message


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_lies_inside_the_ranges(name):
    acc = preset(name)
    assert accelerator_from_mapping(tomllib.loads(accelerator_to_toml(acc))) == acc


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.toml")), ids=lambda p: p.name)
def test_every_example_lies_inside_the_ranges(path):
    accelerator_from_mapping(tomllib.loads(path.read_text()), str(path))


@pytest.mark.parametrize("name", space_names())
def test_every_shipped_space_s_designs_lie_inside_the_accelerator_ranges(name):
    space = Space.named(name)
    bounds = field_bounds("accelerator")
    for key, (field_name, unit) in ACCELERATOR_TOML_KEYS.items():
        values = getattr(space, field_name, None)
        if key not in bounds or values is None:
            continue
        for v in values if isinstance(values, tuple) else (values,):
            v = v / unit if unit else v
            assert bounds[key].low <= v <= bounds[key].high, (name, key, v)


def test_a_space_s_clock_hbm_area_power_and_fractions_are_bounded(tmp_path):
    text = (ROOT / "arch_space/data/space_tiny.toml").read_text()
    text = _with(
        text,
        clock_hz="1.05e15",
        hbm_gib="[16, 1e9]",
        budget_mm2="1e7",
        power_budget_w="5e8",
        area_fraction_max="3.0",
        bytes_per_element="100",
    )
    path = tmp_path / "s.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        Space.from_toml(path)
    message = str(e.value)
    for part in (
        f"{path} [space]: clock_hz = 1.05e+15 is outside the physical range [1e+08, 1e+10] Hz",
        "hbm_gib = 1000000000 is outside the physical range [0.0625, 4096] GiB",
        "budget_mm2 = 1e+07 is outside the physical range [1, 70000] mm2",
        "power_budget_w = 5e+08 is outside the physical range [1, 30000] W",
        "area_fraction_max = 3.0 is outside the physical range [0, 1]",
        "bytes_per_element = 100 is outside the physical range [1, 8] B",
    ):
        assert part in message, message


def test_a_gemm_dimension_is_bounded(cli_run):
    r = cli_run("arch", "show", "h100", "--gemm", "1000000000,1000000000,1000000000")
    assert r.exit_code == 2, r.output
    assert "each in [1, 1000000]" in r.output and "years" not in r.output
    assert cli_run("arch", "show", "h100", "--gemm", "8192,1000000,8192").exit_code == 0


def test_docs_state_every_range():
    text = (ROOT / "docs/cli.md").read_text()
    table = text[text.index("| key | range | unit |") :].split("\n\n")[0].splitlines()
    for section in ("accelerator", "space"):
        for key, b in field_bounds(section).items():
            row = next((line for line in table if line.startswith(f"| `{key}`")), "")
            assert f"{b.low:g}" in row and f"{b.high:g}" in row, (key, row)
