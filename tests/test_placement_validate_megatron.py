"""`validate megatron` (Korthikanti et al. 2022, Table 5) runs end to end: slow, the full pipeline."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from phaze.cli.validate_megatron_cmd import TABLE5, megatron


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
