"""``phaze validate serve``: every published serving point is evaluated at its layout or
listed as waiting, none is fitted; the held-out mean against its target."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from phaze.cli import cli
from phaze.validation.serving import FORMATS_MODELLED, evaluate_row, load_points


def _validate() -> dict:
    result = CliRunner().invoke(cli, ["validate", "serve", "--json"])
    assert result.exit_code in (0, 3), result.output
    doc = json.loads(result.stdout)
    assert doc["within_target"] == (result.exit_code == 0)
    return doc


def test_validate_serve_evaluates_every_modelled_format_with_every_point_held_out():
    doc = _validate()
    rows, summary = doc["rows"], doc["summary"]
    assert not any(r["fitted"] for r in rows) and summary["fitted"]["evaluated"] == 0
    evaluated = [r for r in rows if r["status"] == "evaluated"]
    assert summary["held_out"]["evaluated"] == len(evaluated) == 35
    assert summary["waiting"] == 4 and summary["infeasible"] == 0
    assert {r["kind"] for r in evaluated} == {
        "decode-batch1",
        "ttft-batch1",
        "static-throughput",
        "max-throughput",
    }
    # a point waits exactly when it ran a weight format the model does not have, or its
    # dataset's lengths are not collected (MLPerf's OpenOrca)
    points = {p.case: p for p in load_points()}
    for r in rows:
        p = points[r["case"]]
        assert (r["status"] == "waiting") == bool(p.waiting), r
        assert bool(p.waiting) == (
            p.weight_format not in FORMATS_MODELLED or p.input_tokens is None
        ), r
        assert r["source"]
    fmt = {r["case"]: points[r["case"]].weight_format for r in evaluated}
    fp8 = [r for r in evaluated if fmt[r["case"]] in ("fp8", "nvfp4")]
    assert len(fp8) == 8 and all(r["kind"] == "max-throughput" for r in fp8)
    # the gpt-fast weight-only points (int8, int4) and the ModelOpt NVFP4 point are evaluated
    narrow = [f for f in fmt.values() if f.startswith(("int8", "int4"))]
    assert len(narrow) == 3 and "nvfp4" in fmt.values()
    # the bf16 and fp16 points keep their accuracy
    bf16 = [abs(r["error_pct"]) for r in evaluated if fmt[r["case"]] in ("bf16", "fp16")]
    assert sum(bf16) / len(bf16) <= 15.0


def test_trtllm_fp8_points_run_their_checkpoints_fp8_kv_cache():
    """ModelOpt's checkpoints carry an FP8 KV cache and trtllm-bench keeps it ('auto'): the
    rows say so, and evaluated so a row holds twice the sequences in the same pages."""
    rows = [p for p in load_points() if p.source == "trtllm-perf-overview"]
    assert len(rows) == 8 and all(r.kv_format == "fp8" for r in rows)
    row = next(r for r in rows if r.input_tokens == r.output_tokens == 2048)
    fp8, bf16 = evaluate_row(row), evaluate_row(replace(row, kv_format="not stated"))
    batch = [int(r.layout.split("batch=")[1].split(",")[0]) for r in (fp8, bf16)]
    # about twice the sequences in the same pages (TensorRT-LLM's CUDA-graph batch sizes)
    assert batch == [120, 56]
    # twice the sequences, each step reading as many cache bytes and a little more compute:
    # up to twice the output rate, never more
    assert 1.5 < fp8.predicted / bf16.predicted < 2.0


@pytest.mark.slow
def test_validate_serve_meets_its_held_out_target():
    doc = _validate()
    held = doc["summary"]["held_out"]
    assert doc["within_target"] and held["mean_abs_error_pct"] <= 12.0
    assert held["max_abs_error_pct"] <= 35.0
    assert doc["target_held_out_max_abs_error_pct"] == 35.0


def test_validate_serve_fails_a_target_it_misses():
    result = CliRunner().invoke(cli, ["validate", "serve", "--held-out-mean-pct", "1"])
    assert result.exit_code == 3
    assert "held-out mean |error|" in result.output
    largest = CliRunner().invoke(cli, ["validate", "serve", "--held-out-max-pct", "1"])
    assert largest.exit_code == 3
    error = largest.output.strip().splitlines()[-1]
    assert error.startswith("Error: held-out max |error|") and "mean" not in error


def test_validate_serve_has_a_section_under_load_with_p50_and_p99_apart():
    doc = _validate()["under_load"]
    rows, summary = doc["rows"], doc["summary"]
    assert len(rows) >= 12 and not any(r["fitted"] for r in rows)
    assert {(r["metric"], r["percentile"]) for r in rows} == {
        ("ttft", 50),
        ("ttft", 99),
        ("tpot", 50),
        ("tpot", 99),
        ("e2e", 50),
        ("e2e", 99),
    }
    for r in rows:
        assert r["source"] and r["file"] and r["rate_per_s"] > 0 and r["strategy"]
        assert (r["predicted_s"] is None) == (r["status"] != "evaluated")
    assert summary["p50"]["points"] + summary["p99"]["points"] == len(rows)
    assert summary["target_mean_abs_error_pct"] == {"p50": 15.0, "p99": 25.0}
    p50 = [
        abs(r["error_pct"]) for r in rows if r["percentile"] == 50 and r["error_pct"] is not None
    ]
    assert summary["p50"]["mean_abs_error_pct"] == pytest.approx(sum(p50) / len(p50))
    # reported beside the steady-state rows, not part of their exit status
    text = CliRunner().invoke(cli, ["validate", "serve"]).output
    assert "Published latency under load" in text and "TPOT p99" in text
