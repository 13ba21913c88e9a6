"""`validate megatron` (Korthikanti et al. 2022, Table 5) runs end to end: slow, the full pipeline."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from phaze.cli import cli
from phaze.cli.validate_fit import coordinate_fit, golden_min
from phaze.cli.validate_megatron_cmd import FIT_MODELS, TABLE5, megatron


@pytest.mark.slow
def test_validate_megatron_reports_every_row():
    r = CliRunner().invoke(megatron, ["--json"])
    assert r.exit_code in (0, 3), r.output
    doc = json.loads(r.output[: r.output.rindex("}") + 1])
    assert len(doc["rows"]) == 2 * len(TABLE5)
    assert all(row["predicted"] > 0 for row in doc["rows"])
    assert doc["rows"][0]["measured"] == 1.42


def test_table5_is_the_published_data():
    assert [(r.model, r.gpus, r.tp * r.pp) for r in TABLE5] == [
        ("korthikanti-22b", 8, 8),
        ("korthikanti-175b", 64, 64),
        ("korthikanti-530b", 280, 280),
        ("korthikanti-1t", 512, 512),
    ]
    assert [(r.full_recompute_s, r.selective_sp_s) for r in TABLE5] == [
        (1.42, 1.10),
        (18.13, 13.75),
        (49.05, 37.83),
        (94.42, 71.49),
    ]


def test_golden_and_coordinate_fit_find_a_known_minimum():
    assert golden_min(lambda x: (x - 0.37) ** 2, 0.0, 1.0, 1e-4) == pytest.approx(0.37, abs=1e-3)
    best = coordinate_fit(
        lambda v: (v["a"] - 0.8) ** 2 + 3 * (v["b"] - 0.25) ** 2,
        {"a": 1.0, "b": 0.5},
        {"a": (0.7, 1.0), "b": (0.0, 1.0)},
    )
    assert best == pytest.approx({"a": 0.8, "b": 0.25}, abs=5e-3)


def test_fit_rows_are_part_of_table5():
    assert set(FIT_MODELS) < {r.model for r in TABLE5}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[h100]\nsustained_tensor_fraction = 0.8\n", "needs exactly one table \\[a100\\]"),
        ("[a100.fitted]\ncollective_compute_share = 1.5\n", "must be in \\(0, 1\\]"),
        ("[a100\n", "cannot be read"),
    ],
)
def test_bad_calibration_file_is_one_error_line(tmp_path, text, message):
    path = tmp_path / "cal.toml"
    path.write_text(text)
    r = CliRunner().invoke(cli, ["validate", "megatron", "--calibration", str(path)])
    assert r.exit_code == 1, r.output  # a ConfigError
    lines = [x for x in r.output.splitlines() if x.startswith("Error:")]
    assert len(lines) == 1 and re.search(message, lines[0]), r.output
    assert "Traceback" not in r.output
