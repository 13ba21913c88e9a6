"""`validate megatron` (Korthikanti et al. 2022, Table 5) runs end to end: slow, the full pipeline."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from phaze.cli import cli
from phaze.cli.validate_megatron_cmd import HELD_OUT_SUITE, TABLE5_SUITE, fit_models
from phaze.validation.published_runs import (
    default_registry,
    flops_per_iteration,
    measured_iteration_s,
)
from phaze.validation.rows import coordinate_fit, golden_min


def _suite(name):
    return [r for r in default_registry().runs if r.suite == name]


@pytest.mark.slow
def test_validate_megatron_reports_every_row():
    r = CliRunner().invoke(cli, ["validate", "megatron", "--json"])
    assert r.exit_code in (0, 3), r.output
    doc = json.loads(r.output[: r.output.rindex("}") + 1])
    assert len(doc["rows"]) == len(_suite(TABLE5_SUITE)) == 8
    assert all(row["predicted"] > 0 for row in doc["rows"])
    assert doc["rows"][0]["measured"] == 1.42


def test_table5_is_the_published_data():
    rows = _suite(TABLE5_SUITE)
    models = [r.model for r in rows[::2]]
    assert models == ["korthikanti-22b", "korthikanti-175b", "korthikanti-530b", "korthikanti-1t"]
    assert [r.gpus for r in rows[::2]] == [8, 64, 280, 512]
    assert [
        (full.measured, sel.measured) for full, sel in zip(rows[::2], rows[1::2], strict=True)
    ] == [
        (1.42, 1.10),
        (18.13, 13.75),
        (49.05, 37.83),
        (94.42, 71.49),
    ]
    assert all("recompute=full,sp=off" in r.strategy for r in rows[::2])
    assert all("recompute=selective,sp=on" in r.strategy for r in rows[1::2])


def test_golden_and_coordinate_fit_find_a_known_minimum():
    assert golden_min(lambda x: (x - 0.37) ** 2, 0.0, 1.0, 1e-4) == pytest.approx(0.37, abs=1e-3)
    best = coordinate_fit(
        lambda v: (v["a"] - 0.8) ** 2 + 3 * (v["b"] - 0.25) ** 2,
        {"a": 1.0, "b": 0.5},
        {"a": (0.7, 1.0), "b": (0.0, 1.0)},
    )
    assert best == pytest.approx({"a": 0.8, "b": 0.25}, abs=5e-3)


def test_fit_rows_are_part_of_table5():
    assert fit_models() == ("korthikanti-22b", "korthikanti-530b")
    table5 = _suite(TABLE5_SUITE)
    assert {r.model for r in table5 if r.fitted} == set(fit_models())
    # no A100 row outside Table 5 is marked fitted: the A100's two parameters came from these
    a100 = [r.id for r in default_registry().runs if r.fitted and r.arch == "a100"]
    assert a100 == [r.id for r in table5 if r.fitted]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[h100]\nsustained_tensor_fraction = 0.8\n", "needs exactly one table \\[a100\\]"),
        ("[a100.fitted]\ncollective_compute_share = 1.5\n", "must be in \\(0, 1\\]"),
        ("[a100\n", "cal.toml: not valid TOML"),
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


def test_held_out_runs_are_the_published_data():
    runs = _suite(HELD_OUT_SUITE)
    assert len(runs) == 17 and not any(r.fitted for r in runs)
    by_label = {r.label: r for r in runs}
    # SC21 Table 1, 1T: 163 TFLOP/s per GPU on 3072 GPUs; Korthikanti et al. 530B at d = 8
    one_t = by_label["sc21 T1 1T t8 p64 d6"]
    expected = flops_per_iteration("sc21", "megatron-1t", 2048, 3072) / (163e12 * 3072)
    assert measured_iteration_s(one_t) == pytest.approx(expected)
    assert measured_iteration_s(by_label["korthikanti 530B sel+SP t8 p35 d8"]) == 39.15
    # every row says what its source leaves open, and none is a Table 5 row
    assert {r.model for r in runs}.isdisjoint({"korthikanti-22b", "korthikanti-1t"})
    assert all(set(r.assumed) <= {"micro_batch", "virtual_stages", "pp"} for r in runs)


def test_sc21_flop_count_is_four_forward_passes_and_three_logit_passes():
    # full recompute: forward, recomputed forward and a backward of twice the forward's
    # FLOPs per block (24 B s h^2 + 4 B s^2 h each), three passes of the logits (2 B s h V)
    b, s, layers, h, v = 3072, 2048, 128, 25600, 51200
    blocks = 4 * layers * (24 * b * s * h * h + 4 * b * s * s * h)
    flops = flops_per_iteration("sc21", "megatron-1t", s, b)
    assert flops == pytest.approx(blocks + 3 * 2 * b * s * h * v)


@pytest.mark.slow
def test_held_out_rows_are_informative_only():
    r = CliRunner().invoke(cli, ["validate", "megatron", "--json", "--held-out"])
    doc = json.loads(r.output[: r.output.rindex("}") + 1])
    more = doc["informative"]
    assert len(more["rows"]) == len(_suite(HELD_OUT_SUITE)) and more["tolerance_pct"] is None
    assert "within_tolerance" not in more
    assert r.exit_code == (0 if doc["within_tolerance"] else 3), r.output
