"""``phaze validate serve``: every published serving point is evaluated at its layout or
listed as waiting, none is fitted, and the held-out mean meets its target."""

from __future__ import annotations

import json

from click.testing import CliRunner

from phaze.cli import cli
from phaze.serving_validation import FORMATS_MODELLED, load_points


def test_validate_serve_meets_its_target_with_every_point_held_out():
    result = CliRunner().invoke(cli, ["validate", "serve", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    rows, summary = doc["rows"], doc["summary"]
    assert doc["within_target"] and summary["held_out"]["mean_abs_error_pct"] <= 15.0
    assert not any(r["fitted"] for r in rows) and summary["fitted"]["evaluated"] == 0
    evaluated = [r for r in rows if r["status"] == "evaluated"]
    assert len(evaluated) >= 5
    assert {r["kind"] for r in evaluated} >= {"decode-batch1", "ttft-batch1", "static-throughput"}
    # a point waits exactly when it ran a weight format the model does not have yet
    formats = {p.case: p.weight_format for p in load_points()}
    for r in rows:
        assert (r["status"] == "waiting") == (formats[r["case"]] not in FORMATS_MODELLED), r
        assert r["source"]


def test_validate_serve_fails_a_target_it_misses():
    result = CliRunner().invoke(cli, ["validate", "serve", "--held-out-mean-pct", "1"])
    assert result.exit_code == 3
    assert "held-out mean |error|" in result.output
