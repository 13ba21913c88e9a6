"""The h800 preset: the H100 SXM's die, memory, rates and power, NVLink cut to 400 GB/s; the
arch listing marks presets without published runs."""

import dataclasses
import json

from click.testing import CliRunner

from arch_space.perf.device import device_profile
from arch_space.presets import NVLINK_BYTES_PER_S, PUBLISHED, preset
from phaze.cli import cli
from phaze.validation.published_runs import default_registry


def test_h800_differs_from_h100_only_in_nvlink():
    h100, h800 = preset("h100"), preset("h800")
    assert dataclasses.replace(h800, name="h100") == h100
    assert PUBLISHED["h800"] == PUBLISHED["h100"]
    assert device_profile(h800) == device_profile(h100)
    # data sheets: 400 GB/s against 900 GB/s, both directions together
    assert (NVLINK_BYTES_PER_S["h800"], NVLINK_BYTES_PER_S["h100"]) == (200e9, 450e9)


def test_arch_list_counts_published_runs_from_the_registry():
    out = CliRunner().invoke(cli, ["arch", "list", "--json"])
    assert out.exit_code == 0, out.output
    docs = {d["name"]: d for d in json.loads(out.output)["accelerators"]}
    runs = [r.arch for r in default_registry().runs]
    assert docs["h800"]["published_runs"] == runs.count("h800") == 1  # DeepSeek-V3's
    assert docs["h100"]["published_runs"] == runs.count("h100") > 0
    assert docs["h200"]["published_runs"] == runs.count("h200") == 0
    assert docs["h800"]["nvlink_bytes_per_s"] == 200e9
    table = CliRunner().invoke(cli, ["arch", "list"]).output
    h200_row = next(line for line in table.splitlines() if line.startswith("h200"))
    assert h200_row.rstrip().endswith("none")
